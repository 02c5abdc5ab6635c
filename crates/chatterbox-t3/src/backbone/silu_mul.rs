//! `silu(gate) * up` of `LlamaMLP` (transformers' `modeling_llama.py`) from the fused gate/up
//! projection `[.., 2 I]`.
//!
//! candle runs it as separate passes (a scalar `expf` per value for the SiLU on the strided
//! gate half, then the strided product). On the CPU in f32 this is one parallel pass, 8 lanes
//! at a time, with the CPU attention's vectorised `exp` (about 1 ulp): the English prefill
//! (131 positions, CFG, 2 threads) went from 1068-1081 to 934-992 ms. In bf16 on CUDA it is
//! one kernel (`cuda_prefill`); elsewhere candle's ops.
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;

/// Rows per parallel task.
const ROWS: usize = 8;

/// `silu(gu[.., ..i]) * gu[.., i..]` for `gu` `[.., 2 i]`.
pub(crate) fn silu_mul(gu: &Tensor, i: usize) -> candle_core::Result<Tensor> {
    if gu.dim(D::Minus1)? != 2 * i {
        candle_core::bail!(
            "silu_mul: last dimension {} is not 2 x {i}",
            gu.dim(D::Minus1)?
        )
    }
    #[cfg(feature = "cuda")]
    if let Some(y) = super::cuda_prefill::silu_mul(gu)? {
        return Ok(y);
    }
    if gu.device().is_cpu() && gu.dtype() == DType::F32 {
        gu.contiguous()?.apply_op1_no_bwd(&SiluMul)
    } else {
        let gate = gu.narrow(D::Minus1, 0, i)?;
        let up = gu.narrow(D::Minus1, i, i)?;
        candle_nn::ops::silu(&gate)? * up
    }
}

struct SiluMul;

impl CustomOp1 for SiluMul {
    fn name(&self) -> &'static str {
        "t3-silu-mul"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(x) = s else {
            candle_core::bail!("t3-silu-mul: f32 only");
        };
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("t3-silu-mul: input must be contiguous");
        };
        let mut dims = l.dims().to_vec();
        let Some(last) = dims.last_mut() else {
            candle_core::bail!("t3-silu-mul: scalar input");
        };
        let i = *last / 2;
        *last = i;
        let x = &x[a..b];
        let mut out = vec![0f32; x.len() / 2];
        if i > 0 {
            out.par_chunks_mut(ROWS * i)
                .zip(x.par_chunks(ROWS * 2 * i))
                .for_each(|(o, x)| {
                    for (o, gu) in o.chunks_exact_mut(i).zip(x.chunks_exact(2 * i)) {
                        let (gate, up) = gu.split_at(i);
                        apply(gate, up, o);
                    }
                });
        }
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }
}

fn apply(gate: &[f32], up: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if chatterbox_cpu::avx2_fma() {
            // SAFETY: the CPU supports the features the function is compiled for.
            unsafe { avx2::apply(gate, up, out) };
            return;
        }
    }
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = scalar(g, u);
    }
}

/// candle's `silu` (`x / (1 + e^-x)`) times `up`.
fn scalar(g: f32, u: f32) -> f32 {
    g / (1.0 + (-g).exp()) * u
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::exp8::avx2::exp8;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn apply(gate: &[f32], up: &[f32], out: &mut [f32]) {
        let n = out.len().min(gate.len()).min(up.len());
        let body = n / 8 * 8;
        let one = _mm256_set1_ps(1.0);
        let sign = _mm256_set1_ps(-0.0);
        let mut j = 0;
        while j < body {
            let g = _mm256_loadu_ps(gate.as_ptr().add(j));
            // sigmoid from e^-|g|, so exp never overflows: 1 / (1 + e) for g >= 0, else
            // e / (1 + e)
            let e = exp8(_mm256_or_ps(g, sign));
            let inv = _mm256_div_ps(one, _mm256_add_ps(one, e));
            let pos = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_GE_OQ);
            let s = _mm256_blendv_ps(_mm256_mul_ps(e, inv), inv, pos);
            let u = _mm256_loadu_ps(up.as_ptr().add(j));
            _mm256_storeu_ps(
                out.as_mut_ptr().add(j),
                _mm256_mul_ps(_mm256_mul_ps(g, s), u),
            );
            j += 8;
        }
        for k in body..n {
            out[k] = super::scalar(gate[k], up[k]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn matches_candle_silu_times_up() -> candle_core::Result<()> {
        // 2 x 3 rows of 2 x 203 (a scalar tail after the 8-lane body), a wide range of gates
        let gu = (Tensor::randn(0f32, 1.0, (2, 3, 406), &Device::Cpu)? * 6.0)?;
        let got = silu_mul(&gu, 203)?;
        assert_eq!(got.dims(), &[2, 3, 203]);
        let gate = gu.narrow(D::Minus1, 0, 203)?;
        let up = gu.narrow(D::Minus1, 203, 203)?;
        let want = (candle_nn::ops::silu(&gate)? * up)?;
        let err = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
        let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(err <= 2e-6 * scale, "{err} of {scale}");
        // the extremes: no overflow, silu(-100) ~ 0, silu(100) = 100
        let mut v = vec![-100f32, 100.0, 0.0, -0.0, 1.0, -1.0, 50.0, -50.0];
        v.extend([1f32; 8]);
        let x = Tensor::new(v.as_slice(), &Device::Cpu)?.reshape((1, 16))?;
        let got = silu_mul(&x, 8)?.to_vec2::<f32>()?;
        assert!(got[0][0].abs() < 1e-30 && got[0][1] == 100.0 && got[0][2] == 0.0);
        assert!((got[0][4] - 0.731_058_6).abs() < 1e-6 && (got[0][5] + 0.268_941_4).abs() < 1e-6);
        assert!(silu_mul(&x, 7).is_err());
        Ok(())
    }
}
