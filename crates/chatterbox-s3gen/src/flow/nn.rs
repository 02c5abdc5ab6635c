//! Layers shared by the encoder and the estimator: `nn.Linear`, `nn.LayerNorm` and `nn.Conv1d`
//! working on time-major `(batch, time, channels)` tensors, so that the flow never transposes
//! between its convolutions, norms and attention.
//!
//! Convolutions are computed as one matrix product over `kernel` shifted copies of the input
//! (im2col), which every candle backend runs at GEMM speed. Matrix products in bf16 on the CPU
//! (which candle's CPU GEMM lacks) are computed in f32 and rounded back, as a GPU bf16 GEMM with
//! f32 accumulation does.

use super::ops::{bias_residual_inplace, conv1d_cpu};
use candle_core::{Module, Result, Tensor, D};
use candle_nn::{Init, VarBuilder};

pub(crate) use crate::linear::{matmul, Linear};

/// `x @ weight^T + bias`: the bias added by one kernel on CUDA (candle's broadcast add is a
/// strided pass), exactly as candle adds it.
pub(crate) fn linear(linear: &Linear, x: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(b) = linear.bias() {
        let y = linear.forward_no_bias(x)?;
        if super::cuda_ops::applies(&y) && b.dtype() == y.dtype() {
            return super::cuda_ops::bias_add_inplace(y, b);
        }
        return y.broadcast_add(b);
    }
    linear.forward(x)
}

/// `residual + (x @ weight^T + bias)`, fused on the CPU.
pub(crate) fn linear_residual(linear: &Linear, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
    bias_residual_inplace(linear.forward_no_bias(x)?, linear.bias(), residual)
}

/// `torch.nn.LayerNorm` over the last dimension, with its eps.
pub(crate) fn layer_norm(size: usize, eps: f64, vb: VarBuilder) -> Result<candle_nn::LayerNorm> {
    let weight = vb.get_with_hints(size, "weight", Init::Const(1.0))?;
    let bias = vb.get_with_hints(size, "bias", Init::Const(0.0))?;
    Ok(candle_nn::LayerNorm::new(weight, bias, eps))
}

/// `torch.nn.Conv1d` (stride 1, dilation 1, one group) with explicit zero padding on the left
/// and on the right of the time axis, on `(batch, time, in)` tensors.
#[derive(Debug, Clone)]
pub(crate) struct Conv1d {
    /// The kernel as a linear layer over `kernel * in` stacked inputs, tap-major.
    linear: Linear,
    kernel: usize,
    pad_left: usize,
    pad_right: usize,
}

impl Conv1d {
    pub(crate) fn new(
        in_ch: usize,
        out_ch: usize,
        kernel: usize,
        pad_left: usize,
        pad_right: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        let w = vb.get_with_hints(
            (out_ch, in_ch, kernel),
            "weight",
            candle_nn::init::DEFAULT_KAIMING_NORMAL,
        )?;
        let bound = 1.0 / ((in_ch * kernel) as f64).sqrt();
        let b = vb.get_with_hints(
            out_ch,
            "bias",
            Init::Uniform {
                lo: -bound,
                up: bound,
            },
        )?;
        // (out, in, k) -> (out, k, in) -> (out, k * in): column j * in + c is tap j of channel c.
        let w = w
            .permute((0, 2, 1))?
            .contiguous()?
            .reshape((out_ch, kernel * in_ch))?;
        Ok(Self {
            linear: Linear::from_weights(w, Some(b))?,
            kernel,
            pad_left,
            pad_right,
        })
    }

    /// A causal convolution: `kernel - 1` zeros on the left (decoder.py `CausalConv1d`).
    pub(crate) fn causal(
        in_ch: usize,
        out_ch: usize,
        kernel: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        Self::new(in_ch, out_ch, kernel, kernel.saturating_sub(1), 0, vb)
    }

    /// A pointwise (kernel 1) convolution.
    pub(crate) fn pointwise(in_ch: usize, out_ch: usize, vb: VarBuilder) -> Result<Self> {
        Self::new(in_ch, out_ch, 1, 0, 0, vb)
    }
}

impl Conv1d {
    /// The bias.
    #[cfg(feature = "cuda")]
    pub(crate) fn bias(&self) -> Option<&Tensor> {
        self.linear.bias()
    }

    /// The stacked shifted inputs the kernel is applied to (`x` itself for a pointwise conv).
    fn columns(&self, x: &Tensor) -> Result<Tensor> {
        if self.kernel == 1 && self.pad_left == 0 && self.pad_right == 0 {
            return Ok(x.clone());
        }
        #[cfg(feature = "cuda")]
        if super::cuda_ops::applies(x) {
            return super::cuda_ops::columns(
                x,
                None,
                None,
                self.kernel,
                self.pad_left,
                self.pad_right,
            );
        }
        let xp = x.pad_with_zeros(1, self.pad_left, self.pad_right)?;
        let t_out = (xp.dim(1)? + 1).saturating_sub(self.kernel);
        let taps = (0..self.kernel)
            .map(|j| xp.narrow(1, j, t_out))
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&taps, D::Minus1)
    }

    /// `conv((x + add) * mask)` without the bias, on CUDA (for the fused bias + norm after
    /// it): `add (1 or n, 1, in)` a time embedding, `mask (n, t, 1)`; the columns come from one
    /// kernel.
    #[cfg(feature = "cuda")]
    pub(crate) fn forward_no_bias_masked_cuda(
        &self,
        x: &Tensor,
        mask: Option<&Tensor>,
        add: Option<&Tensor>,
    ) -> Result<Tensor> {
        let cols =
            super::cuda_ops::columns(x, mask, add, self.kernel, self.pad_left, self.pad_right)?;
        self.linear.forward_no_bias(&cols)
    }

    /// `residual + conv(x)`, fused on the CPU.
    pub(crate) fn forward_residual(&self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        linear_residual(&self.linear, &self.columns(x)?, residual)
    }
}

impl Module for Conv1d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if self.kernel > 1 {
            if let (Some(weight), Some(bias)) = (self.linear.weight_in_out(), self.linear.bias()) {
                let fast = conv1d_cpu(x, weight, bias, self.kernel, self.pad_left, self.pad_right)?;
                if let Some(y) = fast {
                    return Ok(y);
                }
            }
        }
        #[cfg(feature = "cuda")]
        if let Some(b) = self.linear.bias().filter(|_| super::cuda_ops::applies(x)) {
            let y = self.linear.forward_no_bias(&self.columns(x)?)?;
            return super::cuda_ops::bias_add_inplace(y, b);
        }
        self.linear.forward(&self.columns(x)?)
    }
}
