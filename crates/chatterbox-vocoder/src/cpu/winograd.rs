//! "Same"-padded stride-1 `conv1d` on channels-last buffers with Winograd's minimal filtering:
//! fewer multiplications than a direct convolution, with the input activation, bias and
//! residual fused in.
//!
//! Output tiles of `m = 4` samples (per dilation phase, so a dilated convolution is `d`
//! undilated ones over the decimated signal) are computed as
//! `Y = A^T [ sum_j (G g_j) . (B^T d_{tile + j}) ]`, where the kernel is split into chunks `g_j` of
//! `r = 4` taps (zero-padded) and chunk `j` reads the input tile `j` tiles further on, so every
//! transformed input tile is shared by all chunks. Per transform point the channel mixing is a
//! GEMM. Kernels of 3 taps use F(4, 3) (6 points), longer ones F(4, 4) (7 points): 2x fewer
//! multiply-adds than direct for k = 7 and 11, 1.7x for k = 3. Points 0, 1, -1, 2, -2 (and 1/2),
//! infinity: the f32 error stays within a few times that of a direct convolution.
use super::conv::PreAct;
use super::vmath::sin;
use super::SendPtr;
use rayon::prelude::*;
use std::mem::MaybeUninit;

const TILE: usize = 4;

/// Output tiles per work item (per dilation phase).
fn block_tiles(c: usize) -> usize {
    // ~64 KiB of transformed input per point: measured best of 4..32 K floats / channel.
    (16_384 / c.max(1)).clamp(16, 1024)
}

/// The Winograd matrices of F(m, r) in correlation form: `a_t` `(m, n)`, `g` `(n, r)`, `b_t`
/// `(n, n)` with `n = m + r - 1`, from the evaluation points `points` plus infinity (Toom-Cook:
/// `A^T = E_m^T`, `G = E_r`, `B^T = (E_n^-1)^T`, `E_k` evaluating degree `k - 1` polynomials).
fn matrices(m: usize, r: usize, points: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let n = m + r - 1;
    debug_assert_eq!(points.len() + 1, n);
    let eval = |k: usize| -> Vec<f64> {
        let mut e = vec![0f64; n * k];
        for (i, &p) in points.iter().enumerate() {
            for j in 0..k {
                e[i * k + j] = p.powi(j as i32);
            }
        }
        e[(n - 1) * k + k - 1] = 1.0;
        e
    };
    let em = eval(m);
    let mut a_t = vec![0f64; m * n];
    for i in 0..n {
        for j in 0..m {
            a_t[j * n + i] = em[i * m + j];
        }
    }
    let g = eval(r);
    // Invert E_n (Gauss-Jordan with partial pivoting; n <= 7, entries small rationals).
    let mut a = eval(n);
    let mut inv = vec![0f64; n * n];
    for i in 0..n {
        inv[i * n + i] = 1.0;
    }
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&x, &y| a[x * n + col].abs().total_cmp(&a[y * n + col].abs()))
            .unwrap_or(col);
        for j in 0..n {
            a.swap(col * n + j, piv * n + j);
            inv.swap(col * n + j, piv * n + j);
        }
        let d = a[col * n + col];
        for j in 0..n {
            a[col * n + j] /= d;
            inv[col * n + j] /= d;
        }
        for row in 0..n {
            if row != col {
                let f = a[row * n + col];
                if f != 0.0 {
                    for j in 0..n {
                        a[row * n + j] -= f * a[col * n + j];
                        inv[row * n + j] -= f * inv[col * n + j];
                    }
                }
            }
        }
    }
    // B^T = inv^T
    let mut b_t = vec![0f64; n * n];
    for i in 0..n {
        for j in 0..n {
            b_t[i * n + j] = inv[j * n + i];
        }
    }
    (a_t, g, b_t)
}

/// F(4, 3)'s input transform with the fractions moved into `G` (Lavin & Gray's integers):
/// `B^T = diag(SCALE_6) * (E_6^-1)^T` for the points 0, 1, -1, 2, -2, infinity.
const BT6: [[f32; 6]; 6] = [
    [4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
    [0.0, 4.0, 4.0, -1.0, -1.0, 0.0],
    [0.0, -4.0, 4.0, 1.0, -1.0, 0.0],
    [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
    [0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
    [0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
];
const SCALE_6: [f64; 6] = [4.0, 6.0, 6.0, 24.0, 24.0, 1.0];
const AT6: [[f32; 6]; TILE] = [
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
    [0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
    [0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
    [0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
];
/// F(4, 4) with the points 0, 1, -1, 2, -2, 1/2, infinity, scaled to integers likewise.
const BT7: [[f32; 7]; 7] = [
    [4.0, -8.0, -5.0, 10.0, 1.0, -2.0, 0.0],
    [0.0, -4.0, 4.0, 9.0, -1.0, -2.0, 0.0],
    [0.0, -4.0, 12.0, -7.0, -3.0, 2.0, 0.0],
    [0.0, 2.0, -3.0, -4.0, 3.0, 2.0, 0.0],
    [0.0, 2.0, -5.0, 0.0, 5.0, -2.0, 0.0],
    [0.0, 128.0, 0.0, -160.0, 0.0, 32.0, 0.0],
    [0.0, -4.0, 8.0, 5.0, -10.0, -1.0, 2.0],
];
const SCALE_7: [f64; 7] = [4.0, 6.0, 18.0, 72.0, 120.0, 45.0, 2.0];
const AT7: [[f32; 7]; TILE] = [
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
    [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 0.0],
    [0.0, 1.0, 1.0, 4.0, 4.0, 0.25, 0.0],
    [0.0, 1.0, -1.0, 8.0, -8.0, 0.125, 1.0],
];

/// A "same"-padded stride-1 `Conv1d(c_in, c_out, k, dilation)` (odd `k >= 3`) on
/// channels-last data.
#[derive(Debug, Clone)]
pub(crate) struct WinogradConv {
    c_in: usize,
    c_out: usize,
    dilation: usize,
    padding: usize,
    /// Number of kernel chunks `J` (of `n - TILE + 1` taps each).
    chunks: usize,
    /// Transform points: 6 (F(4, 3)) or 7 (F(4, 4)).
    n: usize,
    /// `[xi][j][c_in][c_out]`: `G g_j / scale` at point `xi`, a `(c_in, c_out)` GEMM operand.
    u: Vec<f32>,
    bias: Vec<f32>,
}

/// Work shared by the blocks of one call.
struct Job<'a> {
    conv: &'a WinogradConv,
    xp: &'a [f32],
    lp: usize,
    zeros: &'a [f32],
    residual: Option<&'a [f32]>,
    out: SendPtr,
}

impl WinogradConv {
    /// From torch's `(c_out, c_in, k)` weight (row-major), `(c_out,)` bias and the dilation;
    /// padding is `dilation * (k - 1) / 2`. `None` for kernels it does not handle (even or < 3).
    pub fn new(
        weight: &[f32],
        bias: Vec<f32>,
        c_out: usize,
        c_in: usize,
        k: usize,
        dilation: usize,
    ) -> Option<Self> {
        if k < 3 || k.is_multiple_of(2) || dilation == 0 {
            return None;
        }
        let r = if k <= TILE { k } else { TILE };
        let chunks = k.div_ceil(r);
        let n = TILE + r - 1;
        let (points, scale): (&[f64], &[f64]) = match n {
            6 => (&[0.0, 1.0, -1.0, 2.0, -2.0], &SCALE_6),
            7 => (&[0.0, 1.0, -1.0, 2.0, -2.0, 0.5], &SCALE_7),
            _ => return None,
        };
        let (_, g, _) = matrices(TILE, r, points);
        let mut u = vec![0f32; n * chunks * c_in * c_out];
        for co in 0..c_out {
            for ci in 0..c_in {
                let w = &weight[(co * c_in + ci) * k..(co * c_in + ci + 1) * k];
                for j in 0..chunks {
                    for xi in 0..n {
                        let mut acc = 0f64;
                        for t in 0..r {
                            if let Some(&wt) = w.get(j * r + t) {
                                acc += g[xi * r + t] * wt as f64;
                            }
                        }
                        u[((xi * chunks + j) * c_in + ci) * c_out + co] = (acc / scale[xi]) as f32;
                    }
                }
            }
        }
        Some(Self {
            c_in,
            c_out,
            dilation,
            padding: dilation * (k - 1) / 2,
            chunks,
            n,
            u,
            bias,
        })
    }

    /// `conv(act(x)) + bias (+ residual)` for `x` `(len, c_in)` channels-last; `residual` and
    /// the result are `(len, c_out)`.
    pub fn run(&self, x: &[f32], len: usize, act: PreAct, residual: Option<&[f32]>) -> Vec<f32> {
        let (c_in, c_out, d, p) = (self.c_in, self.c_out, self.dilation, self.padding);
        let lp = len + 2 * p;
        // Activated, zero-padded input, rows of c_in.
        let mut xp: Vec<f32> = Vec::with_capacity(lp * c_in);
        {
            let spare = &mut xp.spare_capacity_mut()[..lp * c_in];
            let (head, rest) = spare.split_at_mut(p * c_in);
            let (body, tail) = rest.split_at_mut(len * c_in);
            head.iter_mut().chain(tail.iter_mut()).for_each(|v| {
                v.write(0.0);
            });
            body.par_chunks_mut(c_in * 64)
                .zip(x.par_chunks(c_in * 64))
                .for_each(|(dst, src)| {
                    for (drow, srow) in dst.chunks_mut(c_in).zip(src.chunks(c_in)) {
                        activate_row(drow, srow, act);
                    }
                });
        }
        // SAFETY: every element of the first lp * c_in was written just above.
        unsafe { xp.set_len(lp * c_in) };
        let mut out: Vec<f32> = Vec::with_capacity(len * c_out);
        let zeros = vec![0f32; c_in];
        let job = Job {
            conv: self,
            xp: &xp,
            lp,
            zeros: &zeros,
            residual,
            out: SendPtr(out.spare_capacity_mut().as_mut_ptr().cast::<f32>()),
        };
        // Work items: blocks of output tiles of one dilation phase.
        let bt = block_tiles(c_in.max(c_out));
        let mut items = Vec::new();
        for phase in 0..d.min(len) {
            let outputs = (len - phase).div_ceil(d);
            let tiles = outputs.div_ceil(TILE);
            let mut t0 = 0;
            while t0 < tiles {
                items.push((phase, t0, bt.min(tiles - t0), outputs));
                t0 += bt;
            }
        }
        items.into_par_iter().for_each_init(
            || (Vec::new(), Vec::new()),
            |(v, m): &mut (Vec<f32>, Vec<f32>), (phase, t0, nt, outputs)| {
                job.block(v, m, phase, t0, nt, outputs);
            },
        );
        // SAFETY: every output position pos < len belongs to exactly one (phase, tile, i), so
        // the blocks above wrote each of the len * c_out values once.
        unsafe { out.set_len(len * c_out) };
        out
    }
}

impl Job<'_> {
    fn block(
        &self,
        v: &mut Vec<f32>,
        m: &mut Vec<f32>,
        phase: usize,
        t0: usize,
        nt: usize,
        outputs: usize,
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            if chatterbox_cpu::avx2() {
                // SAFETY: the CPU supports AVX2 (checked above).
                unsafe { self.block_avx2(v, m, phase, t0, nt, outputs) };
                return;
            }
        }
        self.block_generic(v, m, phase, t0, nt, outputs);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn block_avx2(
        &self,
        v: &mut Vec<f32>,
        m: &mut Vec<f32>,
        phase: usize,
        t0: usize,
        nt: usize,
        outputs: usize,
    ) {
        self.block_generic(v, m, phase, t0, nt, outputs);
    }

    #[inline(always)]
    fn block_generic(
        &self,
        v: &mut Vec<f32>,
        m: &mut Vec<f32>,
        phase: usize,
        t0: usize,
        nt: usize,
        outputs: usize,
    ) {
        match self.conv.n {
            6 => self.block_n::<6>(&BT6, &AT6, v, m, phase, t0, nt, outputs),
            _ => self.block_n::<7>(&BT7, &AT7, v, m, phase, t0, nt, outputs),
        }
    }

    /// One block of `nt` output tiles starting at tile `t0` of dilation phase `phase`: input
    /// transform into `v` `[tile][xi][c_in]`, per-point GEMMs into `m` `[tile][xi][c_out]`,
    /// output transform with bias and residual into the output rows.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn block_n<const N: usize>(
        &self,
        bt: &[[f32; N]; N],
        at: &[[f32; N]; TILE],
        v: &mut Vec<f32>,
        m: &mut Vec<f32>,
        phase: usize,
        t0: usize,
        nt: usize,
        outputs: usize,
    ) {
        let conv = self.conv;
        let (c_in, c_out, d, chunks) = (conv.c_in, conv.c_out, conv.dilation, conv.chunks);
        let vt = nt + chunks - 1;
        v.resize(vt * N * c_in, 0.0);
        m.resize(nt * N * c_out, 0.0);
        for tt in 0..vt {
            let base = phase + d * (t0 + tt) * TILE;
            let rows: [&[f32]; N] = std::array::from_fn(|s| {
                let pos = base + d * s;
                if pos < self.lp {
                    &self.xp[pos * c_in..(pos + 1) * c_in]
                } else {
                    self.zeros
                }
            });
            input_transform(bt, &rows, &mut v[tt * N * c_in..(tt + 1) * N * c_in]);
        }
        for xi in 0..N {
            for j in 0..chunks {
                let u =
                    &conv.u[(xi * chunks + j) * c_in * c_out..(xi * chunks + j + 1) * c_in * c_out];
                // SAFETY: m[tile][xi][..] is (nt rows of stride N * c_out, c_out), v[tile +
                // j][xi][..] is (nt rows of stride N * c_in, c_in) and u is (c_in, c_out),
                // all within their buffers.
                unsafe {
                    gemm::gemm(
                        nt,
                        c_out,
                        c_in,
                        m.as_mut_ptr().add(xi * c_out),
                        1,
                        (N * c_out) as isize,
                        j > 0,
                        v.as_ptr().add((j * N + xi) * c_in),
                        1,
                        (N * c_in) as isize,
                        u.as_ptr(),
                        1,
                        c_out as isize,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
            }
        }
        let mut row = vec![0f32; c_out];
        for tt in 0..nt {
            let mt = &m[tt * N * c_out..(tt + 1) * N * c_out];
            for (i, at_i) in at.iter().enumerate() {
                let o = (t0 + tt) * TILE + i;
                if o >= outputs {
                    break;
                }
                let pos = phase + d * o;
                let res = self.residual.map(|r| &r[pos * c_out..(pos + 1) * c_out]);
                output_row(at_i, mt, &conv.bias, res, &mut row);
                // SAFETY: pos < len; each output position belongs to exactly one (phase,
                // tile, i), hence to one block, and the buffer holds len * c_out values.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        row.as_ptr(),
                        self.out.get().add(pos * c_out),
                        c_out,
                    );
                }
            }
        }
    }
}

/// `v[xi][c] = sum_s bt[xi][s] rows[s][c]` for one tile; `v` is `(N, C)`.
#[inline(always)]
fn input_transform<const N: usize>(bt: &[[f32; N]; N], rows: &[&[f32]; N], v: &mut [f32]) {
    let c = v.len() / N;
    let mut ci = 0;
    while ci + 8 <= c {
        let dv: [[f32; 8]; N] = std::array::from_fn(|s| {
            let mut a = [0f32; 8];
            a.copy_from_slice(&rows[s][ci..ci + 8]);
            a
        });
        for (xi, bt_row) in bt.iter().enumerate() {
            let mut acc = [0f32; 8];
            for (s, &b) in bt_row.iter().enumerate() {
                if b != 0.0 {
                    for l in 0..8 {
                        acc[l] += b * dv[s][l];
                    }
                }
            }
            v[xi * c + ci..xi * c + ci + 8].copy_from_slice(&acc);
        }
        ci += 8;
    }
    for cc in ci..c {
        for (xi, bt_row) in bt.iter().enumerate() {
            let mut acc = 0f32;
            for (s, &b) in bt_row.iter().enumerate() {
                if b != 0.0 {
                    acc += b * rows[s][cc];
                }
            }
            v[xi * c + cc] = acc;
        }
    }
}

/// `row[c] = bias[c] (+ res[c]) + sum_xi at_i[xi] m[xi][c]`; `m` is `(N, C)`.
#[inline(always)]
fn output_row<const N: usize>(
    at_i: &[f32; N],
    m: &[f32],
    bias: &[f32],
    res: Option<&[f32]>,
    row: &mut [f32],
) {
    let c = row.len();
    row.copy_from_slice(bias);
    if let Some(r) = res {
        for (o, &rv) in row.iter_mut().zip(r) {
            *o += rv;
        }
    }
    for (xi, &a) in at_i.iter().enumerate() {
        if a != 0.0 {
            for (o, &mv) in row.iter_mut().zip(&m[xi * c..(xi + 1) * c]) {
                *o += a * mv;
            }
        }
    }
}

/// One channels-last row: `act(src)` into `dst`, per-channel Snake parameters.
fn activate_row(dst: &mut [MaybeUninit<f32>], src: &[f32], act: PreAct) {
    match act {
        PreAct::Identity => {
            for (d, &v) in dst.iter_mut().zip(src) {
                d.write(v);
            }
        }
        PreAct::LeakyRelu(slope) => {
            for (d, &v) in dst.iter_mut().zip(src) {
                d.write(if v > 0.0 { v } else { v * slope });
            }
        }
        PreAct::Snake { alpha, inv_alpha } => snake_channels(dst, src, alpha, inv_alpha),
    }
}

fn snake_channels(dst: &mut [MaybeUninit<f32>], src: &[f32], alpha: &[f32], inv_alpha: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if chatterbox_cpu::avx2() {
            // SAFETY: the CPU supports AVX2 (checked above).
            unsafe { snake_channels_avx2(dst, src, alpha, inv_alpha) };
            return;
        }
    }
    snake_channels_generic(dst, src, alpha, inv_alpha);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn snake_channels_avx2(
    dst: &mut [MaybeUninit<f32>],
    src: &[f32],
    alpha: &[f32],
    inv_alpha: &[f32],
) {
    snake_channels_generic(dst, src, alpha, inv_alpha)
}

#[inline(always)]
fn snake_channels_generic(
    dst: &mut [MaybeUninit<f32>],
    src: &[f32],
    alpha: &[f32],
    inv_alpha: &[f32],
) {
    for (((d, &v), &a), &ia) in dst.iter_mut().zip(src).zip(alpha).zip(inv_alpha) {
        let s = sin(v * a);
        d.write(v + ia * (s * s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hard-coded integer `B^T` are the Toom-Cook ones scaled by `SCALE`, and `A^T` match.
    #[test]
    fn constant_matrices_are_the_scaled_toom_cook_ones() {
        fn check<const N: usize>(
            bt: &[[f32; N]; N],
            at: &[[f32; N]; TILE],
            scale: &[f64],
            pts: &[f64],
        ) {
            let (a_t, _, b_t) = matrices(TILE, N - TILE + 1, pts);
            for xi in 0..N {
                for s in 0..N {
                    let want = b_t[xi * N + s] * scale[xi];
                    assert!(
                        (bt[xi][s] as f64 - want).abs() < 1e-12,
                        "bt {xi} {s}: {want}"
                    );
                }
                for i in 0..TILE {
                    assert_eq!(at[i][xi] as f64, a_t[i * N + xi], "at {i} {xi}");
                }
            }
        }
        check(&BT6, &AT6, &SCALE_6, &[0.0, 1.0, -1.0, 2.0, -2.0]);
        check(&BT7, &AT7, &SCALE_7, &[0.0, 1.0, -1.0, 2.0, -2.0, 0.5]);
    }

    #[test]
    fn matrices_compute_a_correlation() {
        for (r, pts) in [
            (3usize, vec![0.0, 1.0, -1.0, 2.0, -2.0]),
            (4, vec![0.0, 1.0, -1.0, 2.0, -2.0, 0.5]),
        ] {
            let n = TILE + r - 1;
            let (a_t, g, b_t) = matrices(TILE, r, &pts);
            let gv: Vec<f64> = (0..r).map(|i| 0.3 + i as f64 * 0.7).collect();
            let dv: Vec<f64> = (0..n).map(|i| (i as f64 * 1.3).sin()).collect();
            let gg: Vec<f64> = (0..n)
                .map(|x| (0..r).map(|t| g[x * r + t] * gv[t]).sum())
                .collect();
            let bd: Vec<f64> = (0..n)
                .map(|x| (0..n).map(|s| b_t[x * n + s] * dv[s]).sum())
                .collect();
            for i in 0..TILE {
                let y: f64 = (0..n).map(|x| a_t[i * n + x] * gg[x] * bd[x]).sum();
                let want: f64 = (0..r).map(|t| gv[t] * dv[i + t]).sum();
                assert!((y - want).abs() < 1e-12, "r {r} i {i}: {y} vs {want}");
            }
        }
    }

    /// Against a direct channels-last convolution in f64, for every kernel size and dilation
    /// HiFT uses, lengths that do not divide into tiles, activations and a residual.
    #[test]
    fn matches_a_direct_convolution() {
        let vals = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| ((((i + seed) * 7919) % 1013) as f32 / 506.5 - 1.0) * 0.8)
                .collect()
        };
        for &(c_in, c_out, k, d, len) in &[
            (5, 7, 3, 1, 37),
            (8, 8, 7, 3, 101),
            (16, 16, 11, 5, 1000),
            (6, 4, 11, 1, 9),
            (4, 4, 7, 5, 3),
            (3, 3, 3, 5, 1),
        ] {
            let w = vals(c_out * c_in * k, 1);
            let w: Vec<f32> = w.iter().map(|v| v / (c_in * k) as f32).collect();
            let bias = vals(c_out, 2);
            let x = vals(len * c_in, 3);
            let res = vals(len * c_out, 4);
            let alpha: Vec<f32> = (0..c_in).map(|i| 0.6 + 0.1 * i as f32).collect();
            let inv: Vec<f32> = alpha.iter().map(|a| 1.0 / (a + 1e-9)).collect();
            let conv = WinogradConv::new(&w, bias.clone(), c_out, c_in, k, d).unwrap();
            let got = conv.run(
                &x,
                len,
                PreAct::Snake {
                    alpha: &alpha,
                    inv_alpha: &inv,
                },
                Some(&res),
            );
            let p = d * (k - 1) / 2;
            let act = |pos: usize, ci: usize| -> f64 {
                let v = x[pos * c_in + ci] as f64;
                let a = alpha[ci] as f64;
                v + (1.0 / (a + 1e-9)) * (v * a).sin().powi(2)
            };
            let mut peak = 0f64;
            let mut worst = 0f64;
            for l in 0..len {
                for co in 0..c_out {
                    let mut acc = bias[co] as f64 + res[l * c_out + co] as f64;
                    for ci in 0..c_in {
                        for t in 0..k {
                            let pos = (l + t * d) as isize - p as isize;
                            if pos >= 0 && (pos as usize) < len {
                                acc += w[(co * c_in + ci) * k + t] as f64 * act(pos as usize, ci);
                            }
                        }
                    }
                    peak = peak.max(acc.abs());
                    worst = worst.max((got[l * c_out + co] as f64 - acc).abs());
                }
            }
            assert!(
                worst <= 2e-6 * peak.max(1.0),
                "k {k} d {d} len {len}: {worst} (peak {peak})"
            );
        }
    }
}
