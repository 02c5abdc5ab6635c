//! The host side of the CUDA convolution's split precision (`cuda_conv`): an f32 split into
//! its TF32 part and remainder, and f16 operand pairs. Plain Rust, so that the tests run
//! without a GPU.

/// `x` rounded to TF32 (11 significant bits, to nearest) and the f32 remainder, as the kernel
/// splits its input; non-finite values (and values that would round past the largest float)
/// stay whole in `hi`.
pub(crate) fn split(x: f32) -> (f32, f32) {
    let hi = f32::from_bits(x.to_bits().wrapping_add(0x1000) & 0xffff_e000);
    if x.is_finite() && hi.is_finite() {
        (hi, x - hi)
    } else {
        (x, 0.0)
    }
}

/// Two values rounded to f16 (to nearest, saturated at the largest finite f16) as a pair in
/// one f32's bits, the first in the low half: an f16 mma operand register.
pub(crate) fn f16_pair(a: f32, b: f32) -> f32 {
    let h = |v: f32| u32::from(half::f16::from_f32(v.clamp(-65504.0, 65504.0)).to_bits());
    f32::from_bits(h(a) | (h(b) << 16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_exact_and_hi_has_eleven_bits() {
        for x in [1.0f32, -3.7, 1e-30, 123456.79, f32::MIN_POSITIVE, 0.1, -0.0] {
            let (hi, lo) = split(x);
            assert_eq!(hi + lo, x);
            assert_eq!(hi.to_bits() & 0x1fff, 0, "{x}");
            // at most half a TF32 ulp: 2^-11 of the value (0.1's is 1.00006 * 2^-12 of it)
            assert!(lo.abs() <= x.abs() * 2f32.powi(-11), "{x}");
        }
        assert_eq!(split(f32::MAX), (f32::MAX, 0.0));
        assert!(split(f32::NAN).0.is_nan());
    }

    #[test]
    fn f16_pairs_round_to_nearest_and_saturate() {
        let pair = |a, b| f16_pair(a, b).to_bits();
        // 1.0 is 0x3c00, -2.0 0xc000; the first value goes in the low half
        assert_eq!(pair(1.0, -2.0), 0xc000_3c00);
        // a TF32 `hi` keeps all its bits: 1 + 2^-10 is 0x3c01
        assert_eq!(pair(split(1.000_976_6).0, 0.0), 0x0000_3c01);
        // 1 + 2^-11 is a tie: to even (1.0); 1 + 3 * 2^-12 rounds up
        assert_eq!(
            pair(1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-12)),
            0x3c01_3c00
        );
        // past the largest finite f16 (65504, 0x7bff): saturated, never infinite
        assert_eq!(pair(1e6, -f32::INFINITY), 0xfbff_7bff);
    }
}
