//! Vectorisable elementwise logarithms for the feature extractors' hot loops.
//!
//! `f32::ln` is a scalar libm call (about 15 ns); these branch-free versions let the compiler
//! process 8 values per instruction. Accuracy: within 2e-7 relative of `f64::ln` for positive
//! normal inputs, far inside the 1e-4 absolute tolerance of log-domain features.

const SQRT_2: f32 = std::f32::consts::SQRT_2;

/// Natural log of a positive, normal, finite `x` (callers clamp away zero first).
#[inline(always)]
pub(crate) fn ln_pos(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 127;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000); // [1, 2)
    let big = m > SQRT_2;
    m = if big { m * 0.5 } else { m };
    e += big as i32;
    // ln(m) = 2 atanh(s), s = (m - 1) / (m + 1) in [-0.1716, 0.1716]
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let p = 1.0 / 9.0;
    let p = p * s2 + 1.0 / 7.0;
    let p = p * s2 + 1.0 / 5.0;
    let p = p * s2 + 1.0 / 3.0;
    let p = p * s2 + 1.0;
    2.0 * s * p + e as f32 * std::f32::consts::LN_2
}

/// `ln(max(x, floor))` in place; `floor` must be a positive normal number.
pub(crate) fn ln_clamped(values: &mut [f32], floor: f32) {
    for v in values {
        *v = ln_pos(v.max(floor));
    }
}

/// `log10(max(x, floor))` in place; `floor` must be a positive normal number.
pub(crate) fn log10_clamped(values: &mut [f32], floor: f32) {
    for v in values {
        *v = ln_pos(v.max(floor)) * std::f32::consts::LOG10_E;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_libm_at_known_points() {
        for &x in &[
            1e-10f32,
            1e-5,
            f32::EPSILON,
            0.5,
            1.0,
            SQRT_2,
            2.0,
            10.0,
            12345.678,
            3.4e38,
        ] {
            let want = (x as f64).ln();
            let got = ln_pos(x) as f64;
            assert!(
                (got - want).abs() <= 2e-7 * want.abs().max(1.0),
                "ln({x}) = {got}, want {want}"
            );
        }
    }

    proptest! {
        #[test]
        fn relative_error_is_tiny(x in 1e-30f32..1e30) {
            let want = (x as f64).ln();
            let got = ln_pos(x) as f64;
            prop_assert!((got - want).abs() <= 2e-7 * want.abs().max(1.0));
        }
    }
}
