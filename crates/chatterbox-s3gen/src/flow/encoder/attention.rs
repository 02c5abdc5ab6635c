//! Multi-head self-attention with relative positions. Port of
//! chatterbox/models/s3gen/transformer/attention.py `RelPositionMultiHeadedAttention`
//! (upstream 5de7a54): Transformer-XL scores `(q + u) k^T + rel_shift((q + v) p^T)`, scaled by
//! `1 / sqrt(d_k)`, padded keys filled with `-inf` before the softmax. On the CPU in f32 the
//! score path is one kernel (`rel_attention_cpu`).

use super::super::nn::{matmul, Linear};
use super::super::ops::{rel_shift_scores, softmax_with_bias_inplace};
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

    /// `x (b, t, d)` attends to itself; `key_bias` is `(b, 1, 1, t)` (0 or -inf) or `None`;
    /// `pos_emb` is `(1, 2t - 1, d)`.
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        key_bias: Option<&Tensor>,
        pos_emb: &Tensor,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (h, d_k) = (self.h, self.d_k);
        let scale = 1.0 / (d_k as f64).sqrt();
        let (q, k, v) = (
            self.linear_q.forward(x)?,
            self.linear_k.forward(x)?,
            self.linear_v.forward(x)?,
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
            return self.linear_out.forward(&y);
        }
        let heads = |y: Tensor| y.reshape((b, t, h, d_k));
        let q = heads(q)?; // (b, t, h, d_k)
                           // k and p transposed to (.., d_k, t): the layout the GEMM reads without repacking
        let kt = heads(k)?.permute((0, 2, 3, 1))?.contiguous()?; // (b, h, d_k, t)
        let v = heads(v)?.transpose(1, 2)?.contiguous()?;
        let n_pos = pos_emb.dim(1)?;
        let p = p.reshape((1, n_pos, h, d_k))?.permute((0, 2, 3, 1))?; // (1, h, d_k, 2t-1)
        let pt = p.broadcast_as((b, h, d_k, n_pos))?.contiguous()?;
        let q_u = q
            .broadcast_add(&self.pos_bias_u)?
            .transpose(1, 2)?
            .contiguous()?;
        let q_v = q
            .broadcast_add(&self.pos_bias_v)?
            .transpose(1, 2)?
            .contiguous()?;
        let ac = matmul(&q_u, &kt)?; // (b, h, t, t)
        let bd = matmul(&q_v, &pt)?; // (b, h, t, 2t-1)
                                     // rel_shift (out[i][j] = bd[i][t - 1 - i + j], the reference's pad-and-reshape) fused
                                     // with the sum and the 1 / sqrt(d_k) scale
        let scores = rel_shift_scores(ac, &bd, scale)?;
        let attn = softmax_with_bias_inplace(scores, key_bias)?;
        let y = matmul(&attn, &v)?; // (b, h, t, d_k)
        let y = y.transpose(1, 2)?.reshape((b, t, h * d_k))?;
        self.linear_out.forward(&y)
    }
}
