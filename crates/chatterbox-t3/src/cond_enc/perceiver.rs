//! Port of chatterbox/models/t3/modules/perceiver.py (upstream 5de7a54): the prompt resampler.
//!
//! Only the code path the reference runs: `AttentionBlock2` with flash (scaled dot-product)
//! attention and no relative position bias (`Perceiver()` builds it without one).
use crate::backbone::{weight, Linear};
use crate::config::PerceiverConfig;
use crate::Result;
use candle_core::{Tensor, D};
use candle_nn::{Module, VarBuilder};

/// `AttentionBlock2`: one LayerNorm shared by the query and key/value inputs, separate q/k/v
/// projections, multi-head attention, `proj_out`, residual on the query input.
#[derive(Debug, Clone)]
struct AttentionBlock2 {
    norm_weight: Tensor,
    norm_bias: Tensor,
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    proj_out: Linear,
    heads: usize,
}

impl AttentionBlock2 {
    fn new(channels: usize, heads: usize, vb: VarBuilder) -> Result<Self> {
        let norm = vb.pp("norm");
        Ok(Self {
            norm_weight: weight(&norm, &[channels], "weight")?,
            norm_bias: weight(&norm, &[channels], "bias")?,
            to_q: Linear::load(vb.pp("to_q"), channels, channels, true)?,
            to_k: Linear::load(vb.pp("to_k"), channels, channels, true)?,
            to_v: Linear::load(vb.pp("to_v"), channels, channels, true)?,
            proj_out: Linear::load(vb.pp("proj_out"), channels, channels, true)?,
            heads,
        })
    }

    fn norm(&self, x: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::layer_norm(
            &x.contiguous()?,
            &self.norm_weight,
            &self.norm_bias,
            1e-5,
        )?)
    }

    fn split(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, c) = x.dims3()?;
        Ok(x.reshape((b, t, self.heads, c / self.heads))?
            .transpose(1, 2)?
            .contiguous()?)
    }

    fn forward(&self, x1: &Tensor, x2: &Tensor) -> Result<Tensor> {
        let x1n = self.norm(x1)?;
        let x2n = self.norm(x2)?;
        let q = self.split(&self.to_q.forward(&x1n)?)?;
        let k = self.split(&self.to_k.forward(&x2n)?)?;
        let v = self.split(&self.to_v.forward(&x2n)?)?;
        let head_dim = q.dim(D::Minus1)?;
        let att = (q.matmul(&k.t()?)? * (1.0 / (head_dim as f64).sqrt()))?;
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let h = att.matmul(&v)?;
        let (b, heads, t, d) = h.dims4()?;
        let h = h.transpose(1, 2)?.reshape((b, t, heads * d))?;
        let h = self.proj_out.forward(&h)?;
        Ok((x1 + h)?)
    }
}

/// `Perceiver`: learned queries cross-attend over the prompt, then attend to themselves with
/// the same block.
#[derive(Debug, Clone)]
pub struct Perceiver {
    pre_attention_query: Tensor,
    attn: AttentionBlock2,
}

impl Perceiver {
    /// Loads `pre_attention_query` and `attn.*` under `vb`.
    pub fn new(cfg: &PerceiverConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            pre_attention_query: weight(
                &vb,
                &[
                    1,
                    cfg.pre_attention_query_token,
                    cfg.pre_attention_query_size,
                ],
                "pre_attention_query",
            )?,
            attn: AttentionBlock2::new(cfg.embedding_dim, cfg.num_attn_heads, vb.pp("attn"))?,
        })
    }

    /// `[B, T, C]` prompt embeddings -> `[B, queries, C]`.
    pub fn forward(&self, h: &Tensor) -> Result<Tensor> {
        let b = h.dim(0)?;
        let (_, n, c) = self.pre_attention_query.dims3()?;
        let query = self.pre_attention_query.broadcast_as((b, n, c))?;
        let pre_att = self.attn.forward(&query, h)?;
        self.attn.forward(&pre_att, &pre_att)
    }
}
