//! Port of `ResidualAttentionBlock` in s3tokenizer/model_v2.py: pre-norm FSMN attention and a
//! GELU MLP (x4), each with a residual connection.
use super::attention::{AttentionMask, FSMNMultiHeadAttention};
use super::gelu::bias_gelu_owned;
use super::rotary::RotaryEmbedding;
use super::weights;
use crate::linear::Linear;
use crate::Result;
use candle_core::{Module, Tensor};
use candle_nn::{LayerNorm, VarBuilder};

/// `LayerNorm(n_state, eps=1e-5)` (both norms of the block).
const LN_EPS: f64 = 1e-5;

/// One transformer block of the encoder.
///
/// <https://github.com/xingchensong/S3Tokenizer/blob/main/s3tokenizer/model_v2.py>
/// `ResidualAttentionBlock`
#[derive(Debug, Clone)]
pub struct ResidualAttentionBlock {
    attn: FSMNMultiHeadAttention,
    attn_ln: LayerNorm,
    /// `mlp.0` (`n_state -> 4 n_state`), its bias applied with the GELU fused in.
    mlp_0: Linear,
    mlp_2: Linear,
    mlp_ln: LayerNorm,
}

impl ResidualAttentionBlock {
    /// Loads `attn`, `attn_ln`, `mlp.0`, `mlp.2` and `mlp_ln` under `vb`.
    pub fn new(n_state: usize, n_head: usize, vb: VarBuilder) -> Result<Self> {
        let n_mlp = n_state * 4;
        let mlp_0 = weights::linear(n_state, n_mlp, true, vb.pp("mlp").pp("0"))?;
        Ok(Self {
            attn: FSMNMultiHeadAttention::new(n_state, n_head, vb.pp("attn"))?,
            attn_ln: weights::layer_norm(n_state, LN_EPS, vb.pp("attn_ln"))?,
            mlp_0,
            mlp_2: weights::linear(n_mlp, n_state, true, vb.pp("mlp").pp("2"))?,
            mlp_ln: weights::layer_norm(n_state, LN_EPS, vb.pp("mlp_ln"))?,
        })
    }

    /// `x + attn(attn_ln(x))`, then `x + mlp(mlp_ln(x))`, for `x` of shape
    /// `(batch, time, n_state)`.
    pub fn forward(
        &self,
        x: &Tensor,
        mask: Option<&AttentionMask>,
        rotary: &RotaryEmbedding,
    ) -> Result<Tensor> {
        let x = (x + self.attn.forward(&self.attn_ln.forward(x)?, mask, rotary)?)?;
        let (b, t, d) = x.dims3()?;
        let h = self
            .mlp_0
            .forward_no_bias(&self.mlp_ln.forward(&x)?.reshape((b * t, d))?)?;
        let b0 = self
            .mlp_0
            .bias()
            .ok_or_else(|| candle_core::Error::Msg("tokenizer mlp.0 has no bias".to_string()))?;
        let h = bias_gelu_owned(h, b0)?.reshape((b, t, ()))?;
        Ok((&x + self.mlp_2.forward(&h)?)?)
    }
}
