//! Multi-head self-attention with relative positions. Port of
//! chatterbox/models/s3gen/transformer/attention.py `RelPositionMultiHeadedAttention`
//! (upstream 5de7a54): Transformer-XL scores `(q + u) k^T + rel_shift((q + v) p^T)`, scaled by
//! `1 / sqrt(d_k)`, padded keys filled with `-inf` before the softmax. On the CPU in f32 the
//! score path is one kernel (`rel_attention_cpu`).

use super::super::nn::{linear, linear_residual, matmul, Linear};
use super::super::ops::rel_attention_probs;
use super::super::rel_attention_cpu::rel_attention_tensors;
use candle_core::{Module, Result, Tensor};
use candle_nn::{Init, VarBuilder};

/// `RelPositionMultiHeadedAttention` (with `key_bias = True`).
#[derive(Debug, Clone)]
pub(crate) struct RelPositionMultiHeadedAttention {
    linear_q: Linear,
    linear_k: Linear,
    linear_v: Linear,
    linear_out: Linear,
    linear_pos: Linear,
    /// `(h, d_k)`
    pos_bias_u: Tensor,
    pos_bias_v: Tensor,
    h: usize,
    d_k: usize,
}

impl RelPositionMultiHeadedAttention {
    pub(crate) fn new(n_head: usize, n_feat: usize, vb: VarBuilder) -> Result<Self> {
        if n_head == 0 || !n_feat.is_multiple_of(n_head) {
            candle_core::bail!("attention width {n_feat} is not a multiple of {n_head} heads");
        }
        let d_k = n_feat / n_head;
        let bound = (6.0 / (n_head + d_k) as f64).sqrt(); // xavier_uniform_
        let init = Init::Uniform {
            lo: -bound,
            up: bound,
        };
        Ok(Self {
            linear_q: Linear::new(n_feat, n_feat, true, vb.pp("linear_q"))?,
            linear_k: Linear::new(n_feat, n_feat, true, vb.pp("linear_k"))?,
            linear_v: Linear::new(n_feat, n_feat, true, vb.pp("linear_v"))?,
            linear_out: Linear::new(n_feat, n_feat, true, vb.pp("linear_out"))?,
            linear_pos: Linear::new(n_feat, n_feat, false, vb.pp("linear_pos"))?,
            pos_bias_u: vb.get_with_hints((n_head, d_k), "pos_bias_u", init)?,
            pos_bias_v: vb.get_with_hints((n_head, d_k), "pos_bias_v", init)?,
            h: n_head,
            d_k,
        })
    }

    /// `residual + attention(x)` for `x (b, t, d)` attending to itself; `key_bias` is
    /// `(b, 1, 1, t)` (0 or -inf) or `None`; `pos_emb` is `(1, 2t - 1, d)`. On CUDA the output
    /// projection's bias and the residual are added in one kernel.
    pub(crate) fn forward_residual(
        &self,
        x: &Tensor,
        key_bias: Option<&Tensor>,
        pos_emb: &Tensor,
        residual: &Tensor,
    ) -> Result<Tensor> {
        let y = self.attend(x, key_bias, pos_emb)?;
        if cfg!(feature = "cuda") && y.device().is_cuda() {
            return linear_residual(&self.linear_out, &y, residual);
        }
        residual + self.linear_out.forward(&y)?
    }

    /// The heads' outputs `(b, t, h d_k)`, before the output projection.
    fn attend(&self, x: &Tensor, key_bias: Option<&Tensor>, pos_emb: &Tensor) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (h, d_k) = (self.h, self.d_k);
        let scale = 1.0 / (d_k as f64).sqrt();
        let (q, k, v) = (
            linear(&self.linear_q, x)?,
            linear(&self.linear_k, x)?,
            linear(&self.linear_v, x)?,
        );
        let p = self.linear_pos.forward(pos_emb)?; // (1, 2t - 1, h d_k)
        let fused = rel_attention_tensors(
            (&q, &k, &v),
            &p,
            (&self.pos_bias_u, &self.pos_bias_v),
            key_bias,
            h,
            scale as f32,
        )?;
        if let Some(y) = fused {
            return Ok(y);
        }
        let heads = |y: Tensor| y.reshape((b, t, h, d_k));
        // q + pos_bias_u / q + pos_bias_v as (b, h, t, d_k)
        let biased = |bias: &Tensor| -> Result<Tensor> {
            #[cfg(feature = "cuda")]
            if super::super::cuda_ops::applies(&q) && bias.dtype() == q.dtype() {
                let y = super::super::cuda_ops::bias_add_inplace(q.copy()?, &bias.flatten_all()?)?;
                return y.reshape((b, t, h, d_k))?.transpose(1, 2)?.contiguous();
            }
            heads(q.clone())?
                .broadcast_add(bias)?
                .transpose(1, 2)?
                .contiguous()
        };
        let q_u = biased(&self.pos_bias_u)?;
        let q_v = biased(&self.pos_bias_v)?;
        // k and p transposed to (.., d_k, t): the layout the GEMM reads without repacking
        let kt = heads(k)?.permute((0, 2, 3, 1))?.contiguous()?; // (b, h, d_k, t)
        let v = heads(v)?.transpose(1, 2)?.contiguous()?;
        let n_pos = pos_emb.dim(1)?;
        let p = p.reshape((1, n_pos, h, d_k))?.permute((0, 2, 3, 1))?; // (1, h, d_k, 2t-1)
        let pt = p.broadcast_as((b, h, d_k, n_pos))?.contiguous()?;
        let ac = matmul(&q_u, &kt)?; // (b, h, t, t)
        let bd = matmul(&q_v, &pt)?; // (b, h, t, 2t-1)
                                     // rel_shift (out[i][j] = bd[i][t - 1 - i + j], the reference's pad-and-reshape) fused
                                     // with the sum and the 1 / sqrt(d_k) scale
        let attn = rel_attention_probs(ac, &bd, scale, key_bias)?;
        let y = matmul(&attn, &v)?; // (b, h, t, d_k)
        y.transpose(1, 2)?.reshape((b, t, h * d_k))
    }
}
