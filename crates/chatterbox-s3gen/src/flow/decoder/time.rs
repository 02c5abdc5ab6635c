//! The estimator's time conditioning. Port of chatterbox/models/s3gen/matcha/decoder.py
//! `SinusoidalPosEmb` and `TimestepEmbedding`, and utils/intmeanflow.py's time mixer
//! (upstream 5de7a54).

use super::super::nn::Linear;
use candle_core::{DType, Module, Result, Tensor, D};
use candle_nn::VarBuilder;

/// `SinusoidalPosEmb(dim)(t, scale=1000)`: `t (n,)` f32 -> `(n, dim)` f32,
/// `[sin(1000 t e_i), cos(1000 t e_i)]` with `e_i = exp(-i ln(1e4) / (dim/2 - 1))`, computed in
/// f32 in the reference's order.
pub(crate) fn sinusoidal_pos_emb(t: &Tensor, dim: usize) -> Result<Tensor> {
    let half = dim / 2;
    let step = (10000f64.ln() / (half as f64 - 1.0)) as f32;
    let freqs: Vec<f32> = (0..half).map(|i| (i as f32 * -step).exp()).collect();
    let freqs = Tensor::from_vec(freqs, (1, half), t.device())?;
    let t = t.to_dtype(DType::F32)?;
    let emb = (t.affine(1000.0, 0.0)?.unsqueeze(1)?).broadcast_mul(&freqs)?;
    Tensor::cat(&[emb.sin()?, emb.cos()?], D::Minus1)
}

/// `TimestepEmbedding(in_channels, time_embed_dim, act_fn="silu")`: Linear, SiLU, Linear.
#[derive(Debug, Clone)]
pub(crate) struct TimestepEmbedding {
    linear_1: Linear,
    linear_2: Linear,
}

impl TimestepEmbedding {
    pub(crate) fn new(in_channels: usize, time_embed_dim: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            linear_1: Linear::new(in_channels, time_embed_dim, true, vb.pp("linear_1"))?,
            linear_2: Linear::new(time_embed_dim, time_embed_dim, true, vb.pp("linear_2"))?,
        })
    }
}

impl Module for TimestepEmbedding {
    fn forward(&self, sample: &Tensor) -> Result<Tensor> {
        self.linear_2
            .forward(&self.linear_1.forward(sample)?.silu()?)
    }
}

/// The time path of `ConditionalDecoder.forward`: `time_mlp(time_embeddings(t))`, and for
/// meanflow `time_embed_mixer(cat([that of t, that of r]))`.
#[derive(Debug, Clone)]
pub(crate) struct TimeEmbedding {
    in_channels: usize,
    time_mlp: TimestepEmbedding,
    /// meanflow only: `Linear(2 * dim, dim, bias=False)`.
    time_embed_mixer: Option<Linear>,
}

impl TimeEmbedding {
    pub(crate) fn new(
        in_channels: usize,
        time_embed_dim: usize,
        meanflow: bool,
        vb: VarBuilder,
    ) -> Result<Self> {
        let time_embed_mixer = if meanflow {
            Some(Linear::new(
                2 * time_embed_dim,
                time_embed_dim,
                false,
                vb.pp("time_embed_mixer"),
            )?)
        } else {
            None
        };
        Ok(Self {
            in_channels,
            time_mlp: TimestepEmbedding::new(in_channels, time_embed_dim, vb.pp("time_mlp"))?,
            time_embed_mixer,
        })
    }

    pub(crate) fn is_meanflow(&self) -> bool {
        self.time_embed_mixer.is_some()
    }

    /// `t (n,)` (and `r (n,)` for meanflow) -> `(n, time_embed_dim)` in `dtype` (the weights').
    pub(crate) fn forward(&self, t: &Tensor, r: Option<&Tensor>, dtype: DType) -> Result<Tensor> {
        let embed = |x: &Tensor| -> Result<Tensor> {
            let e = sinusoidal_pos_emb(x, self.in_channels)?.to_dtype(dtype)?;
            self.time_mlp.forward(&e)
        };
        let te = embed(t)?;
        match (&self.time_embed_mixer, r) {
            (Some(mixer), Some(r)) => mixer.forward(&Tensor::cat(&[te, embed(r)?], D::Minus1)?),
            (Some(_), None) => candle_core::bail!("a meanflow estimator needs the end time r"),
            (None, _) => Ok(te),
        }
    }
}
