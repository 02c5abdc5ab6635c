//! The estimator's transformer blocks. Port of chatterbox/models/s3gen/matcha/transformer.py
//! `BasicTransformerBlock` and `FeedForward` with diffusers 0.29's `Attention` /
//! `AttnProcessor2_0` (upstream 5de7a54): self-attention only, q/k/v without bias, full
//! (non-causal) attention with an additive key-padding bias, exact-GELU feed-forward.

use super::super::nn::{layer_norm, linear_residual, Linear};
use super::super::ops::{bias_gelu_inplace, self_attention, KeyBias};
use candle_core::Module;
use candle_core::{Result, Tensor};
use candle_nn::{LayerNorm, VarBuilder};

/// diffusers `Attention(query_dim=dim, heads, dim_head, bias=False)` as self-attention. The
/// three projections run as one GEMM (`to_q`, `to_k`, `to_v` stacked at load time) and the
/// softmax scale `dim_head^-0.5` is folded into `to_q` (exact when `dim_head` is a power of 4,
/// as S3Gen's 64).
#[derive(Debug, Clone)]
pub(crate) struct Attention {
    to_qkv: Linear,
    to_out: Linear,
    heads: usize,
    dim_head: usize,
}

impl Attention {
    pub(crate) fn new(dim: usize, heads: usize, dim_head: usize, vb: VarBuilder) -> Result<Self> {
        let inner = heads * dim_head;
        let q = Linear::new(dim, inner, false, vb.pp("to_q"))?;
        let k = Linear::new(dim, inner, false, vb.pp("to_k"))?;
        let v = Linear::new(dim, inner, false, vb.pp("to_v"))?;
        let scale = 1.0 / (dim_head as f64).sqrt();
        let w = Tensor::cat(
            &[q.weight()?.affine(scale, 0.0)?, k.weight()?, v.weight()?],
            0,
        )?;
        Ok(Self {
            to_qkv: Linear::from_weights(w, None)?,
            to_out: Linear::new(inner, dim, true, vb.pp("to_out.0"))?,
            heads,
            dim_head,
        })
    }

    /// `residual + attn(x)` for `x (b, t, dim)`; `key_bias` is the additive key-padding bias,
    /// `None` without padding.
    pub(crate) fn forward_residual(
        &self,
        x: &Tensor,
        key_bias: Option<&KeyBias>,
        residual: &Tensor,
    ) -> Result<Tensor> {
        let qkv = self.to_qkv.forward_no_bias(x)?; // (b, t, 3 h d), q pre-scaled
        let y = self_attention(&qkv, self.heads, self.dim_head, key_bias)?;
        linear_residual(&self.to_out, &y, residual)
    }
}

/// `FeedForward(dim, mult=4, activation_fn="gelu")`: `net.0 = GELU(dim, 4 dim)` (Linear + exact
/// GELU), `net.2 = Linear(4 dim, dim)`.
#[derive(Debug, Clone)]
pub(crate) struct FeedForward {
    proj: Linear,
    out: Linear,
}

impl FeedForward {
    pub(crate) fn new(dim: usize, vb: VarBuilder) -> Result<Self> {
        let inner = dim * 4;
        Ok(Self {
            proj: Linear::new(dim, inner, true, vb.pp("net.0.proj"))?,
            out: Linear::new(inner, dim, true, vb.pp("net.2"))?,
        })
    }
}

impl FeedForward {
    /// `residual + ff(x)`.
    pub(crate) fn forward_residual(&self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let h = bias_gelu_inplace(self.proj.forward_no_bias(x)?, self.proj.bias())?;
        linear_residual(&self.out, &h, residual)
    }
}

/// `BasicTransformerBlock` with layer norms (eps 1e-5), no cross-attention:
/// `x += attn1(norm1(x))`, `x += ff(norm3(x))`.
#[derive(Debug, Clone)]
pub(crate) struct BasicTransformerBlock {
    norm1: LayerNorm,
    attn1: Attention,
    norm3: LayerNorm,
    ff: FeedForward,
}

impl BasicTransformerBlock {
    pub(crate) fn new(dim: usize, heads: usize, dim_head: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            norm1: layer_norm(dim, 1e-5, vb.pp("norm1"))?,
            attn1: Attention::new(dim, heads, dim_head, vb.pp("attn1"))?,
            norm3: layer_norm(dim, 1e-5, vb.pp("norm3"))?,
            ff: FeedForward::new(dim, vb.pp("ff"))?,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor, key_bias: Option<&KeyBias>) -> Result<Tensor> {
        let x = self
            .attn1
            .forward_residual(&self.norm1.forward(x)?, key_bias, x)?;
        self.ff.forward_residual(&self.norm3.forward(&x)?, &x)
    }
}
