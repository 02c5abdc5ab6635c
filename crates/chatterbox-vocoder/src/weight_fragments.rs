//! The host side of the CUDA convolution's weights (`cuda_conv`, for hifigan.py's `Conv1d`): a
//! `(C_out, C_in, K)` f32 weight split into TF32 `hi` and remainder `lo` and laid out as the
//! operands of either kernel form. Plain Rust, so that the tests run without a GPU.
use crate::split_precision::{f16_pair, split};

/// Output channels per block and input channels per group (`BM`, `BK` of `common.cuh`).
pub(crate) const BM: usize = 64;
pub(crate) const BK: usize = 8;

/// The kernel a convolution runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// `kernel.cu`: warp-level `mma.sync`, sm_80 and newer.
    Mma,
    /// `kernel_sm90.cu`: warpgroup `wgmma` from shared memory, sm_90 (Hopper) only.
    Wgmma,
}

/// `weight` (`c_out * c_in * k` values, row-major) laid out for `form`: for each group of 8
/// input channels, tap and block of 64 output channels, 1024 floats (zeros past `c_in` and
/// `c_out`); `ceil(c_in / 8) * k * ceil(c_out / 64) * 1024` floats in all.
///
/// - [`Form::Mma`]: per 16 output channels, the mma.sync fragments of each lane (with
///   `o = 16 m + lane / 4` and `c = 8 cc + lane % 4`): the TF32 fragment of `2^11 hi` at
///   `(o, c), (o + 8, c), (o, c + 4), (o + 8, c + 4)`, then the f16 fragment of depth 16
///   (`2^11 lo` of channels `c, c + 4`, then `hi` of the same, at rows `o` and `o + 8`).
///   A warp's loads of either are 512 contiguous bytes.
/// - [`Form::Wgmma`]: K-major core matrices (8 output channels x 16 bytes) without swizzling,
///   8 along the output channels (128 bytes apart) and 2 along K (1024 bytes apart): first
///   the TF32 `2^11 hi` (channels 0-3, then 4-7 of the group), then the f16 `[2^11 lo, hi]`
///   (`2^11 lo` of channels 0-7, then `hi` of channels 0-7).
pub(crate) fn layout(form: Form, weight: &[f32], c_out: usize, c_in: usize, k: usize) -> Vec<f32> {
    assert_eq!(weight.len(), c_out * c_in * k, "weight size");
    let (chunks, m_blocks) = (c_in.div_ceil(BK), c_out.div_ceil(BM));
    let parts = |o: usize, c: usize, j: usize| {
        if o < c_out && c < c_in {
            split(weight[(o * c_in + c) * k + j])
        } else {
            (0.0, 0.0)
        }
    };
    let mut w = vec![0f32; chunks * k * m_blocks * 1024];
    for cc in 0..chunks {
        for j in 0..k {
            for mb in 0..m_blocks {
                let block = &mut w[((cc * k + j) * m_blocks + mb) * 1024..][..1024];
                let parts = |o: usize, c: usize| parts(BM * mb + o, BK * cc + c, j);
                match form {
                    Form::Mma => mma_block(block, parts),
                    Form::Wgmma => wgmma_block(block, parts),
                }
            }
        }
    }
    w
}

/// One block of [`Form::Mma`]; `parts(o, c)` splits the weight at output channel `o` and
/// input channel `c` of the block.
fn mma_block(block: &mut [f32], parts: impl Fn(usize, usize) -> (f32, f32)) {
    for m in 0..BM / 16 {
        for lane in 0..32 {
            let tile = m * 256;
            let (at, at_f16) = (tile + lane * 4, tile + 128 + lane * 4);
            let (o, c) = (16 * m + lane / 4, lane % 4);
            for (i, (d_o, d_c)) in [(0, 0), (8, 0), (0, 4), (8, 4)].into_iter().enumerate() {
                block[at + i] = parts(o + d_o, c + d_c).0 * 2048.0;
            }
            for (i, d_o) in [0, 8].into_iter().enumerate() {
                let (a, b) = (parts(o + d_o, c), parts(o + d_o, c + 4));
                block[at_f16 + i] = f16_pair(a.1 * 2048.0, b.1 * 2048.0);
                block[at_f16 + 2 + i] = f16_pair(a.0, b.0);
            }
        }
    }
}

/// One block of [`Form::Wgmma`], as [`mma_block`].
fn wgmma_block(block: &mut [f32], parts: impl Fn(usize, usize) -> (f32, f32)) {
    for kc in 0..2 {
        for mc in 0..BM / 8 {
            for r in 0..8 {
                let o = 8 * mc + r;
                let row = (kc * 8 + mc) * 32 + r * 4;
                for e in 0..4 {
                    block[row + e] = parts(o, 4 * kc + e).0 * 2048.0;
                    let (a, b) = (parts(o, 2 * e), parts(o, 2 * e + 1));
                    block[512 + row + e] = match kc {
                        0 => f16_pair(a.1 * 2048.0, b.1 * 2048.0),
                        _ => f16_pair(a.0, b.0),
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 10 x 11 x 2 weight whose values name their place: w[o, c, j] = 1 + o + c / 16 + j / 512
    /// plus a remainder below TF32's precision, so that `hi` and `lo` are both nonzero.
    fn weight() -> Vec<f32> {
        let mut w = Vec::new();
        for o in 0..10 {
            for c in 0..11 {
                for j in 0..2 {
                    w.push(1.0 + o as f32 + c as f32 / 16.0 + j as f32 / 512.0 + 1e-5);
                }
            }
        }
        w
    }

    fn at(w: &[f32], o: usize, c: usize, j: usize) -> (f32, f32) {
        split(w[(o * 11 + c) * 2 + j])
    }

    /// The two f16 halves of a pair as f32.
    fn halves(v: f32) -> (f32, f32) {
        let b = v.to_bits();
        let h = |x: u32| half::f16::from_bits(x as u16).to_f32();
        (h(b & 0xffff), h(b >> 16))
    }

    #[test]
    fn wgmma_core_matrices_hold_each_weight_once() {
        let w = weight();
        let l = layout(Form::Wgmma, &w, 10, 11, 2);
        // 2 groups of 8 channels x 2 taps x 1 block of 64 outputs
        assert_eq!(l.len(), 2 * 2 * 1024);
        // group 1, tap 1: channel 8 + 1 = 9 is in the first TF32 core matrices (c < 4) at
        // output 9: core matrix mc = 1, row 1, element 1
        let block = &l[(2 + 1) * 1024..][..1024];
        let (hi, lo) = at(&w, 9, 9, 1);
        assert!(lo != 0.0);
        assert_eq!(block[32 + 4 + 1], hi * 2048.0);
        // the f16 part: 2^11 lo of channels 8, 9 in the pair e = 0, then their hi (kc = 1)
        let (hi8, lo8) = at(&w, 9, 8, 1);
        assert_eq!(
            halves(block[512 + 32 + 4]),
            (f16(lo8 * 2048.0), f16(lo * 2048.0))
        );
        assert_eq!(halves(block[512 + 256 + 32 + 4]), (f16(hi8), f16(hi)));
        // channel 11 and up and output 10 and up are zeros
        assert_eq!(block[32 + 4 + 3], 0.0); // channel 11
        assert_eq!(block[32 + 8], 0.0); // output 10
        assert_eq!(
            halves(block[512 + 256 + 32 + 4 + 1]),
            (f16(at(&w, 9, 10, 1).0), 0.0)
        );
    }

    #[test]
    fn mma_fragments_hold_each_weight_once() {
        let w = weight();
        let l = layout(Form::Mma, &w, 10, 11, 2);
        assert_eq!(l.len(), 2 * 2 * 1024);
        // group 0, tap 1, tile 0: lane 4 * 1 + 2 holds rows 1, 9 and channels 2, 6
        let tile = &l[1024..][..256];
        let lane = 6;
        let want = [(1, 2), (9, 2), (1, 6), (9, 6)].map(|(o, c)| at(&w, o, c, 1).0 * 2048.0);
        assert_eq!(&tile[lane * 4..][..4], &want);
        let f = &tile[128 + lane * 4..][..4];
        let lo = |o, c| f16(at(&w, o, c, 1).1 * 2048.0);
        let hi = |o, c| f16(at(&w, o, c, 1).0);
        assert_eq!(halves(f[0]), (lo(1, 2), lo(1, 6)));
        assert_eq!(halves(f[1]), (lo(9, 2), lo(9, 6)));
        assert_eq!(halves(f[2]), (hi(1, 2), hi(1, 6)));
        assert_eq!(halves(f[3]), (hi(9, 2), hi(9, 6)));
        // lane 9 holds rows 2 and 10 of channel 1: row 10 is past c_out, a zero
        assert_eq!(tile[9 * 4], at(&w, 2, 1, 1).0 * 2048.0);
        assert_eq!(tile[9 * 4 + 1], 0.0);
    }

    fn f16(v: f32) -> f32 {
        half::f16::from_f32(v).to_f32()
    }
}
