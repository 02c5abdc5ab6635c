//! Sigmoid / tanh (Cephes' `expf` polynomial) and the LSTM cell update, with AVX2+FMA versions
//! written with intrinsics (the portable loops do not vectorise reliably).
use super::{madd, multiversion};

/// `exp(x)` for `x` clamped to `[-87, 88]`: Cephes' `expf` polynomial (relative error about
/// 2e-7), branch-free.
#[inline(always)]
fn exp<const FMA: bool>(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let fx = madd::<FMA>(x, std::f32::consts::LOG2_E, 0.5).floor();
    let r = madd::<FMA>(fx, -0.693_359_4, x);
    let r = madd::<FMA>(fx, 2.121_944_4e-4, r);
    let mut p = 1.987_569_1e-4f32;
    p = madd::<FMA>(p, r, 1.398_199_9e-3);
    p = madd::<FMA>(p, r, 8.333_452e-3);
    p = madd::<FMA>(p, r, 4.166_579_6e-2);
    p = madd::<FMA>(p, r, 1.666_666_5e-1);
    p = madd::<FMA>(p, r, 0.5);
    let y = madd::<FMA>(p, r * r, r) + 1.0;
    // 2^fx without a float-to-int conversion: adding 1.5 * 2^23 puts the integer fx (in
    // [-126, 127]) in the low mantissa bits; shifting `fx + 127` into the exponent field drops
    // everything above it.
    let bits = (fx + 12_582_912.0).to_bits().wrapping_add(127);
    y * f32::from_bits(bits << 23)
}

#[inline(always)]
fn sigmoid<const FMA: bool>(x: f32) -> f32 {
    1.0 / (1.0 + exp::<FMA>(-x))
}

#[inline(always)]
fn tanh<const FMA: bool>(x: f32) -> f32 {
    2.0 / (1.0 + exp::<FMA>(-2.0 * x)) - 1.0
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn exp(x: __m256) -> __m256 {
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(-87.0)),
            _mm256_set1_ps(88.0),
        );
        let fx = _mm256_floor_ps(_mm256_fmadd_ps(
            x,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
            _mm256_set1_ps(0.5),
        ));
        let r = _mm256_fmadd_ps(fx, _mm256_set1_ps(-0.693_359_4), x);
        let r = _mm256_fmadd_ps(fx, _mm256_set1_ps(2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.987_569_1e-4);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.398_199_9e-3));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.333_452e-3));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.166_579_6e-2));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.666_666_5e-1));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5));
        let y = _mm256_add_ps(
            _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
            _mm256_set1_ps(1.0),
        );
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(fx),
            _mm256_set1_epi32(127),
        ));
        _mm256_mul_ps(y, _mm256_castsi256_ps(e))
    }

    #[inline(always)]
    unsafe fn sigmoid(x: __m256) -> __m256 {
        let one = _mm256_set1_ps(1.0);
        _mm256_div_ps(
            one,
            _mm256_add_ps(one, exp(_mm256_sub_ps(_mm256_setzero_ps(), x))),
        )
    }

    #[inline(always)]
    unsafe fn tanh(x: __m256) -> __m256 {
        let e = exp(_mm256_mul_ps(x, _mm256_set1_ps(-2.0)));
        _mm256_sub_ps(
            _mm256_div_ps(_mm256_set1_ps(2.0), _mm256_add_ps(_mm256_set1_ps(1.0), e)),
            _mm256_set1_ps(1.0),
        )
    }

    /// The cell update on units `from..` by 8 while whole; returns where it stopped.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `gates` holds at least `4 * c.len()` values and `h` at
    /// least `c.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn lstm_cell(gates: &[f32], c: &mut [f32], h: &mut [f32], from: usize) -> usize {
        let n = c.len();
        let g = gates.as_ptr();
        let mut j = from;
        while j + 8 <= n {
            let i = sigmoid(_mm256_loadu_ps(g.add(j)));
            let f = sigmoid(_mm256_loadu_ps(g.add(n + j)));
            let gg = tanh(_mm256_loadu_ps(g.add(2 * n + j)));
            let o = sigmoid(_mm256_loadu_ps(g.add(3 * n + j)));
            let cn = _mm256_fmadd_ps(f, _mm256_loadu_ps(c.as_ptr().add(j)), _mm256_mul_ps(i, gg));
            _mm256_storeu_ps(c.as_mut_ptr().add(j), cn);
            _mm256_storeu_ps(h.as_mut_ptr().add(j), _mm256_mul_ps(o, tanh(cn)));
            j += 8;
        }
        j
    }

    /// `x = sigmoid(x)` on the first multiple of 8 values; returns how many were done.
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn sigmoid_inplace(x: &mut [f32]) -> usize {
        let mut j = 0;
        while j + 8 <= x.len() {
            let p = x.as_mut_ptr().add(j);
            _mm256_storeu_ps(p, sigmoid(_mm256_loadu_ps(p)));
            j += 8;
        }
        j
    }
}

/// The AVX-512 version of the cell update: the same operations as [`avx2`]'s, 16 lanes wide.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn exp(x: __m512) -> __m512 {
        let x = _mm512_min_ps(
            _mm512_max_ps(x, _mm512_set1_ps(-87.0)),
            _mm512_set1_ps(88.0),
        );
        let fx =
            _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(_mm512_fmadd_ps(
                x,
                _mm512_set1_ps(std::f32::consts::LOG2_E),
                _mm512_set1_ps(0.5),
            ));
        let r = _mm512_fmadd_ps(fx, _mm512_set1_ps(-0.693_359_4), x);
        let r = _mm512_fmadd_ps(fx, _mm512_set1_ps(2.121_944_4e-4), r);
        let mut p = _mm512_set1_ps(1.987_569_1e-4);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.398_199_9e-3));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.333_452e-3));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.166_579_6e-2));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.666_666_5e-1));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5));
        let y = _mm512_add_ps(
            _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
            _mm512_set1_ps(1.0),
        );
        let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(fx),
            _mm512_set1_epi32(127),
        ));
        _mm512_mul_ps(y, _mm512_castsi512_ps(e))
    }

    #[inline(always)]
    unsafe fn sigmoid(x: __m512) -> __m512 {
        let one = _mm512_set1_ps(1.0);
        _mm512_div_ps(
            one,
            _mm512_add_ps(one, exp(_mm512_sub_ps(_mm512_setzero_ps(), x))),
        )
    }

    #[inline(always)]
    unsafe fn tanh(x: __m512) -> __m512 {
        let e = exp(_mm512_mul_ps(x, _mm512_set1_ps(-2.0)));
        _mm512_sub_ps(
            _mm512_div_ps(_mm512_set1_ps(2.0), _mm512_add_ps(_mm512_set1_ps(1.0), e)),
            _mm512_set1_ps(1.0),
        )
    }

    /// The cell update on the first multiple of 16 units; returns where it stopped.
    ///
    /// # Safety
    /// AVX-512F must be available; `gates` holds at least `4 * c.len()` values and `h` at
    /// least `c.len()`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn lstm_cell(gates: &[f32], c: &mut [f32], h: &mut [f32]) -> usize {
        let n = c.len();
        let g = gates.as_ptr();
        let mut j = 0;
        while j + 16 <= n {
            let i = sigmoid(_mm512_loadu_ps(g.add(j)));
            let f = sigmoid(_mm512_loadu_ps(g.add(n + j)));
            let gg = tanh(_mm512_loadu_ps(g.add(2 * n + j)));
            let o = sigmoid(_mm512_loadu_ps(g.add(3 * n + j)));
            let cn = _mm512_fmadd_ps(f, _mm512_loadu_ps(c.as_ptr().add(j)), _mm512_mul_ps(i, gg));
            _mm512_storeu_ps(c.as_mut_ptr().add(j), cn);
            _mm512_storeu_ps(h.as_mut_ptr().add(j), _mm512_mul_ps(o, tanh(cn)));
            j += 16;
        }
        j
    }
}

/// One LSTM cell update for one sequence: `gates` holds the pre-activations `[i | f | g | o]`
/// (PyTorch's gate order, `4 * hidden` values); `c` and `h` (`hidden` values) are updated in
/// place: `c = sigmoid(f) * c + sigmoid(i) * tanh(g)`, `h = sigmoid(o) * tanh(c)`.
pub(crate) fn lstm_cell(gates: &[f32], c: &mut [f32], h: &mut [f32]) {
    let n = c.len();
    assert!(
        gates.len() >= 4 * n && h.len() >= n,
        "lstm_cell: buffers too short"
    );
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if chatterbox_cpu::avx512f() {
        // SAFETY: AVX-512F is available and the lengths were checked above.
        done = unsafe { avx512::lstm_cell(gates, c, h) };
    }
    #[cfg(target_arch = "x86_64")]
    if chatterbox_cpu::avx2_fma() {
        // SAFETY: AVX2 and FMA are available and the lengths were checked above (this takes
        // the units the 16-lane pass left).
        done = unsafe { avx2::lstm_cell(gates, c, h, done) };
    }
    for j in done..n {
        let cn = sigmoid::<false>(gates[n + j]) * c[j]
            + sigmoid::<false>(gates[j]) * tanh::<false>(gates[2 * n + j]);
        c[j] = cn;
        h[j] = sigmoid::<false>(gates[3 * n + j]) * tanh::<false>(cn);
    }
}

/// `x = sigmoid(x)` element-wise.
pub(crate) fn sigmoid_inplace(x: &mut [f32]) {
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if chatterbox_cpu::avx2_fma() {
        // SAFETY: AVX2 and FMA are available (checked at run time).
        done = unsafe { avx2::sigmoid_inplace(x) };
    }
    for v in &mut x[done..] {
        *v = sigmoid::<false>(*v);
    }
}

#[inline(always)]
fn affine_relu_cols_body<const FMA: bool>(
    x: &[f32],
    ld: usize,
    cols: usize,
    scale: &[f32],
    shift: &[f32],
    out: &mut [f32],
) {
    let (scale, shift) = (&scale[..cols], &shift[..cols]);
    for (xr, or) in x.chunks(ld).zip(out.chunks_exact_mut(cols)) {
        for (((o, &v), &a), &b) in or.iter_mut().zip(&xr[..cols]).zip(scale).zip(shift) {
            *o = madd::<FMA>(v, a, b).max(0.0);
        }
    }
}

multiversion! {
    /// `out[r, c] = max(0, x[r, c] * scale[c] + shift[c])` for the first `cols` columns of the
    /// rows of `x` (row stride `ld`); `out` is `rows x cols`. A BatchNorm + ReLU over
    /// time-major activations.
    pub(crate) fn affine_relu_cols(
        x: &[f32],
        ld: usize,
        cols: usize,
        scale: &[f32],
        shift: &[f32],
        out: &mut [f32],
    ) => affine_relu_cols_body
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    #[test]
    fn activations_match_std() {
        let mut worst: f32 = 0.0;
        for i in -4000..4000 {
            let x = i as f32 * 0.01;
            worst = worst.max((sigmoid::<false>(x) - 1.0 / (1.0 + (-x).exp())).abs());
            worst = worst.max((tanh::<false>(x) - x.tanh()).abs());
            let e = exp::<false>(x * 0.5);
            worst = worst.max(((e - (x * 0.5).exp()) / (x * 0.5).exp()).abs());
        }
        assert!(worst < 5e-7, "worst error {worst}");
        assert!(sigmoid::<false>(-1000.0) < 1e-37);
        assert_eq!(sigmoid::<false>(1000.0), 1.0);
        assert_eq!(tanh::<false>(-1000.0), -1.0);
        assert_eq!(tanh::<false>(1000.0), 1.0);
    }

    #[test]
    fn dispatched_versions_agree() {
        let x: Vec<f32> = (0..1003).map(|i| (i as f32 - 500.0) * 0.037).collect();
        let mut a = x.clone();
        sigmoid_inplace(&mut a);
        for (a, x) in a.iter().zip(&x) {
            assert_abs_diff_eq!(*a, 1.0 / (1.0 + (-x).exp()), epsilon = 5e-7);
        }
        let n = 29; // one AVX-512 block, one AVX block and a scalar tail
        let gates: Vec<f32> = (0..4 * n).map(|i| (i as f32 - 58.0) * 0.13).collect();
        let (mut c, mut h) = (vec![0.5f32; n], vec![0f32; n]);
        lstm_cell(&gates, &mut c, &mut h);
        let s = |v: f32| 1.0 / (1.0 + (-v).exp());
        for j in 0..n {
            let cn = s(gates[n + j]) * 0.5 + s(gates[j]) * gates[2 * n + j].tanh();
            assert_abs_diff_eq!(c[j], cn, epsilon = 1e-6);
            assert_abs_diff_eq!(h[j], s(gates[3 * n + j]) * cn.tanh(), epsilon = 1e-6);
        }
    }
}
