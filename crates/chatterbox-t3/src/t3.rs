//! Port of chatterbox/models/t3/t3.py (upstream 5de7a54): the `T3` weights, its conditioning
//! and input embeddings (quirks included), and the speech head.
use crate::backbone::{weight, Backbone, Linear, Preloaded, QuantizeReport};
use crate::cond_enc::{T3Cond, T3CondEnc};
use crate::config::T3Config;
use crate::error::invalid;
use crate::learned_pos_emb::LearnedPositionEmbeddings;
use crate::weight_format::WeightFormat;
use crate::{Result, T3Error};
use candle_core::{DType, Device, Tensor};
use candle_nn::{Module, VarBuilder};
use std::path::Path;

/// T3: text tokens plus voice conditioning in, speech-token logits out.
///
/// `text_head` (a training-only output) and the backbones' own token tables (`tfmr.embed_tokens`,
/// Turbo's `tfmr.wte`) are not loaded.
#[derive(Debug, Clone)]
pub struct T3 {
    hp: T3Config,
    tfmr: Backbone,
    cond_enc: T3CondEnc,
    text_emb: Tensor,
    speech_emb: Tensor,
    text_pos_emb: Option<LearnedPositionEmbeddings>,
    speech_pos_emb: Option<LearnedPositionEmbeddings>,
    speech_head: Linear,
}

impl T3 {
    /// Builds T3 from a checkpoint's tensors (`tfmr.*`, `cond_enc.*`, `text_emb`, ...) under `vb`;
    /// dtype and device come from `vb`. Tensors of the wrong shape (another variant's
    /// checkpoint) are [`T3Error::ShapeMismatch`] errors naming the key.
    pub fn new(hp: &T3Config, vb: VarBuilder) -> Result<Self> {
        Self::build(hp, vb, &Preloaded::default())
    }

    /// [`T3::new`] taking the backbone projections `pre` holds (a quantized checkpoint's)
    /// instead of their tensors.
    pub(crate) fn build(hp: &T3Config, vb: VarBuilder, pre: &Preloaded) -> Result<Self> {
        hp.validate()?;
        let c = hp.n_channels();
        let (text_pos_emb, speech_pos_emb) = if hp.has_learned_pos_emb() {
            (
                Some(LearnedPositionEmbeddings::new(
                    hp.text_positions(),
                    c,
                    vb.pp("text_pos_emb"),
                )?),
                Some(LearnedPositionEmbeddings::new(
                    hp.speech_positions(),
                    c,
                    vb.pp("speech_pos_emb"),
                )?),
            )
        } else {
            (None, None)
        };
        let cond_max = 2 + if hp.use_perceiver_resampler {
            hp.perceiver.pre_attention_query_token
        } else {
            hp.speech_positions().max(hp.speech_cond_prompt_len)
        };
        let positions = cond_max + hp.text_positions() + hp.speech_positions();
        Ok(Self {
            tfmr: Backbone::build(&hp.backbone, positions, vb.pp("tfmr"), pre)?,
            cond_enc: T3CondEnc::new(hp, vb.pp("cond_enc"))?,
            text_emb: weight(&vb.pp("text_emb"), &[hp.text_tokens_dict_size, c], "weight")?,
            speech_emb: weight(
                &vb.pp("speech_emb"),
                &[hp.speech_tokens_dict_size, c],
                "weight",
            )?,
            text_pos_emb,
            speech_pos_emb,
            speech_head: Linear::load(
                vb.pp("speech_head"),
                c,
                hp.speech_tokens_dict_size,
                hp.is_gpt(),
            )?,
            hp: hp.clone(),
        })
    }

    /// Loads a checkpoint (`t3_cfg.safetensors`, `t3_mtl23ls_v2.safetensors`,
    /// `t3_turbo_v1.safetensors`, ...), inferring the variant from its tensor shapes.
    pub fn load<P: AsRef<Path>>(paths: &[P], dtype: DType, device: &Device) -> Result<Self> {
        let cfg = T3Config::from_safetensors(paths)?;
        Self::load_with_config(&cfg, paths, dtype, device)
    }

    /// Loads a checkpoint with a given configuration (checked against the tensor shapes).
    pub fn load_with_config<P: AsRef<Path>>(
        cfg: &T3Config,
        paths: &[P],
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        // SAFETY: the checkpoint files are memory-mapped read-only and must not be modified
        // while loading (the usual contract of candle's mmaped loader).
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(paths, dtype, device)? };
        Self::new(cfg, vb)
    }

    /// Stores the backbone's attention and MLP projections in `format` (94 % of English's
    /// parameters, 71 % of Turbo's, and all but the speech head of what a decode step reads);
    /// the embeddings, the conditioning encoder and the speech head keep their dtype. [`WeightFormat::F32`] changes nothing, so the exact path
    /// stays exactly as loaded. The 8- and 4-bit formats run on the CPU only (an error
    /// elsewhere) and need f32 activations (a model loaded in f32). A model already stored in
    /// `format` (a quantized checkpoint) is left as it is; another non-exact format is an
    /// error (the full-precision weights are gone). A decode step reads every
    /// weight once, so fewer bytes a weight make it faster on a CPU bound by memory bandwidth;
    /// the next-token distributions move slightly (`cargo xtask bench t3_quant` measures by
    /// how much).
    pub fn quantize(&mut self, format: WeightFormat) -> Result<QuantizeReport> {
        if !format.is_exact() && self.dtype() != DType::F32 {
            return Err(T3Error::InvalidConfig(format!(
                "{format} weights need a model loaded in f32, not {:?}",
                self.dtype()
            )));
        }
        self.tfmr.quantize(format)
    }

    /// The format of the backbone's projections ([`WeightFormat::F32`] unless
    /// [`T3::quantize`] changed it).
    pub fn weight_format(&self) -> WeightFormat {
        self.tfmr.weight_format()
    }

    /// The configuration.
    pub fn config(&self) -> &T3Config {
        &self.hp
    }

    /// The backbone.
    pub fn backbone(&self) -> &Backbone {
        &self.tfmr
    }

    /// Whether decode steps may run as fused CUDA kernels (see
    /// [`Backbone::set_fused_decode`]; on by default).
    pub fn set_fused_decode(&mut self, on: bool) {
        self.tfmr.set_fused_decode(on);
    }

    /// The conditioning encoder.
    pub fn cond_enc(&self) -> &T3CondEnc {
        &self.cond_enc
    }

    /// The device of the weights.
    pub fn device(&self) -> &Device {
        self.speech_emb.device()
    }

    /// The dtype of the weights.
    pub fn dtype(&self) -> DType {
        self.speech_emb.dtype()
    }

    /// Adds `SOT`/`EOT` around text ids, as `tts.py` does before calling `inference`.
    pub fn pad_text_tokens(&self, ids: &[u32]) -> Vec<u32> {
        let mut v = Vec::with_capacity(ids.len() + 2);
        v.push(self.hp.start_text_token);
        v.extend_from_slice(ids);
        v.push(self.hp.stop_text_token);
        v
    }

    fn ids_tensor(&self, ids: &[u32], vocab: usize, what: &'static str) -> Result<Tensor> {
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(invalid(
                what,
                format!("id {bad} is outside the vocabulary of {vocab}"),
            ));
        }
        Ok(Tensor::new(ids, self.device())?)
    }

    /// `prepare_conditioning`: the conditioning prefix `[B, len_cond, C]`
    /// (speaker, perceiver-resampled or raw prompt, emotion). Compute it once per voice and
    /// reuse it.
    pub fn prepare_conditioning(&self, cond: &T3Cond) -> Result<Tensor> {
        let prompt_emb = match &cond.cond_prompt_speech_tokens {
            None => None,
            Some(tokens) => {
                let (b, t) = match tokens.dims() {
                    [t] => (1, *t),
                    [b, t] => (*b, *t),
                    d => {
                        return Err(invalid(
                            "cond_prompt_speech_tokens",
                            format!("shape {d:?}, expected [B, T]"),
                        ))
                    }
                };
                if t == 0 {
                    return Err(invalid("cond_prompt_speech_tokens", "empty prompt"));
                }
                let ids: Vec<u32> = tokens
                    .flatten_all()?
                    .to_dtype(DType::I64)?
                    .to_vec1::<i64>()?
                    .into_iter()
                    .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
                    .collect();
                let ids = self.ids_tensor(
                    &ids,
                    self.hp.speech_tokens_dict_size,
                    "cond_prompt_speech_tokens",
                )?;
                let c = self.hp.n_channels();
                let mut e = self.speech_emb.index_select(&ids, 0)?.reshape((b, t, c))?;
                if !self.hp.is_gpt() {
                    let pos = self.speech_pos_emb.as_ref().ok_or_else(|| {
                        T3Error::InvalidConfig("Llama T3 without learned speech positions".into())
                    })?;
                    e = e.broadcast_add(&pos.forward(t, "speech position table (prompt)")?)?;
                }
                Some(e)
            }
        };
        self.cond_enc.forward(cond, prompt_emb.as_ref())
    }

    /// `prepare_input_embeds`: `[cond | text | speech]` embeddings, `[B, len, C]`. With `cfg`
    /// (Llama variants only) `B = 2` and row 1 is the unconditional row: its text embeddings are
    /// zeroed **before** the text position embeddings are added, so it keeps those.
    pub fn prepare_input_embeds(
        &self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        speech_tokens: &[u32],
        cfg: bool,
    ) -> Result<Tensor> {
        if text_tokens.is_empty() {
            return Err(invalid("text_tokens", "empty"));
        }
        if self.hp.has_learned_pos_emb() && text_tokens.len() > self.hp.text_positions() {
            return Err(T3Error::TextTooLong {
                len: text_tokens.len(),
                max: self.hp.text_positions(),
            });
        }
        let b = if cfg && !self.hp.is_gpt() { 2 } else { 1 };
        let text = self.text_emb.index_select(
            &self.ids_tensor(text_tokens, self.hp.text_tokens_dict_size, "text_tokens")?,
            0,
        )?;
        let speech = self.speech_emb.index_select(
            &self.ids_tensor(
                speech_tokens,
                self.hp.speech_tokens_dict_size,
                "speech_tokens",
            )?,
            0,
        )?;
        let (text_rows, speech) = match (&self.text_pos_emb, &self.speech_pos_emb) {
            (Some(tp), Some(sp)) => {
                let tpos = tp.forward(text_tokens.len(), "text position table")?;
                let cond_row = (&text + &tpos)?;
                // `text_emb[1].zero_()` then `+ text_pos_emb`: the uncond row is the positions.
                let rows = if b == 2 {
                    vec![cond_row, tpos]
                } else {
                    vec![cond_row]
                };
                let speech =
                    (speech + sp.forward(speech_tokens.len(), "speech position table")?)?;
                (rows, speech)
            }
            _ => {
                let rows = if b == 2 {
                    vec![text.clone(), text.zeros_like()?]
                } else {
                    vec![text]
                };
                (rows, speech)
            }
        };
        let (bc, _, _) = cond_emb.dims3()?;
        if bc != 1 && bc != b {
            return Err(invalid(
                "cond_emb",
                format!("batch {bc}, expected 1 or {b}"),
            ));
        }
        let mut rows = Vec::with_capacity(b);
        for (i, text) in text_rows.iter().enumerate() {
            let ce = cond_emb
                .get(if bc == 1 { 0 } else { i })?
                .to_dtype(self.dtype())?;
            rows.push(Tensor::cat(&[&ce, text, &speech], 0)?);
        }
        Ok(Tensor::stack(&rows, 0)?)
    }

    /// The embedding of one generated token at a speech position, both device-side u32 `[1]`
    /// tensors: `speech_emb(token)` plus, for Llama variants, `speech_pos_emb(pos)`.
    /// `[1, 1, C]`; capturable.
    pub fn speech_step_embed(&self, token: &Tensor, speech_pos: &Tensor) -> Result<Tensor> {
        let e = self.speech_emb.index_select(token, 0)?;
        let e = match &self.speech_pos_emb {
            Some(p) => (e + p.get_fixed_embedding(speech_pos)?)?,
            None => e,
        };
        Ok(e.unsqueeze(0)?)
    }

    /// `speech_head` on final-norm hidden states `[B, T, C]` -> f32 logits `[B, vocab]` (last
    /// position of each row when `T == 1`, else `[B, T, vocab]`).
    pub fn speech_logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let logits = self.speech_head.forward(hidden)?.to_dtype(DType::F32)?;
        if logits.dim(1)? == 1 {
            Ok(logits.squeeze(1)?)
        } else {
            Ok(logits)
        }
    }

    /// The hidden states of a prefill (transformers' `output_hidden_states`, without the input
    /// embeddings): each layer's output, then the final norm's, each `[B, T, C]`.
    pub fn hidden_states(&self, embeds: &Tensor) -> Result<Vec<Tensor>> {
        let (b, t, _) = embeds.dims3()?;
        let mut caches = self.tfmr.new_caches(b, t, self.dtype(), self.device())?;
        let mut hidden = Vec::new();
        self.tfmr.prefill(embeds, &mut caches, Some(&mut hidden))?;
        Ok(hidden)
    }

    /// Checks `_ensure_BOT_EOT` (Llama variants): the text holds both SOT and EOT.
    pub(crate) fn ensure_bot_eot(&self, text_tokens: &[u32]) -> Result<()> {
        if !text_tokens.contains(&self.hp.start_text_token) {
            return Err(invalid(
                "text_tokens",
                format!("missing start_text_token {}", self.hp.start_text_token),
            ));
        }
        if !text_tokens.contains(&self.hp.stop_text_token) {
            return Err(invalid(
                "text_tokens",
                format!("missing stop_text_token {}", self.hp.stop_text_token),
            ));
        }
        Ok(())
    }
}
