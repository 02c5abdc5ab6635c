//! CPU kernels for the estimator's element-wise hot spots (f32 slices, in place): the attention
//! softmax, exact GELU and Mish. candle runs these one scalar `libm` call per element on one
//! thread; here they are vectorisable polynomial approximations (Cephes `expf`, Eigen's rational
//! `erf`), compiled for AVX2 + FMA when the CPU has them, and run on rayon's threads.
//!
//! Accuracy: `exp` within 2 ulp on the range used, `erf` within 1e-6 absolute (both tested
//! against `libm` below); far inside the flow's 1e-4 parity tolerance.

use rayon::prelude::*;

/// Rows or elements per rayon task.
const GRAIN: usize = 16 * 1024;

#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `e^x` (Cephes `expf`: range reduction by ln 2, degree-6 polynomial). Exactly 0 below -87.3
/// (so `-inf` and the estimator's `-1e10` mask give 0), `+inf` above 88.7. Branch-free and
/// without float-to-int conversion, so that loops over it vectorise.
#[inline(always)]
fn exp<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let xc = x.clamp(-87.3, 88.7);
    let t = madd::<FMA>(xc, LOG2E, ROUND);
    let n = t - ROUND;
    // the integer n sits in the low mantissa bits of t
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = madd::<FMA>(n, -C1, xc);
    let r = madd::<FMA>(n, -C2, r);
    let mut p = 1.987_569_1e-4f32;
    p = madd::<FMA>(p, r, 1.398_199_9e-3);
    p = madd::<FMA>(p, r, 8.333_452e-3);
    p = madd::<FMA>(p, r, 4.166_579_6e-2);
    p = madd::<FMA>(p, r, 1.666_666_5e-1);
    p = madd::<FMA>(p, r, 0.5);
    let y = madd::<FMA>(p, r * r, r) + 1.0;
    let scale = f32::from_bits((ni.wrapping_add(127) as u32) << 23);
    let v = y * scale;
    let v = if x < -87.3 { 0.0 } else { v };
    if x > 88.7 {
        f32::INFINITY
    } else {
        v
    }
}

/// `erf(x)` (Eigen's `generic_fast_erf_float`: odd/even rational polynomial on [-4, 4]).
#[inline(always)]
fn erf<const FMA: bool>(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10f32;
    p = madd::<FMA>(x2, p, 2.770_681_4e-8);
    p = madd::<FMA>(x2, p, -2.101_024e-6);
    p = madd::<FMA>(x2, p, -5.692_506_4e-5);
    p = madd::<FMA>(x2, p, -7.349_906_3e-4);
    p = madd::<FMA>(x2, p, -2.954_6e-3);
    p = madd::<FMA>(x2, p, -1.609_603_3e-2);
    let p = x * p;
    let mut q = -1.456_607_2e-5f32;
    q = madd::<FMA>(x2, q, -2.133_740_5e-4);
    q = madd::<FMA>(x2, q, -1.682_827e-3);
    q = madd::<FMA>(x2, q, -7.373_329e-3);
    q = madd::<FMA>(x2, q, -1.426_473_9e-2);
    p / q
}

#[inline(always)]
fn gelu_slice<const FMA: bool>(x: &mut [f32]) {
    for v in x.iter_mut() {
        let a = *v;
        *v = 0.5 * a * (1.0 + erf::<FMA>(a * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// Mish `x tanh(ln(1 + e^x))` as `x n / (n + 2)` with `n = e^x (e^x + 2)`; `x` above 20 is
/// returned as is (`tanh` is 1 in f32 there).
#[inline(always)]
fn mish_slice<const FMA: bool>(x: &mut [f32]) {
    for v in x.iter_mut() {
        let a = *v;
        let e = exp::<FMA>(a.min(20.0));
        let n = e * (e + 2.0);
        let m = a * n / (n + 2.0);
        *v = if a > 20.0 { a } else { m };
    }
}

/// Maximum of a slice (8 lanes, then the tail).
#[inline(always)]
fn max_of(x: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            m[j] = if c[j] > m[j] { c[j] } else { m[j] };
        }
    }
    let mut max = m.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for &v in chunks.remainder() {
        max = max.max(v);
    }
    max
}

/// Sum of a slice (8 lanes, then the tail).
#[inline(always)]
fn sum_of(x: &[f32]) -> f32 {
    let mut s = [0f32; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            s[j] += c[j];
        }
    }
    s.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// Softmax of one row after adding `bias` (same length) when given.
#[inline(always)]
fn softmax_row<const FMA: bool>(row: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for (v, &b) in row.iter_mut().zip(b) {
            *v += b;
        }
    }
    let max = max_of(row);
    if max == f32::NEG_INFINITY {
        // every key masked with -inf: torch gives NaN; keep it that way
        row.iter_mut().for_each(|v| *v = f32::NAN);
        return;
    }
    for v in row.iter_mut() {
        *v = exp::<FMA>(*v - max);
    }
    let inv = 1.0 / sum_of(row);
    row.iter_mut().for_each(|v| *v *= inv);
}

macro_rules! dispatch {
    ($vis:vis $name:ident, $generic:ident, ($($arg:ident: $ty:ty),*)) => {
        $vis fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) {
                    $generic::<true>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) {
                    $generic::<true>($($arg),*)
                }
                if chatterbox_cpu::avx512f() {
                    // SAFETY: the CPU supports the features `avx512` is compiled for.
                    unsafe { avx512($($arg),*) };
                    return;
                }
                if chatterbox_cpu::avx2_fma() {
                    // SAFETY: the CPU supports the features `avx2` is compiled for.
                    unsafe { avx2($($arg),*) };
                    return;
                }
            }
            $generic::<false>($($arg),*)
        }
    };
}

dispatch!(gelu_chunk, gelu_slice, (x: &mut [f32]));
dispatch!(mish_chunk, mish_slice, (x: &mut [f32]));
dispatch!(pub(crate) softmax_one, softmax_row, (row: &mut [f32], bias: Option<&[f32]>));

#[inline(always)]
fn bias_gelu_rows<const FMA: bool>(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v += b;
        }
        gelu_slice::<FMA>(row);
    }
}

#[inline(always)]
fn bias_residual_rows<const FMA: bool>(x: &mut [f32], bias: &[f32], res: &[f32]) {
    for (row, res) in x
        .chunks_exact_mut(bias.len())
        .zip(res.chunks_exact(bias.len()))
    {
        for ((v, &b), &r) in row.iter_mut().zip(bias).zip(res) {
            *v = *v + b + r;
        }
    }
}

dispatch!(bias_gelu_chunk, bias_gelu_rows, (x: &mut [f32], bias: &[f32]));
dispatch!(bias_residual_chunk, bias_residual_rows, (x: &mut [f32], bias: &[f32], res: &[f32]));

/// Rows of whole `n`-element rows per task, about [`GRAIN`] elements.
fn rows_grain(n: usize) -> usize {
    (GRAIN / n.max(1)).max(1) * n.max(1)
}

/// `gelu_erf(x + bias)` in place, `bias` over the rows of `x` (`x.len()` a multiple of it).
pub(crate) fn bias_gelu_erf(x: &mut [f32], bias: &[f32]) {
    if bias.is_empty() {
        return;
    }
    x.par_chunks_mut(rows_grain(bias.len()))
        .for_each(|c| bias_gelu_chunk(c, bias));
}

/// `x + bias + res` in place (`y = (x + b) + r`, the reference's order).
pub(crate) fn add_bias_residual(x: &mut [f32], bias: &[f32], res: &[f32]) {
    if bias.is_empty() {
        return;
    }
    let g = rows_grain(bias.len());
    x.par_chunks_mut(g)
        .zip(res.par_chunks(g))
        .for_each(|(c, r)| bias_residual_chunk(c, bias, r));
}

/// Exact GELU in place.
pub(crate) fn gelu_erf(x: &mut [f32]) {
    x.par_chunks_mut(GRAIN).for_each(gelu_chunk);
}

/// Mish in place.
pub(crate) fn mish(x: &mut [f32]) {
    x.par_chunks_mut(GRAIN).for_each(mish_chunk);
}

/// Softmax over rows of length `n` in place. With `bias = Some((b, per))`, row `r` first gets
/// `b[g * n..(g + 1) * n]` added, `g = r / per` (one bias row per `per` consecutive rows).
pub(crate) fn softmax_rows(x: &mut [f32], n: usize, bias: Option<(&[f32], usize)>) {
    if n == 0 {
        return;
    }
    let rows_per_task = (GRAIN / n).max(1);
    x.par_chunks_mut(rows_per_task * n)
        .enumerate()
        .for_each(|(task, chunk)| {
            for (i, row) in chunk.chunks_exact_mut(n).enumerate() {
                let r = task * rows_per_task + i;
                let b = bias.map(|(b, per)| &b[(r / per) * n..(r / per + 1) * n]);
                softmax_one(row, b);
            }
        });
}

/// A raw output pointer shared by tasks that write disjoint parts of it.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub(crate) *mut f32);
// SAFETY: every task writes its own disjoint rows/columns (see `attention`).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// Per-thread scratch of one attention head: the `t x t` scores. (`q`, `k` and `v` are read
/// in place at their row stride: copying them into contiguous buffers first, `k` transposed,
/// made the 2 x 700-frame estimator call 1213-1293 ms against 1147-1224 in place, A/B over
/// three rounds at 2 threads.)
#[derive(Default)]
struct HeadScratch {
    scores: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<HeadScratch> = std::cell::RefCell::new(HeadScratch::default());
}

pub(crate) fn sized(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// Multi-head self-attention `softmax(q k^T + bias) v` straight from a fused projection:
/// `qkv` is `(b, t, 3, h, d)` row-major (q already scaled), `bias` is `(b, t)` added to every
/// query's scores of batch row `b` (a key-padding bias), `out` is `(b, t, h, d)`. One task per
/// `(batch, head)`: the head's q, k and v are gathered into per-thread buffers and its `t x t`
/// scores stay in one (cache-resident) between the two products; the output is written in
/// place, never transposed.
pub(crate) fn attention(
    qkv: &[f32],
    (b, t, h, d): (usize, usize, usize, usize),
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), String> {
    if qkv.len() != b * t * 3 * h * d {
        return Err(format!(
            "attention: {} elements for (b, t, 3, h, d) = ({b}, {t}, 3, {h}, {d})",
            qkv.len()
        ));
    }
    let hd = h * d;
    let src = Sources {
        q: qkv,
        k: qkv.get(hd..).unwrap_or_default(),
        v: qkv.get(2 * hd..).unwrap_or_default(),
        row: 3 * hd,
    };
    attention_from(&src, (b, t, h, d), bias, out)
}

/// [`attention`] from separate `q`, `k` and `v`, each `(b, t, h, d)` row-major (q scaled).
pub(crate) fn attention_split(
    (q, k, v): (&[f32], &[f32], &[f32]),
    (b, t, h, d): (usize, usize, usize, usize),
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), String> {
    let n = b * t * h * d;
    if q.len() != n || k.len() != n || v.len() != n {
        return Err(format!(
            "attention: q/k/v of {}/{}/{} elements for (b, t, h, d) = ({b}, {t}, {h}, {d})",
            q.len(),
            k.len(),
            v.len()
        ));
    }
    let src = Sources {
        q,
        k,
        v,
        row: h * d,
    };
    attention_from(&src, (b, t, h, d), bias, out)
}

/// Where the heads come from: time step `i` of batch row `bi` has head `hi` of q at
/// `q[(bi * t + i) * row + hi * d..][..d]`, and likewise for k and v.
struct Sources<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    row: usize,
}

fn attention_from(
    src: &Sources,
    (b, t, h, d): (usize, usize, usize, usize),
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), String> {
    if out.len() != b * t * h * d {
        return Err(format!(
            "attention: output of {} for (b, t, h, d) = ({b}, {t}, {h}, {d})",
            out.len()
        ));
    }
    // every head slice read below must exist
    let need = (b * t).saturating_sub(1) * src.row + h * d;
    if b * t > 0 && (src.q.len() < need || src.k.len() < need || src.v.len() < need) {
        return Err("attention: q/k/v sources too short".to_string());
    }
    if let Some(bias) = bias {
        if bias.len() != b * t {
            return Err(format!("attention: bias of {} for {b} x {t}", bias.len()));
        }
    }
    if t == 0 || d == 0 {
        return Ok(());
    }
    let tasks = b * h;
    let threads = rayon::current_num_threads().max(1);
    let (outer_parallel, inner) = if tasks >= threads {
        (true, gemm::Parallelism::None)
    } else {
        (false, gemm::Parallelism::Rayon(threads))
    };
    let out_ptr = OutPtr(out.as_mut_ptr());
    let run = |task: usize| {
        let (bi, hi) = (task / h, task % h);
        let bias_row = bias.map(|bias| &bias[bi * t..(bi + 1) * t]);
        SCRATCH.with(|scratch| {
            let mut guard = scratch.borrow_mut();
            let s = sized(&mut guard.scores, t * t);
            // q, k and v are read in place: rows of d values at stride `src.row`
            let at = bi * t * src.row + hi * d;
            let row = src.row as isize;
            // SAFETY: the head's q, k and v rows lie inside the sources (length checked above:
            // the last row starts at (b t - 1) row and the head's d values end by h d); s
            // (t, t) is a contiguous buffer of exactly that size; the output block of (bi, hi)
            // is `t` rows of `d` floats at stride `h * d` inside `out` (length checked above),
            // written by this task only.
            unsafe {
                let (q, k, v) = (
                    src.q.as_ptr().add(at),
                    src.k.as_ptr().add(at),
                    src.v.as_ptr().add(at),
                );
                // scores (t, t) = q (t, d) . k^T (d, t): k^T's element (c, j) is k[j][c]
                gemm::gemm(
                    t,
                    t,
                    d,
                    s.as_mut_ptr(),
                    1,
                    t as isize,
                    false,
                    q,
                    1,
                    row,
                    k,
                    row,
                    1,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    inner,
                );
                for r in s.chunks_exact_mut(t) {
                    softmax_one(r, bias_row);
                }
                let o = out_ptr;
                gemm::gemm(
                    t,
                    d,
                    t,
                    o.0.add(bi * t * h * d + hi * d),
                    1,
                    (h * d) as isize,
                    false,
                    s.as_ptr(),
                    1,
                    t as isize,
                    v,
                    1,
                    row,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    inner,
                );
            }
        });
    };
    if outer_parallel {
        (0..tasks).into_par_iter().for_each(run);
    } else {
        (0..tasks).for_each(run);
    }
    Ok(())
}

/// ESPnet's `rel_shift` fused with the score sum: for every `(t, t)` block of `ac` and the
/// matching `(t, 2t - 1)` block of `bd` (`rows` blocks, row-major),
/// `ac[i][j] <- (ac[i][j] + bd[i][t - 1 - i + j]) * scale`. The shifted row of `bd` is a
/// contiguous slice, so no padded, reshaped or narrowed copy of `bd` is made.
pub(crate) fn rel_shift_add(
    ac: &mut [f32],
    bd: &[f32],
    t: usize,
    scale: f32,
) -> Result<(), String> {
    let p = (2 * t).saturating_sub(1);
    if t == 0 {
        return Ok(());
    }
    if !ac.len().is_multiple_of(t * t) || bd.len() != ac.len() / (t * t) * t * p {
        return Err(format!(
            "rel_shift_add: {} scores and {} position scores for t = {t}",
            ac.len(),
            bd.len()
        ));
    }
    ac.par_chunks_mut(t)
        .zip(bd.par_chunks(p))
        .enumerate()
        .for_each(|(r, (row, pos))| {
            let i = r % t;
            for (a, &b) in row.iter_mut().zip(&pos[t - 1 - i..2 * t - 1 - i]) {
                *a = (*a + b) * scale;
            }
        });
    Ok(())
}

/// Geometry of a 1-D convolution over time-major `(batch, time, channels)` data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConvShape {
    pub batch: usize,
    pub t_in: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub pad_left: usize,
    pub pad_right: usize,
}

impl ConvShape {
    pub(crate) fn t_out(&self) -> usize {
        (self.t_in + self.pad_left + self.pad_right + 1).saturating_sub(self.kernel)
    }
}

/// Convolution (stride 1) with zero padding on `x (batch, t_in, c_in)` into
/// `y (batch, t_out, c_out)`: `y` starts as the bias, then every tap adds one GEMM of the
/// overlapping rows of `x` with its `(c_in, c_out)` slice of `w (kernel * c_in, c_out)`
/// (tap-major rows: the transposed layout `Linear` keeps on the CPU, which the GEMM reads
/// without repacking). No padded or stacked copy of `x` is made.
pub(crate) fn conv1d(
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    s: ConvShape,
    y: &mut [f32],
) -> Result<(), String> {
    let t_out = s.t_out();
    if x.len() != s.batch * s.t_in * s.c_in
        || w.len() != s.c_out * s.kernel * s.c_in
        || bias.len() != s.c_out
        || y.len() != s.batch * t_out * s.c_out
    {
        return Err(format!("conv1d: buffer sizes do not match {s:?}"));
    }
    if s.c_out == 0 {
        return Ok(());
    }
    for row in y.chunks_exact_mut(s.c_out) {
        row.copy_from_slice(bias);
    }
    let threads = rayon::current_num_threads();
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    for b in 0..s.batch {
        for j in 0..s.kernel {
            // output rows t read input row t - pad_left + j
            let lo = s.pad_left.saturating_sub(j);
            let hi = t_out.min((s.t_in + s.pad_left).saturating_sub(j));
            if lo >= hi {
                continue;
            }
            let x0 = lo + j - s.pad_left;
            // SAFETY: rows lo..hi of batch b in y, rows x0..x0 + (hi - lo) of batch b in x
            // (x0 + hi - lo <= t_in by the bounds above) and the (c_in, c_out) tap slice of w are
            // inside the buffers whose sizes were checked; y is exclusively borrowed.
            unsafe {
                gemm::gemm(
                    hi - lo,
                    s.c_out,
                    s.c_in,
                    y.as_mut_ptr().add((b * t_out + lo) * s.c_out),
                    1,
                    s.c_out as isize,
                    true,
                    x.as_ptr().add((b * s.t_in + x0) * s.c_in),
                    1,
                    s.c_in as isize,
                    w.as_ptr().add(j * s.c_in * s.c_out),
                    1,
                    s.c_out as isize,
                    1.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    par,
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    fn grid(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| lo + (hi - lo) * i as f32 / (n - 1) as f32)
            .collect()
    }

    #[test]
    fn exp_matches_libm() {
        for fma in [false, true] {
            let mut worst = 0f32;
            for x in grid(-87.0, 88.0, 200_001) {
                let want = x.exp();
                let got = if fma { exp::<true>(x) } else { exp::<false>(x) };
                worst = worst.max(((got - want) / want).abs());
            }
            assert!(worst < 3e-7, "fma={fma}: exp relative error {worst:e}");
        }
        assert_eq!(exp::<false>(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp::<false>(-1e10), 0.0);
        assert_eq!(exp::<false>(0.0), 1.0);
    }

    #[test]
    fn erf_matches_libm() {
        let mut worst = 0f64;
        for x in grid(-6.0, 6.0, 120_001) {
            let want = libm_erf(f64::from(x));
            worst = worst.max((f64::from(erf::<false>(x)) - want).abs());
        }
        assert!(worst < 1e-6, "erf absolute error {worst:e}");
    }

    /// erf in f64 (Abramowitz & Stegun 7.1.28 is too coarse; use the series / continued fraction).
    fn libm_erf(x: f64) -> f64 {
        // erf via the complementary error function's Chebyshev fit (Numerical Recipes erfc),
        // fractional error < 1.2e-7, enough to judge a 1e-6 bound.
        let z = x.abs();
        let t = 1.0 / (1.0 + 0.5 * z);
        let r = t
            * (-z * z - 1.265_512_23
                + t * (1.000_023_68
                    + t * (0.374_091_96
                        + t * (0.096_784_18
                            + t * (-0.186_288_06
                                + t * (0.278_868_07
                                    + t * (-1.135_203_98
                                        + t * (1.488_515_87
                                            + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
                .exp();
        if x >= 0.0 {
            1.0 - r
        } else {
            r - 1.0
        }
    }

    #[test]
    fn mish_and_gelu_match_formulas() {
        let xs = grid(-30.0, 30.0, 60_001);
        let mut m = xs.clone();
        mish(&mut m);
        let mut g = xs.clone();
        gelu_erf(&mut g);
        for ((&x, &m), &g) in xs.iter().zip(&m).zip(&g) {
            let x64 = f64::from(x);
            let want_m = x64 * (x64.exp().ln_1p()).tanh();
            assert!(
                (f64::from(m) - want_m).abs() <= 2e-6 * want_m.abs().max(1.0),
                "mish({x})"
            );
            let want_g = 0.5 * x64 * (1.0 + libm_erf(x64 / std::f64::consts::SQRT_2));
            assert!(
                (f64::from(g) - want_g).abs() <= 2e-6 * x64.abs().max(1.0),
                "gelu({x})"
            );
        }
    }

    #[test]
    fn rel_shift_add_matches_espnet_rel_shift() {
        // ESPnet: pad one zero column on the left, view (p + 1, t), drop the first row, view
        // (t, p), keep the first t columns
        let (blocks, t) = (3usize, 5usize);
        let p = 2 * t - 1;
        let ac: Vec<f32> = (0..blocks * t * t)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let bd: Vec<f32> = (0..blocks * t * p)
            .map(|i| (i as f32 * 0.11).cos())
            .collect();
        let mut got = ac.clone();
        rel_shift_add(&mut got, &bd, t, 0.5).unwrap();
        for blk in 0..blocks {
            let x = &bd[blk * t * p..(blk + 1) * t * p];
            let mut padded = Vec::new();
            for i in 0..t {
                padded.push(0.0f32);
                padded.extend_from_slice(&x[i * p..(i + 1) * p]);
            }
            let shifted = &padded[t..]; // rows 1.. of the (p + 1, t) view
            for i in 0..t {
                for j in 0..t {
                    let want = (ac[blk * t * t + i * t + j] + shifted[i * p + j]) * 0.5;
                    assert_eq!(got[blk * t * t + i * t + j], want, "block {blk} ({i}, {j})");
                }
            }
        }
        assert!(rel_shift_add(&mut got, &bd[1..], t, 0.5).is_err());
    }

    #[test]
    fn split_attention_equals_fused() {
        let (b, t, h, d) = (2, 11, 3, 4);
        let qkv: Vec<f32> = (0..b * t * 3 * h * d)
            .map(|i| ((i * 2654435761) % 997) as f32 / 400.0 - 1.2)
            .collect();
        let bias: Vec<f32> = (0..b * t)
            .map(|i| if i % t >= 8 { -1e10 } else { 0.0 })
            .collect();
        let part = |which: usize| -> Vec<f32> {
            qkv.chunks_exact(3 * h * d)
                .flat_map(|row| row[which * h * d..(which + 1) * h * d].to_vec())
                .collect()
        };
        let (q, k, v) = (part(0), part(1), part(2));
        let mut fused = vec![0f32; b * t * h * d];
        let mut split = vec![1f32; b * t * h * d];
        attention(&qkv, (b, t, h, d), Some(&bias), &mut fused).unwrap();
        attention_split((&q, &k, &v), (b, t, h, d), Some(&bias), &mut split).unwrap();
        assert!(fused.iter().any(|x| *x != 0.0));
        for (i, (a, c)) in fused.iter().zip(&split).enumerate() {
            assert_eq!(a.to_bits(), c.to_bits(), "element {i}");
        }
        assert!(attention_split((&q, &k[1..], &v), (b, t, h, d), None, &mut split).is_err());
    }

    #[test]
    fn attention_matches_naive() {
        let (b, t, h, d) = (2, 13, 3, 5);
        let qkv: Vec<f32> = (0..b * t * 3 * h * d)
            .map(|i| ((i * 2654435761) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let bias: Vec<f32> = (0..b * t)
            .map(|i| if i >= t && i % t >= 9 { -1e10 } else { 0.0 })
            .collect();
        let mut out = vec![0f32; b * t * h * d];
        attention(&qkv, (b, t, h, d), Some(&bias), &mut out).unwrap();
        let at = |bi: usize, ti: usize, which: usize, hi: usize, di: usize| {
            f64::from(qkv[(((bi * t + ti) * 3 + which) * h + hi) * d + di])
        };
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..t {
                    let s: Vec<f64> = (0..t)
                        .map(|j| {
                            (0..d)
                                .map(|k| at(bi, i, 0, hi, k) * at(bi, j, 1, hi, k))
                                .sum::<f64>()
                                + f64::from(bias[bi * t + j])
                        })
                        .collect();
                    let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = s.iter().map(|v| (v - m).exp()).sum();
                    for k in 0..d {
                        let want: f64 = (0..t)
                            .map(|j| (s[j] - m).exp() / z * at(bi, j, 2, hi, k))
                            .sum();
                        let got = f64::from(out[((bi * t + i) * h + hi) * d + k]);
                        assert!(
                            (got - want).abs() < 1e-5,
                            "({bi},{hi},{i},{k}) {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn conv1d_matches_naive() {
        for (kernel, pad_left, pad_right) in [(3, 2, 0), (4, 0, 3), (5, 4, 0), (1, 0, 0)] {
            let s = ConvShape {
                batch: 2,
                t_in: 9,
                c_in: 5,
                c_out: 4,
                kernel,
                pad_left,
                pad_right,
            };
            let x: Vec<f32> = (0..2 * 9 * 5)
                .map(|i| ((i * 37) % 17) as f32 / 8.0 - 1.0)
                .collect();
            let w: Vec<f32> = (0..4 * kernel * 5)
                .map(|i| ((i * 11) % 13) as f32 / 6.0 - 1.0)
                .collect();
            let bias = [0.5f32, -0.25, 1.0, 0.0];
            let t_out = s.t_out();
            let mut y = vec![0f32; 2 * t_out * 4];
            conv1d(&x, &w, &bias, s, &mut y).unwrap();
            for b in 0..2 {
                for t in 0..t_out {
                    for o in 0..4 {
                        let mut want = f64::from(bias[o]);
                        for j in 0..kernel {
                            let ti = t as isize - pad_left as isize + j as isize;
                            if (0..9).contains(&ti) {
                                for c in 0..5 {
                                    want += f64::from(x[(b * 9 + ti as usize) * 5 + c])
                                        * f64::from(w[(j * 5 + c) * 4 + o]);
                                }
                            }
                        }
                        let got = f64::from(y[(b * t_out + t) * 4 + o]);
                        assert_abs_diff_eq!(got, want, epsilon = 1e-5);
                    }
                }
            }
        }
    }

    #[test]
    fn softmax_rows_with_bias() {
        let n = 37;
        let rows = 6;
        let x: Vec<f32> = (0..rows * n)
            .map(|i| ((i * 7919) % 101) as f32 / 10.0 - 5.0)
            .collect();
        let bias: Vec<f32> = (0..2 * n)
            .map(|i| if i % n >= 30 { f32::NEG_INFINITY } else { 0.0 })
            .collect();
        let mut y = x.clone();
        softmax_rows(&mut y, n, Some((&bias, 3)));
        for r in 0..rows {
            let g = r / 3;
            let row: Vec<f64> = (0..n)
                .map(|j| f64::from(x[r * n + j]) + f64::from(bias[g * n + j]))
                .collect();
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
            for j in 0..n {
                let want = (row[j] - max).exp() / sum;
                assert_abs_diff_eq!(f64::from(y[r * n + j]), want, epsilon = 1e-6);
            }
            assert!(y[r * n + 30..r * n + n].iter().all(|&v| v == 0.0));
        }
    }
}
