//! The estimator's convolutional blocks. Port of chatterbox/models/s3gen/decoder.py
//! `CausalBlock1D` and `CausalResnetBlock1D` (on matcha/decoder.py `ResnetBlock1D`), upstream
//! 5de7a54, on time-major `(batch, time, channels)` tensors.

use super::super::nn::{layer_norm, Conv1d, Linear};
use super::super::ops::{mish, mish_inplace};
use candle_core::{Module, Result, Tensor};
use candle_nn::{LayerNorm, VarBuilder};

/// `x * mask`, where no mask means no padding.
pub(crate) fn apply_mask(x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
    match mask {
        #[cfg(feature = "cuda")]
        Some(m) if crate::flow::cuda_ops::applies(x) => {
            crate::flow::cuda_ops::columns(x, Some(m), None, 1, 0, 0)
        }
        Some(m) => x.broadcast_mul(m),
        None => Ok(x.clone()),
    }
}

/// `CausalBlock1D`: `mish(LayerNorm(CausalConv1d(x * mask, k=3))) * mask`.
#[derive(Debug, Clone)]
pub(crate) struct CausalBlock1D {
    conv: Conv1d,
    norm: LayerNorm,
}

impl CausalBlock1D {
    pub(crate) fn new(dim: usize, dim_out: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            conv: Conv1d::causal(dim, dim_out, 3, vb.pp("block.0"))?,
            norm: layer_norm(dim_out, 1e-5, vb.pp("block.2"))?,
        })
    }

    /// `block(x + add)`, `add (1 or n, 1, dim)` broadcast over time (the ResNet block's time
    /// embedding), or `block(x)`.
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        mask: Option<&Tensor>,
        add: Option<&Tensor>,
    ) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some(bias) = self
            .conv
            .bias()
            .filter(|_| crate::flow::cuda_ops::applies(x))
        {
            let h = self.conv.forward_no_bias_masked_cuda(x, mask, add)?;
            return crate::flow::cuda_ops::block_tail(h, bias, &self.norm, mask);
        }
        let x = match add {
            Some(a) => x.broadcast_add(a)?,
            None => x.clone(),
        };
        let h = self.conv.forward(&apply_mask(&x, mask)?)?;
        let h = mish_inplace(self.norm.forward(&h)?)?;
        apply_mask(&h, mask)
    }
}

/// `CausalResnetBlock1D`: two causal blocks with the projected time embedding added between
/// them, plus a pointwise-conv residual.
#[derive(Debug, Clone)]
pub(crate) struct CausalResnetBlock1D {
    /// `mlp = Sequential(Mish(), Linear(time_emb_dim, dim_out))`
    mlp: Linear,
    block1: CausalBlock1D,
    block2: CausalBlock1D,
    res_conv: Conv1d,
}

impl CausalResnetBlock1D {
    pub(crate) fn new(
        dim: usize,
        dim_out: usize,
        time_emb_dim: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        Ok(Self {
            mlp: Linear::new(time_emb_dim, dim_out, true, vb.pp("mlp.1"))?,
            block1: CausalBlock1D::new(dim, dim_out, vb.pp("block1"))?,
            block2: CausalBlock1D::new(dim_out, dim_out, vb.pp("block2"))?,
            res_conv: Conv1d::pointwise(dim, dim_out, vb.pp("res_conv"))?,
        })
    }

    /// `mlp(time_emb)`: `(n, time_emb_dim)` -> `(n, dim_out)`. Depends on the time only, so the
    /// solver computes it once for every step.
    pub(crate) fn time_proj(&self, time_emb: &Tensor) -> Result<Tensor> {
        self.mlp.forward(&mish(time_emb)?)
    }

    /// `x (b, t, dim)`, `time_proj (b or 1, 1, dim_out)` from [`time_proj`](Self::time_proj).
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        mask: Option<&Tensor>,
        time_proj: &Tensor,
    ) -> Result<Tensor> {
        let h = self.block1.forward(x, mask, None)?;
        let h = self.block2.forward(&h, mask, Some(time_proj))?;
        self.res_conv.forward_residual(&apply_mask(x, mask)?, &h)
    }
}
