//! The token encoder. Port of chatterbox/models/s3gen/transformer/upsample_encoder.py
//! `UpsampleConformerEncoder` (upstream 5de7a54) as S3Gen configures it: linear input layer with
//! ESPnet relative positions, pre-lookahead convolution, `num_blocks` conformer layers, 2x
//! nearest upsampling + convolution, a fresh input layer and `num_up_blocks` more layers, and a
//! final LayerNorm. Tensors are time-major `(batch, time, channels)` throughout.

mod attention;
mod embedding;
mod layer;
mod resample;

use super::config::EncoderConfig;
use super::mask::Lengths;
use super::nn::layer_norm;
use crate::{Result, S3GenError};
use candle_core::{Module, Tensor};
use candle_nn::{LayerNorm, VarBuilder};
use embedding::LinearNoSubsampling;
use layer::ConformerEncoderLayer;
use resample::{PreLookaheadLayer, Upsample1D};

/// `UpsampleConformerEncoder`: `(batch, T, input_size)` token embeddings to
/// `(batch, up_stride * T, output_size)` frame features.
#[derive(Debug, Clone)]
pub struct UpsampleConformerEncoder {
    embed: LinearNoSubsampling,
    pre_lookahead_layer: PreLookaheadLayer,
    encoders: Vec<ConformerEncoderLayer>,
    up_layer: Upsample1D,
    up_embed: LinearNoSubsampling,
    up_encoders: Vec<ConformerEncoderLayer>,
    after_norm: LayerNorm,
    cfg: EncoderConfig,
}

impl UpsampleConformerEncoder {
    /// Loads the encoder (keys `embed.*`, `pre_lookahead_layer.*`, `encoders.N.*`, `up_layer.*`,
    /// `up_embed.*`, `up_encoders.N.*`, `after_norm.*`).
    pub fn new(cfg: &EncoderConfig, vb: VarBuilder) -> Result<Self> {
        let d = cfg.output_size;
        let layers = |n: usize, vb: VarBuilder| -> Result<Vec<ConformerEncoderLayer>> {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(ConformerEncoderLayer::new(
                    d,
                    cfg.attention_heads,
                    cfg.linear_units,
                    vb.pp(i),
                )?);
            }
            Ok(v)
        };
        if cfg.up_stride == 0 {
            return Err(S3GenError::InvalidInput {
                what: "encoder config",
                reason: "up_stride must be at least 1".into(),
            });
        }
        Ok(Self {
            embed: LinearNoSubsampling::new(cfg.input_size, d, vb.pp("embed"))?,
            pre_lookahead_layer: PreLookaheadLayer::new(
                d,
                cfg.pre_lookahead_len,
                vb.pp("pre_lookahead_layer"),
            )?,
            encoders: layers(cfg.num_blocks, vb.pp("encoders"))?,
            up_layer: Upsample1D::new(d, d, cfg.up_stride, vb.pp("up_layer"))?,
            up_embed: LinearNoSubsampling::new(cfg.input_size, d, vb.pp("up_embed"))?,
            up_encoders: layers(cfg.num_up_blocks, vb.pp("up_encoders"))?,
            after_norm: layer_norm(d, 1e-5, vb.pp("after_norm"))?,
            cfg: cfg.clone(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// `forward(xs, xs_lens)`: `xs (batch, T, input_size)` with `xs_lens[b]` valid frames
    /// (`1..=T`). Returns the features `(batch, up_stride * T, output_size)` and the upsampled
    /// non-padding mask `(batch, 1, up_stride * T)` (u8), as the reference returns them.
    pub fn forward(&self, xs: &Tensor, xs_lens: &[usize]) -> Result<(Tensor, Tensor)> {
        let (b, t, _) = xs.dims3()?;
        if xs_lens.len() != b || xs_lens.iter().any(|&l| l == 0 || l > t) {
            return Err(S3GenError::InvalidInput {
                what: "encoder lengths",
                reason: format!("need {b} lengths in 1..={t}, got {xs_lens:?}"),
            });
        }
        let lens = Lengths::new(xs_lens.to_vec(), t);
        let (h, up_lens) = self.forward_lengths(xs, &lens, false)?;
        Ok((h, up_lens.non_pad_mask(xs.device())?))
    }

    /// [`forward`](Self::forward) with host lengths in and out. With `solo_padding`, padded
    /// frames are zeroed before the pre-lookahead convolution, so that each row's last
    /// `pre_lookahead_len` frames look ahead into zeros as the row alone would (the reference
    /// lets them see the embedded padding); the frames after are unaffected by padding either
    /// way (causal convolutions, masked attention keys).
    pub(crate) fn forward_lengths(
        &self,
        xs: &Tensor,
        lens: &Lengths,
        solo_padding: bool,
    ) -> Result<(Tensor, Lengths)> {
        let (dtype, dev) = (xs.dtype(), xs.device());
        let (x, pos) = self.embed.forward(xs)?;
        let bias = lens.key_bias(f32::NEG_INFINITY, dtype, dev)?;
        let x = if solo_padding && lens.has_padding() {
            let (b, t, _) = x.dims3()?;
            let keep = lens
                .non_pad_mask(dev)?
                .to_dtype(dtype)?
                .reshape((b, t, 1))?;
            x.broadcast_mul(&keep)?
        } else {
            x
        };
        let mut x = self.pre_lookahead_layer.forward(&x)?;
        for layer in &self.encoders {
            x = layer.forward(&x, bias.as_ref(), &pos)?;
        }
        let x = self.up_layer.forward(&x)?;
        let up_lens = lens.scaled(self.up_layer.stride());
        let (x, pos) = self.up_embed.forward(&x)?;
        let bias = up_lens.key_bias(f32::NEG_INFINITY, dtype, dev)?;
        let mut x = x;
        for layer in &self.up_encoders {
            x = layer.forward(&x, bias.as_ref(), &pos)?;
        }
        Ok((self.after_norm.forward(&x)?, up_lens))
    }
}
