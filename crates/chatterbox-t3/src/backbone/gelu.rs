//! `gelu_new` (transformers' `NewGELUActivation`, the tanh approximation GPT-2 uses):
//! `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
//!
//! candle's `gelu` computes the same formula with one scalar `tanhf` per element on one thread,
//! which was 17 % of Turbo's CPU prefill (437 x 4096 values per layer). On the CPU in f32 this
//! runs in parallel, 8 lanes at a time, as `x · sigmoid(2u)` (the same function:
//! `(1 + tanh u) / 2 = 1 / (1 + e^(-2u))`) with the CPU attention's vectorised `exp` (about 1 ulp). Elsewhere
//! it is candle's `gelu`.
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

/// Values per parallel task.
const CHUNK: usize = 16 * 1024;

/// `gelu_new(x)`.
pub(crate) fn gelu_new(x: &Tensor) -> candle_core::Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == DType::F32 {
        x.apply_op1_no_bwd(&GeluNew)
    } else {
        x.gelu()
    }
}

struct GeluNew;

impl CustomOp1 for GeluNew {
    fn name(&self) -> &'static str {
        "t3-gelu-new"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(x) = s else {
            candle_core::bail!("t3-gelu-new: f32 only");
        };
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("t3-gelu-new: input must be contiguous");
        };
        let x = &x[a..b];
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK))
            .for_each(|(o, x)| apply(x, o));
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

const K0: f32 = 0.797_884_6; // √(2/π)
const K1: f32 = 0.044_715;

fn apply(x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if chatterbox_cpu::avx2_fma() {
            // SAFETY: the CPU supports the features the function is compiled for.
            unsafe { avx2::apply(x, out) };
            return;
        }
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = scalar(v);
    }
}

/// `v · sigmoid(2u)`, as the vector path computes it: `0.5 v (1 + tanh u)` loses every digit
/// where `tanh u` rounds to -1 (from v ≈ -5.6 on), which this form keeps.
fn scalar(v: f32) -> f32 {
    let u = K0 * v * (1.0 + K1 * v * v);
    v / (1.0 + (-2.0 * u).exp())
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::exp8::avx2::exp8;
    use super::{K0, K1};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn apply(x: &[f32], out: &mut [f32]) {
        let body = x.len() / 8 * 8;
        let one = _mm256_set1_ps(1.0);
        let (k0, k1) = (_mm256_set1_ps(K0), _mm256_set1_ps(K1));
        let sign = _mm256_set1_ps(-0.0);
        let mut i = 0;
        while i < body {
            let v = _mm256_loadu_ps(x.as_ptr().add(i));
            // u = √(2/π) (v + 0.044715 v³); sigmoid(2u) from e^(-2|u|) so exp never overflows
            let u = _mm256_mul_ps(
                k0,
                _mm256_fmadd_ps(_mm256_mul_ps(k1, v), _mm256_mul_ps(v, v), v),
            );
            let au = _mm256_andnot_ps(sign, u);
            let e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0), au));
            // sigmoid(2|u|) = 1 / (1 + e); sigmoid(-2|u|) = e / (1 + e)
            let inv = _mm256_div_ps(one, _mm256_add_ps(one, e));
            let pos = _mm256_cmp_ps(u, _mm256_setzero_ps(), _CMP_GE_OQ);
            let s = _mm256_blendv_ps(_mm256_mul_ps(e, inv), inv, pos);
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_mul_ps(v, s));
            i += 8;
        }
        for j in body..x.len() {
            out[j] = super::scalar(x[j]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn matches_the_tanh_formula_over_a_wide_range() -> candle_core::Result<()> {
        // -12..12 in small steps plus the extremes; 10_003 values so the scalar tail runs too
        let n = 10_003;
        let mut v: Vec<f32> = (0..n).map(|i| -12.0 + 24.0 * i as f32 / n as f32).collect();
        v.extend([0.0, -0.0, 1e-6, -1e-6, 40.0, -40.0, 1e4, -1e4]);
        let x = Tensor::new(v.as_slice(), &Device::Cpu)?;
        let got = gelu_new(&x)?.to_vec1::<f32>()?;
        for (&xv, &g) in v.iter().zip(&got) {
            let want = 0.5
                * (xv as f64)
                * (1.0
                    + ((K0 as f64) * (xv as f64) * (1.0 + (K1 as f64) * (xv as f64).powi(2)))
                        .tanh());
            let tol = 2e-6 * want.abs().max(1e-3);
            assert!(
                ((g as f64) - want).abs() <= tol,
                "gelu_new({xv}) = {g}, want {want}"
            );
        }
        Ok(())
    }

    #[test]
    fn matches_candle_gelu() -> candle_core::Result<()> {
        let x = Tensor::randn(0f32, 3.0, (37, 129), &Device::Cpu)?;
        let err = (gelu_new(&x)? - x.gelu()?)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert!(err < 1e-5, "{err}");
        Ok(())
    }
}
