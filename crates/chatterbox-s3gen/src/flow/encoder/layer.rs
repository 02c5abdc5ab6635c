//! One conformer layer as S3Gen configures it (pre-norm, no macaron feed-forward, no convolution
//! module). Port of chatterbox/models/s3gen/transformer/encoder_layer.py `ConformerEncoderLayer`
//! and positionwise_feed_forward.py `PositionwiseFeedForward` (upstream 5de7a54).

use super::super::nn::{layer_norm, linear, linear_residual, Linear};
use super::attention::RelPositionMultiHeadedAttention;
use candle_core::{Module, Result, Tensor};
use candle_nn::{LayerNorm, VarBuilder};

/// `PositionwiseFeedForward` with SiLU (`activation_type = "swish"`).
#[derive(Debug, Clone)]
pub(crate) struct PositionwiseFeedForward {
    w_1: Linear,
    w_2: Linear,
}

impl PositionwiseFeedForward {
    pub(crate) fn new(idim: usize, hidden_units: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            w_1: Linear::new(idim, hidden_units, true, vb.pp("w_1"))?,
            w_2: Linear::new(hidden_units, idim, true, vb.pp("w_2"))?,
        })
    }
}

impl PositionwiseFeedForward {
    /// `residual + w_2(silu(w_1(xs)))`; on CUDA the biases are added by one kernel each (the
    /// second with the residual).
    fn forward_residual(&self, xs: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let h = linear(&self.w_1, xs)?.silu()?;
        if cfg!(feature = "cuda") && h.device().is_cuda() {
            return linear_residual(&self.w_2, &h, residual);
        }
        residual + self.w_2.forward(&h)?
    }
}

/// `ConformerEncoderLayer`: `x += self_attn(norm_mha(x))`, `x += feed_forward(norm_ff(x))`, both
/// norms with eps 1e-12.
#[derive(Debug, Clone)]
pub(crate) struct ConformerEncoderLayer {
    self_attn: RelPositionMultiHeadedAttention,
    feed_forward: PositionwiseFeedForward,
    norm_mha: LayerNorm,
    norm_ff: LayerNorm,
}

impl ConformerEncoderLayer {
    pub(crate) fn new(
        size: usize,
        heads: usize,
        linear_units: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        Ok(Self {
            self_attn: RelPositionMultiHeadedAttention::new(heads, size, vb.pp("self_attn"))?,
            feed_forward: PositionwiseFeedForward::new(size, linear_units, vb.pp("feed_forward"))?,
            norm_mha: layer_norm(size, 1e-12, vb.pp("norm_mha"))?,
            norm_ff: layer_norm(size, 1e-12, vb.pp("norm_ff"))?,
        })
    }

    pub(crate) fn forward(
        &self,
        x: &Tensor,
        key_bias: Option<&Tensor>,
        pos_emb: &Tensor,
    ) -> Result<Tensor> {
        let x =
            self.self_attn
                .forward_residual(&self.norm_mha.forward(x)?, key_bias, pos_emb, x)?;
        self.feed_forward
            .forward_residual(&self.norm_ff.forward(&x)?, &x)
    }
}
