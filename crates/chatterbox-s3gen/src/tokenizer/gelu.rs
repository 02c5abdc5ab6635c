//! Exact-form GELU, `x / 2 * (1 + erf(x / sqrt 2))`, with the bias of the preceding linear layer
//! fused in: the MLP activation of `ResidualAttentionBlock` and the convolutions of
//! `AudioEncoderV2` (s3tokenizer/model_v2.py, `nn.GELU()` / `F.gelu`).
//!
//! On the CPU, torch evaluates `erf` with the Abramowitz-Stegun 7.1.26 formula (`erf()` in
//! ATen's `vec256_float.h`, 1.5e-7 absolute error); this port uses the same formula, which
//! tracks the reference more closely than a correctly rounded `erf` and runs about ten times
//! faster than candle's scalar one. Other devices use candle's `gelu_erf`.
use crate::Result;
use candle_core::{CpuStorage, CustomOp2, DType, Device, InplaceOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

/// [`bias_gelu`] on a tensor the caller owns and no one else reads (a fresh matmul output):
/// computed in place on the CPU.
pub(crate) fn bias_gelu_owned(x: Tensor, bias: &Tensor) -> Result<Tensor> {
    match (x.device(), x.dtype(), bias.dtype()) {
        (Device::Cpu, DType::F32, DType::F32) if x.is_contiguous() => {
            x.inplace_op2(&bias.contiguous()?, &CpuBiasGeluInplace)?;
            Ok(x)
        }
        _ => bias_gelu(&x, bias),
    }
}

/// `gelu(x + bias)` for `x` of shape `(..., n)` and `bias` of shape `(n,)`.
pub fn bias_gelu(x: &Tensor, bias: &Tensor) -> Result<Tensor> {
    match (x.device(), x.dtype(), bias.dtype()) {
        (Device::Cpu, DType::F32, DType::F32) => Ok(x
            .contiguous()?
            .apply_op2_no_bwd(&bias.contiguous()?, &CpuBiasGelu)?),
        _ => Ok(x.broadcast_add(bias)?.gelu_erf()?),
    }
}

/// `exp(x)` for `x <= 0` (Cephes `expf`: range reduction by ln 2 in two parts and a degree-5
/// polynomial, about 1 ulp); inputs below -87 give `exp(-87)`, which the caller multiplies into
/// a negligible term.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // adding and removing 1.5 * 2^23 rounds to the nearest integer without a libm call
    const ROUND: f32 = 12_582_912.0;
    let x = x.max(-87.0);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    // the integer n sits in the low mantissa bits of t (|n| <= 126): read it from there rather
    // than with a saturating float-to-int cast, which does not vectorise
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5; // Cephes: 5.0000001201e-1, which is 0.5 in f32
    let y = p * (r * r) + r + 1.0;
    y * f32::from_bits((ni.wrapping_add(127) as u32) << 23)
}

/// torch's vectorised `erf`: `sign(x) * (1 - t * poly(t) * exp(-x^2))`, `t = 1 / (1 + p|x|)`.
#[inline(always)]
fn erf_as(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (0.327_591_1 * a + 1.0);
    let mut r = 1.061_405_4_f32 * t - 1.453_152_1;
    r = r * t + 1.421_413_8;
    r = r * t - 0.284_496_74;
    r = r * t + 0.254_829_6;
    let e = 1.0 - r * t * exp_nonpositive(-(a * a));
    e.copysign(x)
}

/// torch's `x * 0.5 * (1 + erf(x * M_SQRT1_2))`.
#[inline(always)]
fn gelu(x: f32) -> f32 {
    x * 0.5 * (1.0 + erf_as(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Rows per parallel task: about 64 K values.
fn rows_per_task(n: usize) -> usize {
    ((1 << 16) / n.max(1)).max(1)
}

/// `x <- gelu(x + bias)` over whole rows of `x`, in parallel.
fn bias_gelu_par(x: &mut [f32], bias: &[f32]) {
    let n = bias.len().max(1);
    x.par_chunks_mut(rows_per_task(n) * n)
        .for_each(|rows| bias_gelu_rows(rows, bias));
}

fn bias_gelu_rows(x: &mut [f32], bias: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if chatterbox_cpu::avx2_fma() {
            // SAFETY: the CPU supports the features the function is compiled for.
            unsafe { bias_gelu_rows_avx2(x, bias) };
            return;
        }
    }
    bias_gelu_rows_portable(x, bias)
}

/// The same loop compiled for AVX2, which the compiler vectorises 8 lanes wide: the formula
/// is branch-free and Rust never fuses `a * b + c` into an FMA on its own, so every lane
/// computes bit for bit what the portable loop computes (checked by a test).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn bias_gelu_rows_avx2(x: &mut [f32], bias: &[f32]) {
    bias_gelu_rows_portable(x, bias)
}

#[inline(always)]
fn bias_gelu_rows_portable(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v = gelu(*v + b);
        }
    }
}

fn check_shapes(x: &Layout, bias: &Layout) -> candle_core::Result<usize> {
    let n = bias.shape().dims1()?;
    if x.shape().dims().last() != Some(&n) || n == 0 {
        candle_core::bail!(
            "bias_gelu: input {:?} vs bias {:?}",
            x.shape(),
            bias.shape()
        )
    }
    Ok(n)
}

fn contiguous<'a>(s: &'a [f32], l: &Layout) -> candle_core::Result<&'a [f32]> {
    let Some((a, z)) = l.contiguous_offsets() else {
        candle_core::bail!("bias_gelu: inputs must be contiguous")
    };
    Ok(&s[a..z])
}

struct CpuBiasGelu;

impl CustomOp2 for CpuBiasGelu {
    fn name(&self) -> &'static str {
        "s3tokenizer-bias-gelu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        check_shapes(l1, l2)?;
        let (CpuStorage::F32(x), CpuStorage::F32(b)) = (s1, s2) else {
            candle_core::bail!("bias_gelu: f32 only on the cpu path")
        };
        let mut out = contiguous(x, l1)?.to_vec();
        bias_gelu_par(&mut out, contiguous(b, l2)?);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

struct CpuBiasGeluInplace;

impl InplaceOp2 for CpuBiasGeluInplace {
    fn name(&self) -> &'static str {
        "s3tokenizer-bias-gelu-inplace"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        check_shapes(l1, l2)?;
        let (CpuStorage::F32(x), CpuStorage::F32(b)) = (s1, s2) else {
            candle_core::bail!("bias_gelu: f32 only on the cpu path")
        };
        let Some((a, z)) = l1.contiguous_offsets() else {
            candle_core::bail!("bias_gelu: inputs must be contiguous")
        };
        bias_gelu_par(&mut x[a..z], contiguous(b, l2)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_2_ulp() {
        let mut worst = 0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let got = exp_nonpositive(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 2.5e-7, "max relative error {worst:e}");
    }

    #[test]
    fn vectorised_rows_are_bit_identical_to_the_portable_loop() {
        // values across the exp clamp, zero crossings and a row length with a tail
        let n = 1037;
        let x: Vec<f32> = (0..3 * n)
            .map(|i| ((i * 7919) % 20_011) as f32 * 1.3e-3 - 13.0)
            .collect();
        let bias: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let (mut fast, mut slow) = (x.clone(), x.clone());
        bias_gelu_rows(&mut fast, &bias);
        bias_gelu_rows_portable(&mut slow, &bias);
        for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "element {i}: {a} vs {b}");
        }
    }

    #[test]
    fn gelu_matches_the_definition_within_the_formula_error() -> Result<()> {
        // the A-S formula is good to 1.5e-7 in erf, so gelu is within |x|/2 * 1.5e-7 + rounding
        // (the definition: candle's f64 gelu_erf, with a double-precision erf)
        let dev = Device::Cpu;
        let xs: Vec<f32> = (-8000..=8000).map(|i| i as f32 * 1e-3).collect();
        let want = Tensor::new(xs.as_slice(), &dev)?
            .to_dtype(DType::F64)?
            .gelu_erf()?
            .to_vec1::<f64>()?;
        for (&x, want) in xs.iter().zip(want) {
            let got = gelu(x) as f64;
            let bound = 2e-7 * (x.abs() as f64).max(1.0);
            assert!(
                (got - want).abs() <= bound,
                "gelu({x}) = {got}, want {want}"
            );
        }
        // the op, threaded, with its bias, against candle's f32 gelu_erf
        let x = Tensor::randn(0f32, 2.0, (300, 257), &dev)?;
        let b = Tensor::randn(0f32, 1.0, 257, &dev)?;
        let fast = bias_gelu(&x, &b)?;
        let reference = x.broadcast_add(&b)?.gelu_erf()?;
        let diff = (fast - reference)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-6, "max diff {diff}");
        Ok(())
    }
}
