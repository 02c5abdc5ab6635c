//! Port of `FSMNMultiHeadAttention` in s3tokenizer/model_v2.py: multi-head self-attention with
//! rotary positions, q and k each scaled by `head_dim^-0.25`, plus the FSMN memory of the values.
use super::fsmn::DepthwiseMemory;
use super::rotary::RotaryEmbedding;
use super::weights;
use crate::flow::ops::{self_attention_split, softmax_with_bias_inplace};
use crate::linear::Linear;
use crate::Result;
use candle_core::{DType, Module, Tensor};
use candle_nn::VarBuilder;

/// Kernel of the FSMN memory block (`kernel_size=31`).
pub const FSMN_KERNEL: usize = 31;

/// Masks of one padded batch, built once per forward by the encoder.
#[derive(Debug, Clone)]
pub struct AttentionMask {
    /// `(batch, 1, 1, time)`: `0` on valid keys, `-1e10` on padding (`mask_to_bias`).
    pub bias: Tensor,
    /// `(batch, time, 1)`: `1` on valid frames, `0` on padding (`mask_pad`).
    pub pad: Tensor,
}

/// Self-attention with FSMN memory.
///
/// <https://github.com/xingchensong/S3Tokenizer/blob/main/s3tokenizer/model_v2.py>
/// `FSMNMultiHeadAttention`
#[derive(Debug, Clone)]
pub struct FSMNMultiHeadAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    out: Linear,
    fsmn_block: DepthwiseMemory,
    n_head: usize,
}

impl FSMNMultiHeadAttention {
    /// Loads `query`, `key` (no bias), `value`, `out` and `fsmn_block` under `vb`.
    pub fn new(n_state: usize, n_head: usize, vb: VarBuilder) -> Result<Self> {
        let fsmn = weights::tensor(&vb.pp("fsmn_block"), "weight", &[n_state, 1, FSMN_KERNEL])?;
        Ok(Self {
            query: weights::linear(n_state, n_state, true, vb.pp("query"))?,
            key: weights::linear(n_state, n_state, false, vb.pp("key"))?,
            value: weights::linear(n_state, n_state, true, vb.pp("value"))?,
            out: weights::linear(n_state, n_state, true, vb.pp("out"))?,
            fsmn_block: DepthwiseMemory::new(&fsmn)?,
            n_head,
        })
    }

    /// `forward_fsmn`: the values (`(batch, time, n_state)`) masked, plus their depthwise
    /// convolution, masked again.
    fn forward_fsmn(&self, v: &Tensor, mask: Option<&AttentionMask>) -> Result<Tensor> {
        match mask {
            None => self.fsmn_block.forward(v),
            Some(m) => {
                let inputs = v.broadcast_mul(&m.pad)?;
                Ok(self.fsmn_block.forward(&inputs)?.broadcast_mul(&m.pad)?)
            }
        }
    }

    /// Attention over `x` (`(batch, time, n_state)`, already layer-normed). `mask` is `None`
    /// when no frame of the batch is padding (every mask would be the identity).
    pub fn forward(
        &self,
        x: &Tensor,
        mask: Option<&AttentionMask>,
        rotary: &RotaryEmbedding,
    ) -> Result<Tensor> {
        let (b, t, d) = x.dims3()?;
        let (h, hd) = (self.n_head, d / self.n_head);
        let scale = (hd as f64).powf(-0.25);
        let q = self.query.forward(x)?.reshape((b, t, h, hd))?;
        let k = self.key.forward(x)?.reshape((b, t, h, hd))?;
        let v = self.value.forward(x)?;
        let q = rotary.apply(&q)?;
        let k = rotary.apply(&k)?;
        let fsm_memory = self.forward_fsmn(&v, mask)?;

        // On the CPU (f32): the flow's attention kernel, one task per (batch, head) for both
        // products and the softmax, with the two `hd^-1/4` scales applied as one `hd^-1/2` on q
        // (1/8 for the real 64-wide heads: exact).
        if x.device().is_cpu() && x.dtype() == DType::F32 {
            let qs = (q.reshape((b, t, d))? * (hd as f64).powf(-0.5))?;
            let host_bias = match mask {
                Some(m) => Some(m.bias.flatten_all()?.to_vec1::<f32>()?),
                None => None,
            };
            let fused = self_attention_split(
                (&qs, &k.reshape((b, t, d))?, &v.contiguous()?),
                h,
                hd,
                host_bias.as_deref(),
            )?;
            if let Some(wv) = fused {
                return Ok((self.out.forward(&wv)? + fsm_memory)?);
            }
        }

        let q = (q.transpose(1, 2)? * scale)?; // (b, h, t, hd)
        let k = (k.transpose(1, 2)? * scale)?;
        let v = v.reshape((b, t, h, hd))?.transpose(1, 2)?.contiguous()?;
        let qk = q.matmul(&k.t()?)?; // (b, h, t, t)
                                     // in place and vectorised on the CPU (f32), candle's ops elsewhere
        let w = softmax_with_bias_inplace(qk, mask.map(|m| &m.bias))?;
        let wv = w.matmul(&v)?.transpose(1, 2)?.reshape((b, t, d))?;
        Ok((self.out.forward(&wv)? + fsm_memory)?)
    }
}
