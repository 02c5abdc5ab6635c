//! `BatchNorm1d` / `BatchNorm2d` in inference mode (running statistics, eps 1e-5) as a
//! per-channel scale and shift, and convolution weights with a following BatchNorm folded in.
//!
//! `num_batches_tracked` (an int64 scalar in every checkpoint) is only used in training and is
//! never read.
use crate::weights::tensor;
use crate::Result;
use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

/// PyTorch's default `eps`.
const EPS: f64 = 1e-5;

fn host(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// `y = x * scale + shift` per channel (dim 1), with
/// `scale = weight / sqrt(running_var + eps)` and `shift = bias - running_mean * scale`.
#[derive(Debug, Clone)]
pub(crate) struct BatchNorm {
    scale: Tensor,
    shift: Tensor,
    host: Option<(Vec<f32>, Vec<f32>)>,
}

impl BatchNorm {
    /// Loads `running_mean`, `running_var` and, when `affine`, `weight` and `bias`.
    pub fn new(channels: usize, affine: bool, vb: VarBuilder) -> Result<Self> {
        let mean = tensor(&vb, "running_mean", &[channels])?;
        let var = tensor(&vb, "running_var", &[channels])?;
        let inv_std = (var + EPS)?.sqrt()?.recip()?;
        let (scale, shift) = if affine {
            let w = tensor(&vb, "weight", &[channels])?;
            let b = tensor(&vb, "bias", &[channels])?;
            let scale = (w * inv_std)?;
            let shift = (b - (mean * &scale)?)?;
            (scale, shift)
        } else {
            let shift = (mean * &inv_std)?.neg()?;
            (inv_std, shift)
        };
        let host = if vb.device().is_cpu() {
            Some((host(&scale)?, host(&shift)?))
        } else {
            None
        };
        Ok(Self { scale, shift, host })
    }

    /// Normalises `x` of shape `(B, C, ...)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut shape = vec![1; x.rank()];
        shape[1] = self.scale.dim(0)?;
        let scale = self.scale.reshape(shape.as_slice())?.to_dtype(x.dtype())?;
        let shift = self.shift.reshape(shape.as_slice())?.to_dtype(x.dtype())?;
        Ok(x.broadcast_mul(&scale)?.broadcast_add(&shift)?)
    }

    /// `(scale, shift)` on the host (CPU weights only).
    pub fn host(&self) -> Option<(&[f32], &[f32])> {
        self.host
            .as_ref()
            .map(|(s, b)| (s.as_slice(), b.as_slice()))
    }
}

/// Convolution weights (any rank, output channels first) with an optional bias, and their
/// host copies when on the CPU.
#[derive(Debug, Clone)]
pub(crate) struct ConvWeights {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    host: Option<(Vec<f32>, Option<Vec<f32>>)>,
}

impl ConvWeights {
    /// Wraps `weight` and `bias` as they are.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        let host = if weight.device().is_cpu() {
            let b = bias.as_ref().map(host).transpose()?;
            Some((host(&weight)?, b))
        } else {
            None
        };
        Ok(Self { weight, bias, host })
    }

    /// `bn(conv(x))` as one convolution: `weight * scale` (per output channel) and bias
    /// `shift` (the convolutions CAMPPlus folds have no bias of their own).
    pub fn folded(weight: Tensor, bn: &BatchNorm) -> Result<Self> {
        let mut shape = vec![1; weight.rank()];
        shape[0] = bn.scale.dim(0)?;
        let w = weight.broadcast_mul(
            &bn.scale
                .reshape(shape.as_slice())?
                .to_dtype(weight.dtype())?,
        )?;
        let b = bn.shift.to_dtype(weight.dtype())?;
        Self::new(w, Some(b))
    }

    /// Host weight (CPU kernels only; empty elsewhere).
    pub fn w(&self) -> &[f32] {
        self.host.as_ref().map_or(&[], |(w, _)| w.as_slice())
    }

    /// Host bias (CPU kernels only).
    pub fn b(&self) -> Option<&[f32]> {
        self.host.as_ref().and_then(|(_, b)| b.as_deref())
    }

    /// Adds the bias to `y` of shape `(B, C_out, ...)`.
    pub fn add_bias(&self, y: Tensor) -> Result<Tensor> {
        let Some(b) = &self.bias else { return Ok(y) };
        let mut shape = vec![1; y.rank()];
        shape[1] = b.dim(0)?;
        Ok(y.broadcast_add(&b.reshape(shape.as_slice())?)?)
    }

    /// A 1x1 convolution of `x` `(B, C_in, T)`: `(B, C_out, T)`, bias included.
    pub fn pointwise(&self, x: &Tensor) -> Result<Tensor> {
        let (c_out, c_in) = (self.weight.dim(0)?, self.weight.dim(1)?);
        let w = self.weight.reshape((c_out, c_in))?;
        self.add_bias(w.broadcast_matmul(x)?)
    }
}
