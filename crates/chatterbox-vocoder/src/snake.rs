//! Port of `Snake` from chatterbox/models/s3gen/hifigan.py (upstream 5de7a54).
use crate::weights::get;
use crate::Result;
use candle_core::{Module, Tensor};
use candle_nn::{Init, VarBuilder};

/// Snake activation `x + 1 / (alpha + 1e-9) * sin(alpha * x)^2` with a learned `alpha` per
/// channel (linear scale, as HiFT builds it: `alpha_logscale=False`).
#[derive(Debug, Clone)]
pub struct Snake {
    /// `alpha`, shaped `(1, C, 1)`.
    alpha: Tensor,
    /// `1 / (alpha + 1e-9)`, shaped `(1, C, 1)`.
    inv_alpha: Tensor,
    /// Host copies of `alpha` and `inv_alpha` for the CPU kernels (CPU tensors only).
    host: Option<(Vec<f32>, Vec<f32>)>,
}

impl Snake {
    /// Loads `alpha` (`[channels]`).
    pub fn new(channels: usize, vb: VarBuilder) -> Result<Self> {
        let alpha = get(&vb, channels, "alpha", Init::Const(1.0))?.reshape((1, channels, 1))?;
        // Python: `1.0 / (alpha + self.no_div_by_zero)` in f32.
        let inv_alpha = (alpha.clone() + 1e-9)?.recip()?;
        let host = if alpha.device().is_cpu() {
            Some((
                alpha.flatten_all()?.to_vec1()?,
                inv_alpha.flatten_all()?.to_vec1()?,
            ))
        } else {
            None
        };
        Ok(Self {
            alpha,
            inv_alpha,
            host,
        })
    }

    /// `(alpha, 1 / (alpha + 1e-9))` on the host, for CPU tensors.
    pub(crate) fn host(&self) -> Option<(&[f32], &[f32])> {
        self.host
            .as_ref()
            .map(|(a, i)| (a.as_slice(), i.as_slice()))
    }

    /// `(alpha, 1 / (alpha + 1e-9))` as `(1, C, 1)` tensors.
    #[cfg(feature = "cuda")]
    pub(crate) fn params(&self) -> (&Tensor, &Tensor) {
        (&self.alpha, &self.inv_alpha)
    }

    /// The activation with candle ops (every backend; one fused kernel on CUDA in f32).
    pub(crate) fn forward_generic(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        #[cfg(feature = "cuda")]
        if crate::cuda::applies(x) && self.alpha.dtype() == candle_core::DType::F32 {
            return crate::cuda_glue::snake(x, &self.alpha, &self.inv_alpha);
        }
        let s = x.broadcast_mul(&self.alpha)?.sin()?.sqr()?;
        x + s.broadcast_mul(&self.inv_alpha)?
    }
}

impl Module for Snake {
    /// `(B, C, T)` in and out; one vectorised pass on the CPU.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match &self.host {
            Some((alpha, inv)) if x.device().is_cpu() => crate::cpu::snake(x, alpha, inv),
            _ => self.forward_generic(x),
        }
    }
}
