//! A CPU kernel for `x · Wᵀ` with many rows of `x` (prefill), both operands row-major along
//! the shared dimension: each output is a dot product, computed in 4 x 3 register blocks
//! (AVX-512 where the CPU has it, else AVX2/FMA) over cache-sized panels of the weights, in
//! parallel over weight rows.
//!
//! Numerically it is the same sum as candle's matmul in another order.
use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

/// Most rows of `x` this kernel takes: it re-reads each weight panel from L2 for every 4 rows,
/// so past a few hundred rows candle's packed GEMM (AVX-512 with the workspace's `gemm`
/// features) is faster. Measured on the 2-core AVX-512 dev box, T3 prefill, 2 threads: English
/// (at most 128 rows per call) 1294 ms here against 1443 ms with candle; Turbo (437 rows)
/// 2580 ms against 1751 ms.
pub(crate) const MAX_ROWS: usize = 256;

/// Weight rows per parallel task.
const NB: usize = 48;
/// Shared-dimension panel (4 rows of x and 3 of W stay in L1).
const KC: usize = 1024;

struct GemmNt;

impl CustomOp2 for GemmNt {
    fn name(&self) -> &'static str {
        "t3-gemm-nt"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(x), CpuStorage::F32(w)) = (s1, s2) else {
            candle_core::bail!("t3-gemm-nt: f32 only");
        };
        let (Some((x0, x1)), Some((w0, w1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("t3-gemm-nt: inputs must be contiguous");
        };
        let (m, k) = l1.shape().dims2()?;
        let (n, k2) = l2.shape().dims2()?;
        if k != k2 {
            candle_core::bail!("t3-gemm-nt: bad shapes {:?} x {:?}", l1.shape(), l2.shape());
        }
        let out = gemm_nt(&x[x0..x1], m, k, &w[w0..w1], n);
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

/// `x [m, k] · w [n, k]ᵀ -> [m, n]`, f32, on the CPU.
pub(crate) fn matmul_nt(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    x.apply_op2_no_bwd(w, &GemmNt)
}

/// Whether the fast kernel runs on this CPU (else candle's matmul is used).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn gemm_nt(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
    // Each task computes the [m, rows] block of its weight rows, then the blocks are
    // interleaved into the row-major [m, n] result.
    let blocks: Vec<(usize, Vec<f32>)> = w
        .par_chunks(NB * k)
        .enumerate()
        .map(|(t, wb)| {
            let rows = wb.len() / k;
            let mut c = vec![0f32; m * rows];
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `available()` checked AVX2/FMA and `has_avx512f()` AVX-512F; slices
            // bound every access.
            unsafe {
                if has_avx512f() {
                    avx512::panel(x, m, k, wb, rows, &mut c)
                } else {
                    avx2::panel(x, m, k, wb, rows, &mut c)
                }
            };
            (t * NB, c)
        })
        .collect();
    let mut out = vec![0f32; m * n];
    for (n0, c) in blocks {
        let rows = c.len() / m.max(1);
        for (i, r) in c.chunks_exact(rows.max(1)).enumerate() {
            out[i * n + n0..i * n + n0 + rows].copy_from_slice(r);
        }
    }
    out
}

/// The panel kernel for one instruction set: `$width` f32 lanes per register.
#[cfg(target_arch = "x86_64")]
macro_rules! simd_panel {
    ($mod:ident, $feat:literal, $vec:ty, $width:literal, $zero:ident, $load:ident, $fma:ident,
     $hsum:expr) => {
        mod $mod {
            use super::KC;
            use std::arch::x86_64::*;

            /// `c[r * cs + j] (+)= x[r, ..kc] · w[j, ..kc]` for an `MR x NR` block.
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)] // a micro-kernel: pointers, strides, a length
            unsafe fn micro<const MR: usize, const NR: usize>(
                x: *const f32,
                xs: usize,
                w: *const f32,
                ws: usize,
                kc: usize,
                c: *mut f32,
                cs: usize,
                accumulate: bool,
            ) {
                let mut acc: [[$vec; NR]; MR] = [[$zero(); NR]; MR];
                let body = kc / $width * $width;
                let mut i = 0;
                while i < body {
                    let mut wv: [$vec; NR] = [$zero(); NR];
                    for (j, v) in wv.iter_mut().enumerate() {
                        *v = $load(w.add(j * ws + i));
                    }
                    for (r, a) in acc.iter_mut().enumerate() {
                        let xv = $load(x.add(r * xs + i));
                        for j in 0..NR {
                            a[j] = $fma(xv, wv[j], a[j]);
                        }
                    }
                    i += $width;
                }
                let hsum = $hsum;
                for (r, a) in acc.iter().enumerate() {
                    for (j, v) in a.iter().enumerate() {
                        let mut s = hsum(*v);
                        for t in body..kc {
                            s += *x.add(r * xs + t) * *w.add(j * ws + t);
                        }
                        let p = c.add(r * cs + j);
                        *p = if accumulate { *p + s } else { s };
                    }
                }
            }

            /// Dispatches the edge blocks (fewer than 4 rows of x or 3 rows of w).
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn block(
                mr: usize,
                nr: usize,
                x: *const f32,
                xs: usize,
                w: *const f32,
                ws: usize,
                kc: usize,
                c: *mut f32,
                cs: usize,
                acc: bool,
            ) {
                macro_rules! go {
                    ($m:literal, $n:literal) => {
                        micro::<$m, $n>(x, xs, w, ws, kc, c, cs, acc)
                    };
                }
                match (mr, nr) {
                    (4, 3) => go!(4, 3),
                    (4, 2) => go!(4, 2),
                    (4, 1) => go!(4, 1),
                    (3, 3) => go!(3, 3),
                    (3, 2) => go!(3, 2),
                    (3, 1) => go!(3, 1),
                    (2, 3) => go!(2, 3),
                    (2, 2) => go!(2, 2),
                    (2, 1) => go!(2, 1),
                    (1, 3) => go!(1, 3),
                    (1, 2) => go!(1, 2),
                    _ => go!(1, 1),
                }
            }

            /// `c [m, rows] = x [m, k] · w [rows, k]ᵀ`.
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn panel(
                x: &[f32],
                m: usize,
                k: usize,
                w: &[f32],
                rows: usize,
                c: &mut [f32],
            ) {
                debug_assert!(x.len() >= m * k && w.len() >= rows * k && c.len() >= m * rows);
                let (xp, wp, cp) = (x.as_ptr(), w.as_ptr(), c.as_mut_ptr());
                let mut k0 = 0;
                while k0 < k {
                    let kc = KC.min(k - k0);
                    let mut i = 0;
                    while i < m {
                        let mr = 4.min(m - i);
                        let mut j = 0;
                        while j < rows {
                            let nr = 3.min(rows - j);
                            block(
                                mr,
                                nr,
                                xp.add(i * k + k0),
                                k,
                                wp.add(j * k + k0),
                                k,
                                kc,
                                cp.add(i * rows + j),
                                rows,
                                k0 > 0,
                            );
                            j += nr;
                        }
                        i += mr;
                    }
                    k0 += kc;
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
simd_panel!(
    avx2,
    "avx2,fma",
    __m256,
    8,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_fmadd_ps,
    |v: __m256| {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }
);

#[cfg(target_arch = "x86_64")]
simd_panel!(
    avx512,
    "avx512f",
    __m512,
    16,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_fmadd_ps,
    |v: __m512| _mm512_reduce_add_ps(v)
);

/// Whether the AVX-512 panel kernel can run on this CPU.
#[cfg(target_arch = "x86_64")]
fn has_avx512f() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| std::is_x86_feature_detected!("avx512f"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn matches_matmul_on_edge_shapes() -> candle_core::Result<()> {
        if !available() {
            return Ok(());
        }
        let dev = Device::Cpu;
        for &(m, k, n) in &[
            (5usize, 20usize, 7usize),
            (9, 1030, 100),
            (162, 64, 49),
            (1, 8, 1),
        ] {
            let x = Tensor::randn(0f32, 1., (m, k), &dev)?;
            let w = Tensor::randn(0f32, 1., (n, k), &dev)?;
            let want = x.matmul(&w.t()?)?;
            let got = matmul_nt(&x, &w)?;
            let err = (want - &got)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(err < 1e-4 * (k as f32).sqrt(), "{m}x{k}x{n}: {err}");
        }
        Ok(())
    }
}
