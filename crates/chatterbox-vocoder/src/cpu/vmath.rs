//! Vectorisable single-precision math for the CPU kernels.

/// `sin(x)` in f32, written so that loops over it vectorise: Cody-Waite reduction by pi in four
/// parts and SLEEF's `xsinf` (u35) minimax polynomial on `[-pi/2, pi/2]`. Error <= 3.5 ulp for
/// `|x| < 39000` (torch's vectorised `sin` is SLEEF's 1-ulp variant, so results differ from it
/// by a few ulp); NaN for infinite or NaN input. Beyond `|x| > 2^22` the reduction is not
/// meaningful (the result stays within [-1, 1]).
#[inline(always)]
pub(crate) fn sin(x: f32) -> f32 {
    const INV_PI: f32 = std::f32::consts::FRAC_1_PI;
    // Round to nearest integer by adding and subtracting 1.5 * 2^23.
    const ROUND: f32 = 12_582_912.0;
    const PI_A: f32 = 3.140_625;
    const PI_B: f32 = 0.000_967_025_76;
    const PI_C: f32 = 6.277_114e-7;
    const PI_D: f32 = 1.215_420_1e-10;
    // k = 1.5 * 2^23 + q: the integer q sits in the low mantissa bits (parity in bit 0).
    let k = x * INV_PI + ROUND;
    let q = k - ROUND;
    let mut r = x - q * PI_A;
    r -= q * PI_B;
    r -= q * PI_C;
    r -= q * PI_D;
    let s = r * r;
    let mut u = 2.608_316e-6_f32;
    u = u * s - 1.981_069e-4;
    u = u * s + 8.333_079e-3;
    u = u * s - 1.666_666e-1;
    let y = s * (u * r) + r;
    // sin(r + q pi) = (-1)^q sin(r)
    let odd = k.to_bits() << 31;
    f32::from_bits(y.to_bits() ^ odd)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sin_is_within_a_few_ulp_of_libm() {
        let mut worst = 0f64;
        let mut x = -200.0f32;
        while x < 200.0 {
            let want = (x as f64).sin();
            let got = super::sin(x) as f64;
            // error in units of f32 epsilon at the magnitude of the result (min 2^-24)
            let ulp = (want.abs().max(1.0 / 16.0) * f32::EPSILON as f64).max(1e-30);
            worst = worst.max((got - want).abs() / ulp);
            x += 0.000_731;
        }
        assert!(worst < 4.0, "worst error {worst} ulp");
        for x in [1e4f32, -3.3e4, 12345.678] {
            assert!(
                (super::sin(x) as f64 - (x as f64).sin()).abs() < 2e-6,
                "{x}"
            );
        }
        assert!(super::sin(f32::INFINITY).is_nan());
        assert!(super::sin(f32::NAN).is_nan());
        assert_eq!(super::sin(0.0), 0.0);
    }
}
