//! The whole token-to-mel flow. Port of chatterbox/models/s3gen/flow.py
//! `CausalMaskedDiffWithXvec.inference` (upstream 5de7a54): x-vector normalisation and
//! projection, prompt + token concatenation, token embedding, encoder, `encoder_proj`, the
//! condition holding the prompt mel, the CFM solve, and the output without the prompt frames.

use super::cfm::CausalConditionalCFM;
use super::config::{is_float, FlowConfig, FlowOptions};
use super::decoder::ConditionalDecoder;
use super::encoder::UpsampleConformerEncoder;
use super::mask::Lengths;
use super::nn::Linear;
use crate::checkpoint::full_key;
use crate::{Result, S3GenError};
use candle_core::{DType, Module, Tensor};
use candle_nn::{Embedding, VarBuilder};

/// The meanflow estimator's extra weight.
const MEANFLOW_KEY: &str = "decoder.estimator.time_embed_mixer.weight";

/// The reference voice, as `S3Token2Mel.embed_ref` returns it.
#[derive(Debug, Clone)]
pub struct FlowPrompt {
    /// Speech tokens of the reference, `(1, n_prompt)` or `(batch, n_prompt)`, integer.
    pub prompt_token: Tensor,
    /// 24 kHz log-mel of the reference, `(1 or batch, token_mel_ratio * n_prompt, 80)`.
    pub prompt_feat: Tensor,
    /// CAMPPlus x-vector, `(1 or batch, 192)` (normalised here).
    pub embedding: Tensor,
}

/// The encoder half of [`CausalMaskedDiffWithXvec::inference`]: the solver's conditioning.
#[derive(Debug, Clone)]
pub struct FlowConditioning {
    /// `encoder_proj(h)`, `(batch, 80, T)`, prompt frames first.
    pub mu: Tensor,
    /// Projected speaker embedding, `(batch, 80)`.
    pub spks: Tensor,
    /// The prompt mel in the first `prompt_frames` frames, zeros after, `(batch, 80, T)`.
    pub cond: Tensor,
    /// Frames belonging to the prompt (dropped from the output).
    pub prompt_frames: usize,
}

impl FlowConditioning {
    /// Total frames `T` the solver works on (the noise's length).
    pub fn frames(&self) -> Result<usize> {
        Ok(self.mu.dim(2)?)
    }
}

/// `CausalMaskedDiffWithXvec`: speech tokens + reference prompt -> 80-bin mel.
#[derive(Debug, Clone)]
pub struct CausalMaskedDiffWithXvec {
    pub(super) input_embedding: Embedding,
    spk_embed_affine_layer: Linear,
    pub(super) encoder: UpsampleConformerEncoder,
    pub(super) encoder_proj: Linear,
    pub(super) decoder: CausalConditionalCFM,
    pub(super) cfg: FlowConfig,
}

impl CausalMaskedDiffWithXvec {
    /// Loads the flow (keys `input_embedding.*`, `spk_embed_affine_layer.*`, `encoder.*`,
    /// `encoder_proj.*`, `decoder.estimator.*`; `vb.pp("flow")` of an S3Gen checkpoint). Everything
    /// runs in `vb`'s dtype except the solver state, which is always f32. A checkpoint without
    /// one of the parts is [`S3GenError::MissingWeights`] naming the key with `vb`'s prefix
    /// (`flow.input_embedding.weight`).
    pub fn new(cfg: &FlowConfig, vb: VarBuilder) -> Result<Self> {
        let dtype = vb.dtype();
        Self::new_with_estimator_dtype(cfg, vb, dtype)
    }

    /// [`new`](Self::new) with the estimator (the part run `n_timesteps` times) in its own dtype,
    /// e.g. f16 or bf16 on a GPU with the encoder in f32.
    pub fn new_with_estimator_dtype(
        cfg: &FlowConfig,
        vb: VarBuilder,
        estimator_dtype: DType,
    ) -> Result<Self> {
        if !is_float(estimator_dtype) {
            return Err(S3GenError::InvalidInput {
                what: "estimator dtype",
                reason: format!("{estimator_dtype:?} is not a float type"),
            });
        }
        if cfg.encoder.input_size != cfg.input_size {
            return Err(S3GenError::InvalidInput {
                what: "flow config",
                reason: format!(
                    "encoder.input_size {} differs from input_size {}",
                    cfg.encoder.input_size, cfg.input_size
                ),
            });
        }
        if !cfg.meanflow() && vb.contains_tensor(MEANFLOW_KEY) {
            return Err(S3GenError::InvalidInput {
                what: "flow config",
                reason: format!(
                    "the checkpoint has {MEANFLOW_KEY}: it is a meanflow flow \
                     (FlowConfig::s3gen_meanflow())"
                ),
            });
        }
        Self::load(cfg, vb.clone(), estimator_dtype).map_err(|err| {
            // name the missing part rather than the first key candle tried
            let mut parts = vec![
                ("flow token embedding", "input_embedding.weight"),
                ("encoder", "encoder.embed.out.0.weight"),
                ("estimator", "decoder.estimator.time_mlp.linear_1.weight"),
            ];
            if cfg.meanflow() {
                parts.push(("meanflow time mixer", MEANFLOW_KEY));
            }
            parts
                .into_iter()
                .find(|(_, key)| !vb.contains_tensor(key))
                .map_or(err, |(what, key)| S3GenError::MissingWeights {
                    what,
                    key: full_key(&vb, key),
                })
        })
    }

    fn load(cfg: &FlowConfig, vb: VarBuilder, estimator_dtype: DType) -> Result<Self> {
        let emb = vb.get_with_hints(
            (cfg.vocab_size, cfg.input_size),
            "input_embedding.weight",
            candle_nn::Init::Randn {
                mean: 0.0,
                stdev: 1.0,
            },
        )?;
        let estimator = ConditionalDecoder::new(
            &cfg.decoder,
            vb.pp("decoder.estimator").set_dtype(estimator_dtype),
        )?;
        Ok(Self {
            input_embedding: Embedding::new(emb, cfg.input_size),
            spk_embed_affine_layer: Linear::new(
                cfg.spk_embed_dim,
                cfg.output_size,
                true,
                vb.pp("spk_embed_affine_layer"),
            )?,
            encoder: UpsampleConformerEncoder::new(&cfg.encoder, vb.pp("encoder"))?,
            encoder_proj: Linear::new(
                cfg.encoder.output_size,
                cfg.output_size,
                true,
                vb.pp("encoder_proj"),
            )?,
            decoder: CausalConditionalCFM::new(&cfg.cfm, estimator),
            cfg: cfg.clone(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FlowConfig {
        &self.cfg
    }

    /// The encoder.
    pub fn encoder(&self) -> &UpsampleConformerEncoder {
        &self.encoder
    }

    /// The solver (and through it the estimator).
    pub fn decoder(&self) -> &CausalConditionalCFM {
        &self.decoder
    }

    /// On CUDA, replay the solver's estimator calls as CUDA graphs (default: on; see
    /// [`CausalConditionalCFM::set_cuda_graphs`]).
    pub fn set_cuda_graphs(&mut self, on: bool) {
        self.decoder.set_cuda_graphs(on);
    }

    /// Whether [`inference_rows`](Self::inference_rows) calls replay CUDA graphs kept from
    /// earlier calls (CUDA with graphs on): its rows are padded to a frame bucket there, so
    /// that calls of one bucket and number of rows share a graph. One request runs best
    /// through it too, where graphs are kept, unless its audio must equal `inference`'s
    /// exactly (padding changes float rounding).
    pub fn replays_graphs(&self) -> bool {
        let dev = self.input_embedding.embeddings().device();
        self.decoder.cuda_graphs() && dev.is_cuda() && self.decoder.estimator().capturable(dev)
    }

    /// Shape of the noise [`inference`](Self::inference) needs: `(batch, 80, T)` with
    /// `T = token_mel_ratio * (n_prompt + n_tokens)`, less the look-ahead frames when
    /// `finalize` is false.
    pub fn noise_shape(
        &self,
        batch: usize,
        n_prompt: usize,
        n_tokens: usize,
        finalize: bool,
    ) -> (usize, usize, usize) {
        let r = self.cfg.token_mel_ratio;
        let mut t = r * (n_prompt + n_tokens);
        if !finalize {
            t = t.saturating_sub(self.cfg.pre_lookahead_len * r);
        }
        (batch, self.cfg.output_size, t)
    }

    /// `inference(token, prompt_token, prompt_feat, embedding, finalize, n_timesteps,
    /// noised_mels)` with the solver's initial noise given (`torch.randn_like(mu)` in the
    /// reference; shape from [`noise_shape`](Self::noise_shape)). `token` is `(batch, n)` or
    /// `(n,)` speech tokens (every id below `vocab_size`); for a meanflow model `noised_mels`
    /// `(batch, 80, T')` replaces the last `T'` frames of the noise. Returns the mel of the new
    /// tokens, `(batch, 80, T - prompt frames)`, f32.
    pub fn inference(
        &self,
        token: &Tensor,
        prompt: &FlowPrompt,
        noise: &Tensor,
        noised_mels: Option<&Tensor>,
        opts: &FlowOptions,
    ) -> Result<Tensor> {
        let c = self.encode(token, prompt, opts.finalize)?;
        self.decode(&c, noise, noised_mels, opts)
    }

    /// The encoder half of [`inference`](Self::inference).
    pub fn encode(
        &self,
        token: &Tensor,
        prompt: &FlowPrompt,
        finalize: bool,
    ) -> Result<FlowConditioning> {
        let _span = tracing::debug_span!("flow_encode", finalize).entered();
        let cfg = &self.cfg;
        let dev = self.input_embedding.embeddings().device().clone();
        let token = token_rows(token, "token", cfg.vocab_size)?;
        let b = token.len();
        let ptoken = token_rows(&prompt.prompt_token, "prompt_token", cfg.vocab_size)?;
        let ptoken = repeat_rows(ptoken, b, "prompt_token")?;
        let n_prompt = ptoken.first().map_or(0, Vec::len);
        let n_tok = token.first().map_or(0, Vec::len);
        if n_tok == 0 {
            return Err(S3GenError::InvalidInput {
                what: "token",
                reason: "no speech tokens".into(),
            });
        }
        let ratio = cfg.token_mel_ratio;
        let pfeat = batch3(&prompt.prompt_feat, b, "prompt_feat")?;
        let (_, mel_len1, n_mels) = pfeat.dims3()?;
        if mel_len1 != ratio * n_prompt || n_mels != cfg.output_size {
            return Err(S3GenError::InvalidInput {
                what: "prompt",
                reason: format!(
                    "prompt_feat is {:?} but {} prompt tokens need ({}, {}) mel frames (x {ratio})",
                    prompt.prompt_feat.dims(),
                    n_prompt,
                    ratio * n_prompt,
                    cfg.output_size
                ),
            });
        }
        let trim = if finalize {
            0
        } else {
            cfg.pre_lookahead_len * ratio
        };
        let total = ratio * (n_prompt + n_tok);
        if total <= mel_len1 + trim {
            return Err(S3GenError::InvalidInput {
                what: "token",
                reason: format!(
                    "{n_tok} tokens leave no frame to generate with finalize={finalize} \
                     (look-ahead {} tokens)",
                    cfg.pre_lookahead_len
                ),
            });
        }

        let spks = self.speaker(&batch2(&prompt.embedding, b, "embedding")?)?;

        // prompt ++ tokens, embedded (no padding: the reference's `* mask` multiplies by 1)
        let ids: Vec<u32> = ptoken
            .iter()
            .zip(&token)
            .flat_map(|(p, t)| p.iter().chain(t.iter()).copied())
            .collect();
        let n = n_prompt + n_tok;
        let ids = Tensor::from_vec(ids, (b, n), &dev)?;
        let xs = self.input_embedding.forward(&ids)?;
        let (h, _lens) = self
            .encoder
            .forward_lengths(&xs, &Lengths::full(b, n), false)?;
        let h = if finalize {
            h
        } else {
            h.narrow(1, 0, total - trim)?
        };
        let t = h.dim(1)?;
        let mu = self.encoder_proj.forward(&h)?; // (b, T, 80)
        let cond = Tensor::cat(
            &[
                pfeat.to_dtype(mu.dtype())?,
                Tensor::zeros((b, t - mel_len1, n_mels), mu.dtype(), &dev)?,
            ],
            1,
        )?;
        Ok(FlowConditioning {
            mu: mu.transpose(1, 2)?,
            spks,
            cond: cond.transpose(1, 2)?,
            prompt_frames: mel_len1,
        })
    }

    /// The x-vectors `(batch, 192)` normalised (`F.normalize(dim=1)`) and projected by the
    /// affine layer: the solver's `spks (batch, 80)`.
    pub(super) fn speaker(&self, embedding: &Tensor) -> Result<Tensor> {
        let emb = embedding.to_dtype(DType::F32)?;
        let norm = emb.sqr()?.sum_keepdim(1)?.sqrt()?.maximum(1e-12)?;
        let emb = emb.broadcast_div(&norm)?;
        let wdt = self.input_embedding.embeddings().dtype();
        Ok(self.spk_embed_affine_layer.forward(&emb.to_dtype(wdt)?)?)
    }

    /// The solver half of [`inference`](Self::inference): the mel of the new frames.
    pub fn decode(
        &self,
        c: &FlowConditioning,
        noise: &Tensor,
        noised_mels: Option<&Tensor>,
        opts: &FlowOptions,
    ) -> Result<Tensor> {
        let steps = opts
            .n_timesteps
            .unwrap_or(if self.cfg.meanflow() { 2 } else { 10 });
        let t = c.frames()?;
        let feat = self
            .decoder
            .solve(&c.mu, None, steps, &c.spks, &c.cond, noise, noised_mels)?;
        Ok(feat.narrow(2, c.prompt_frames, t - c.prompt_frames)?)
    }
}

/// Integer token rows of a `(batch, n)` or `(n,)` tensor, every id checked against the vocabulary
/// (the reference only logs out-of-range ids and then fails inside the embedding).
pub(super) fn token_rows(t: &Tensor, what: &'static str, vocab: usize) -> Result<Vec<Vec<u32>>> {
    let t = match t.rank() {
        1 => t.unsqueeze(0)?,
        2 => t.clone(),
        _ => {
            return Err(S3GenError::InvalidInput {
                what,
                reason: format!("expected (batch, n) or (n,), got {:?}", t.dims()),
            })
        }
    };
    let rows: Vec<Vec<i64>> = match t.dtype() {
        DType::I64 => t.to_vec2::<i64>()?,
        DType::U32 => t
            .to_vec2::<u32>()?
            .into_iter()
            .map(|r| r.into_iter().map(i64::from).collect())
            .collect(),
        DType::U8 => t
            .to_vec2::<u8>()?
            .into_iter()
            .map(|r| r.into_iter().map(i64::from).collect())
            .collect(),
        d => {
            return Err(S3GenError::InvalidInput {
                what,
                reason: format!("token ids must be an integer tensor, got {d:?}"),
            })
        }
    };
    rows.into_iter()
        .map(|r| {
            r.into_iter()
                .map(|id| {
                    u32::try_from(id)
                        .ok()
                        .filter(|&v| (v as usize) < vocab)
                        .ok_or_else(|| S3GenError::InvalidInput {
                            what,
                            reason: format!(
                                "speech token id {id} is outside 0..{vocab} (drop special tokens \
                                 such as 6561/6562 before the flow)"
                            ),
                        })
                })
                .collect()
        })
        .collect()
}

/// `_repeat_batch_dim` for host rows: one row is repeated to `b`, otherwise `b` rows are needed.
fn repeat_rows(rows: Vec<Vec<u32>>, b: usize, what: &'static str) -> Result<Vec<Vec<u32>>> {
    match rows.len() {
        n if n == b => Ok(rows),
        1 => Ok(vec![rows[0].clone(); b]),
        n => Err(S3GenError::InvalidInput {
            what,
            reason: format!("batch of {n} does not match the {b} token rows"),
        }),
    }
}

fn batch_of(t: &Tensor, b: usize, rank: usize, what: &'static str) -> Result<Tensor> {
    let t = if t.rank() == rank - 1 {
        t.unsqueeze(0)?
    } else {
        t.clone()
    };
    if t.rank() != rank {
        return Err(S3GenError::InvalidInput {
            what,
            reason: format!("expected rank {rank}, got shape {:?}", t.dims()),
        });
    }
    match t.dim(0)? {
        n if n == b => Ok(t),
        1 => {
            let mut dims = t.dims().to_vec();
            dims[0] = b;
            Ok(t.broadcast_as(dims)?.contiguous()?)
        }
        n => Err(S3GenError::InvalidInput {
            what,
            reason: format!("batch of {n} does not match the {b} token rows"),
        }),
    }
}

fn batch3(t: &Tensor, b: usize, what: &'static str) -> Result<Tensor> {
    batch_of(t, b, 3, what)
}

fn batch2(t: &Tensor, b: usize, what: &'static str) -> Result<Tensor> {
    batch_of(t, b, 2, what)
}
