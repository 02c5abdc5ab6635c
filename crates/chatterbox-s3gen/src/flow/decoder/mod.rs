//! The CFM estimator. Port of chatterbox/models/s3gen/decoder.py `ConditionalDecoder`
//! (upstream 5de7a54) as S3Gen configures it (`causal=True`, one U-Net level): the packed input
//! `[x, mu, spks, cond]` goes through a down stage, `num_mid_blocks` middle stages and an up
//! stage (each a causal ResNet block with the time embedding and `n_blocks` transformer
//! blocks), a final causal block and a pointwise projection to the mel bins.
//!
//! Internally tensors are time-major `(batch, time, channels)`; the public
//! [`ConditionalDecoder::forward`] takes and returns the reference's `(batch, channels, time)`.
//! The estimator runs in the dtype of its weights; the inputs are cast to it and the output is
//! returned in f32.

mod blocks;
mod time;
mod transformer;

use super::config::DecoderConfig;
use super::mask::masks_from_tensor;
use super::nn::Conv1d;
use super::ops::KeyBias;
use crate::{Result, S3GenError};
use blocks::{apply_mask, CausalBlock1D, CausalResnetBlock1D};
use candle_core::{DType, Module, Tensor, D};
use candle_nn::VarBuilder;
use time::TimeEmbedding;
use transformer::BasicTransformerBlock;

/// One stage: a ResNet block, its transformer blocks and (down/up stages) a causal conv.
#[derive(Debug, Clone)]
struct Stage {
    resnet: CausalResnetBlock1D,
    transformer_blocks: Vec<BasicTransformerBlock>,
    /// `downsample` / `upsample`: with one level both are `CausalConv1d(c, c, 3)`.
    resample: Option<Conv1d>,
}

impl Stage {
    fn new(
        cfg: &DecoderConfig,
        dim_in: usize,
        dim: usize,
        with_resample: bool,
        vb: VarBuilder,
    ) -> Result<Self> {
        let resnet = CausalResnetBlock1D::new(dim_in, dim, cfg.time_embed_dim(), vb.pp(0))?;
        let mut transformer_blocks = Vec::with_capacity(cfg.n_blocks);
        for i in 0..cfg.n_blocks {
            transformer_blocks.push(BasicTransformerBlock::new(
                dim,
                cfg.num_heads,
                cfg.attention_head_dim,
                vb.pp(1).pp(i),
            )?);
        }
        let resample = if with_resample {
            Some(Conv1d::causal(dim, dim, 3, vb.pp(2))?)
        } else {
            None
        };
        Ok(Self {
            resnet,
            transformer_blocks,
            resample,
        })
    }

    /// ResNet block and transformer blocks (the resample conv is applied by the caller).
    fn forward(
        &self,
        x: &Tensor,
        ctx: &EstimatorContext,
        time_proj: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let mut x = self.resnet.forward(x, ctx.mask.as_ref(), time_proj)?;
        for block in &self.transformer_blocks {
            x = block.forward(&x, ctx.key_bias.as_ref())?;
        }
        Ok(x)
    }
}

/// What stays the same over the steps of one solve: the conditioning channels and the masks.
#[derive(Debug, Clone)]
pub(crate) struct EstimatorContext {
    /// `[mu, spks repeated over time, cond]`, `(n, T, 3 * 80)` in the estimator's dtype.
    cond: Tensor,
    /// `(n, T, 1)` multiplier, `None` without padding.
    mask: Option<Tensor>,
    /// `(n, 1, 1, T)` additive attention bias, `None` without padding.
    key_bias: Option<KeyBias>,
}

impl EstimatorContext {
    /// Whether it has the multiplier mask and the attention bias (a captured call's shape).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn masks(&self) -> (bool, bool) {
        (self.mask.is_some(), self.key_bias.is_some())
    }

    /// A copy in buffers of its own (a captured graph's input, see `estimator_graphs.rs`).
    #[cfg(feature = "cuda")]
    pub(crate) fn copy(&self) -> candle_core::Result<Self> {
        use super::estimator_calls::owned;
        Ok(Self {
            cond: owned(&self.cond)?,
            mask: self.mask.as_ref().map(owned).transpose()?,
            key_bias: self.key_bias.as_ref().map(KeyBias::copy).transpose()?,
        })
    }

    /// Writes this context's values into `dst`'s buffers (same shapes and masks).
    #[cfg(feature = "cuda")]
    pub(crate) fn write_into(&self, dst: &Self) -> candle_core::Result<()> {
        dst.cond.slice_set(&self.cond.contiguous()?, 0, 0)?;
        match (&self.mask, &dst.mask) {
            (Some(m), Some(d)) => d.slice_set(&m.contiguous()?, 0, 0)?,
            (None, None) => {}
            _ => candle_core::bail!("estimator contexts with and without a mask"),
        }
        match (&self.key_bias, &dst.key_bias) {
            (Some(b), Some(d)) => b.write_into(d),
            (None, None) => Ok(()),
            _ => candle_core::bail!("estimator contexts with and without a key bias"),
        }
    }
}

/// For every ResNet block, `mlp(time_embedding)` of a set of time points: `(n, channels)`.
#[derive(Debug, Clone)]
pub(crate) struct TimeConditioning {
    per_resnet: Vec<Tensor>,
}

impl TimeConditioning {
    /// The rows for one call: row `i` of every block broadcast over the batch (`(1, 1, c)`), or,
    /// with `i = None`, all `n` rows as a batch (`(n, 1, c)`).
    pub(crate) fn select(&self, i: Option<usize>) -> candle_core::Result<Vec<Tensor>> {
        self.per_resnet
            .iter()
            .map(|p| match i {
                Some(i) => p.narrow(0, i, 1)?.unsqueeze(1),
                None => p.unsqueeze(1),
            })
            .collect()
    }
}

/// `ConditionalDecoder` (`causal=True`, one level, `act_fn="gelu"`), optionally meanflow.
#[derive(Debug, Clone)]
pub struct ConditionalDecoder {
    time: TimeEmbedding,
    down: Stage,
    mid: Vec<Stage>,
    up: Stage,
    final_block: CausalBlock1D,
    final_proj: Conv1d,
    cfg: DecoderConfig,
    dtype: DType,
}

impl ConditionalDecoder {
    /// Loads the estimator (keys `time_mlp.*`, `down_blocks.0.*`, `mid_blocks.N.*`,
    /// `up_blocks.0.*`, `final_block.*`, `final_proj.*`, and `time_embed_mixer.weight` for
    /// meanflow). It runs in `vb`'s dtype.
    pub fn new(cfg: &DecoderConfig, vb: VarBuilder) -> Result<Self> {
        let unsupported = |reason: String| S3GenError::InvalidInput {
            what: "estimator config",
            reason,
        };
        if !cfg.causal {
            return Err(unsupported(
                "only the causal estimator (S3Gen's) is ported".into(),
            ));
        }
        let &[ch] = cfg.channels.as_slice() else {
            return Err(unsupported(format!(
                "only one U-Net level (S3Gen's channels=[256]) is ported, got {:?}",
                cfg.channels
            )));
        };
        if cfg.act_fn != "gelu" {
            return Err(unsupported(format!(
                "act_fn {:?} (only \"gelu\")",
                cfg.act_fn
            )));
        }
        if cfg.in_channels != 4 * cfg.out_channels {
            return Err(unsupported(format!(
                "in_channels {} must be 4 x out_channels {} ([x, mu, spks, cond])",
                cfg.in_channels, cfg.out_channels
            )));
        }
        let mut mid = Vec::with_capacity(cfg.num_mid_blocks);
        for i in 0..cfg.num_mid_blocks {
            mid.push(Stage::new(cfg, ch, ch, false, vb.pp("mid_blocks").pp(i))?);
        }
        Ok(Self {
            time: TimeEmbedding::new(
                cfg.in_channels,
                cfg.time_embed_dim(),
                cfg.meanflow,
                vb.clone(),
            )?,
            down: Stage::new(cfg, cfg.in_channels, ch, true, vb.pp("down_blocks").pp(0))?,
            mid,
            up: Stage::new(cfg, 2 * ch, ch, true, vb.pp("up_blocks").pp(0))?,
            final_block: CausalBlock1D::new(ch, ch, vb.pp("final_block"))?,
            final_proj: Conv1d::pointwise(ch, cfg.out_channels, vb.pp("final_proj"))?,
            cfg: cfg.clone(),
            dtype: vb.dtype(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// The dtype the estimator computes in (its weights').
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Whether its calls on `dev` may be captured in CUDA graphs: where its attention runs the
    /// fused kernel (bf16 or f16, heads of 64, sm_80+; every full-size checkpoint served so).
    /// Elsewhere (f32, or the tiny test models' 16-channel heads, which take candle's
    /// attention) captures have failed, or replayed a graph that read memory it no longer
    /// owned (an H200, candle 0.11.1), so those calls run eagerly.
    pub(crate) fn capturable(&self, dev: &candle_core::Device) -> bool {
        #[cfg(feature = "cuda")]
        return super::cuda_attention::runs_on(dev, self.dtype, self.cfg.attention_head_dim);
        #[cfg(not(feature = "cuda"))]
        {
            let _ = dev;
            false
        }
    }

    /// `forward(x, mask, mu, t, spks, cond, r)` as the reference: `x`, `mu`, `cond`
    /// `(batch, 80, T)`, `mask (batch, 1, T)` (1 valid, 0 padding), `t (batch,)`,
    /// `spks (batch, 80)`, and for meanflow the end time `r (batch,)`. Returns the velocity
    /// `(batch, 80, T)` in f32.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        x: &Tensor,
        mask: &Tensor,
        mu: &Tensor,
        t: &Tensor,
        spks: &Tensor,
        cond: &Tensor,
        r: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, _, _) = x.dims3()?;
        let (mul, bias) = masks_from_tensor(mask, self.dtype)?;
        let ctx = self.context(mu, spks, cond, Some(mul), Some(KeyBias::new(bias)?))?;
        let time = self.time_conditioning(t, r)?;
        if time.per_resnet.first().map(|p| p.dim(0)).transpose()? != Some(b) {
            return Err(S3GenError::InvalidInput {
                what: "estimator time",
                reason: format!("t must have {b} entries"),
            });
        }
        let x = x.transpose(1, 2)?.to_dtype(self.dtype)?;
        let y = self.forward_btc(&x, &ctx, &time.select(None)?)?;
        Ok(y.to_dtype(DType::F32)?.transpose(1, 2)?.contiguous()?)
    }

    /// The per-solve constant part of the input: `mu`, `cond (n, 80, T)`, `spks (n, 80)` packed
    /// time-major in the estimator's dtype, with the masks (`None`: no padding).
    pub(crate) fn context(
        &self,
        mu: &Tensor,
        spks: &Tensor,
        cond: &Tensor,
        mask: Option<Tensor>,
        key_bias: Option<KeyBias>,
    ) -> Result<EstimatorContext> {
        let (n, c, t) = mu.dims3()?;
        if c != self.cfg.out_channels || cond.dims() != mu.dims() || spks.dims() != [n, c] {
            return Err(S3GenError::InvalidInput {
                what: "estimator conditioning",
                reason: format!(
                    "mu {:?}, cond {:?} must be (n, {}, T) and spks {:?} (n, {})",
                    mu.dims(),
                    cond.dims(),
                    self.cfg.out_channels,
                    spks.dims(),
                    self.cfg.out_channels
                ),
            });
        }
        let dt = self.dtype;
        let spks = spks.to_dtype(dt)?.unsqueeze(1)?.broadcast_as((n, t, c))?;
        let packed = Tensor::cat(
            &[
                mu.to_dtype(dt)?.transpose(1, 2)?,
                spks,
                cond.to_dtype(dt)?.transpose(1, 2)?,
            ],
            D::Minus1,
        )?;
        Ok(EstimatorContext {
            cond: packed,
            mask,
            key_bias,
        })
    }

    /// The time conditioning of `t (n,)` (and `r (n,)` for meanflow), for every ResNet block.
    pub(crate) fn time_conditioning(
        &self,
        t: &Tensor,
        r: Option<&Tensor>,
    ) -> Result<TimeConditioning> {
        if self.time.is_meanflow() != r.is_some() {
            return Err(S3GenError::InvalidInput {
                what: "estimator time",
                reason: if r.is_some() {
                    "r is only used by a meanflow estimator".into()
                } else {
                    "a meanflow estimator needs the end time r".into()
                },
            });
        }
        let temb = self.time.forward(t, r, self.dtype)?;
        let per_resnet = std::iter::once(&self.down)
            .chain(self.mid.iter())
            .chain(std::iter::once(&self.up))
            .map(|s| s.resnet.time_proj(&temb))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(TimeConditioning { per_resnet })
    }

    /// One call on time-major `x (n, T, 80)` in the estimator's dtype; `tp` is the time
    /// conditioning's [`select`](TimeConditioning::select)ion for this call (one time point
    /// shared by the batch, or one per row). Returns `(n, T, 80)` in the estimator's dtype.
    pub(crate) fn forward_btc(
        &self,
        x: &Tensor,
        ctx: &EstimatorContext,
        tp: &[Tensor],
    ) -> Result<Tensor> {
        if tp.len() != self.mid.len() + 2 {
            return Err(S3GenError::InvalidInput {
                what: "estimator time",
                reason: format!(
                    "{} time embeddings for {} ResNet blocks",
                    tp.len(),
                    self.mid.len() + 2
                ),
            });
        }
        let mask = ctx.mask.as_ref();
        let h = Tensor::cat(&[x, &ctx.cond], D::Minus1)?;
        let h = self.down.forward(&h, ctx, &tp[0])?;
        let skip = h.clone();
        let h = match &self.down.resample {
            Some(conv) => conv.forward(&apply_mask(&h, mask)?)?,
            None => h,
        };
        let mut h = h;
        for (i, stage) in self.mid.iter().enumerate() {
            h = stage.forward(&h, ctx, &tp[1 + i])?;
        }
        let t_skip = skip.dim(1)?;
        let h = Tensor::cat(&[&h.narrow(1, 0, t_skip)?, &skip], D::Minus1)?;
        let h = self.up.forward(&h, ctx, &tp[tp.len() - 1])?;
        let h = match &self.up.resample {
            Some(conv) => conv.forward(&apply_mask(&h, mask)?)?,
            None => h,
        };
        let h = self.final_block.forward(&h, mask, None)?;
        let out = self.final_proj.forward(&apply_mask(&h, mask)?)?;
        Ok(apply_mask(&out, mask)?)
    }
}
