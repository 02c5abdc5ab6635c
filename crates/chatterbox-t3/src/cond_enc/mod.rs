//! Port of chatterbox/models/t3/modules/cond_enc.py (upstream 5de7a54): the conditioning
//! prefix (speaker, resampled prompt, emotion) that precedes the text.
mod perceiver;

pub use perceiver::Perceiver;

use crate::backbone::Linear;
use crate::config::T3Config;
use crate::{Result, T3Error};
use candle_core::{Tensor, D};
use candle_nn::{Module, VarBuilder};

/// `T3Cond`: the non-text conditioning of one voice.
///
/// The reference caches the embedded prompt inside this object (`cond_prompt_speech_emb`);
/// here [`crate::T3::prepare_conditioning`] returns the finished prefix, which callers keep
/// and reuse instead.
#[derive(Debug, Clone)]
pub struct T3Cond {
    /// VoiceEncoder speaker embedding, `[B, speaker_embed_size]` (or anything with that many
    /// elements per row), f32.
    pub speaker_emb: Tensor,
    /// Prompt speech tokens `[B, T]` (u32 or i64), or none.
    pub cond_prompt_speech_tokens: Option<Tensor>,
    /// Emotion / exaggeration value (`emotion_adv`); ignored by models without the slot.
    /// Default: `0.5`.
    pub emotion_adv: f32,
}

impl T3Cond {
    /// Conditioning with a speaker embedding only (no prompt) and `emotion_adv = 0.5`.
    pub fn new(speaker_emb: Tensor) -> Self {
        Self {
            speaker_emb,
            cond_prompt_speech_tokens: None,
            emotion_adv: 0.5,
        }
    }

    /// Adds prompt speech tokens.
    pub fn with_prompt(mut self, tokens: Tensor) -> Self {
        self.cond_prompt_speech_tokens = Some(tokens);
        self
    }

    /// Sets the emotion / exaggeration value.
    pub fn with_emotion_adv(mut self, value: f32) -> Self {
        self.emotion_adv = value;
        self
    }
}

/// `T3CondEnc`: speaker projection, optional Perceiver over the prompt embedding, optional
/// emotion projection, concatenated along time.
#[derive(Debug, Clone)]
pub struct T3CondEnc {
    spkr_enc: Linear,
    emotion_adv_fc: Option<Linear>,
    perceiver: Option<Perceiver>,
    speaker_embed_size: usize,
}

impl T3CondEnc {
    /// Loads `spkr_enc`, `emotion_adv_fc` and `perceiver` under `vb` (`cond_enc`).
    pub fn new(hp: &T3Config, vb: VarBuilder) -> Result<Self> {
        let c = hp.n_channels();
        Ok(Self {
            spkr_enc: Linear::load(vb.pp("spkr_enc"), hp.speaker_embed_size, c, true)?,
            emotion_adv_fc: if hp.emotion_adv {
                Some(Linear::load(vb.pp("emotion_adv_fc"), 1, c, false)?)
            } else {
                None
            },
            perceiver: if hp.use_perceiver_resampler {
                Some(Perceiver::new(&hp.perceiver, vb.pp("perceiver"))?)
            } else {
                None
            },
            speaker_embed_size: hp.speaker_embed_size,
        })
    }

    /// The Perceiver, if the model has one.
    pub fn perceiver(&self) -> Option<&Perceiver> {
        self.perceiver.as_ref()
    }

    /// `forward(cond)`: `[B, 1 + prompt + emotion, C]`. `prompt_emb` is the embedded prompt
    /// (`speech_emb(tokens)`, plus learned positions for Llama models), or `None`.
    pub fn forward(&self, cond: &T3Cond, prompt_emb: Option<&Tensor>) -> Result<Tensor> {
        let spk = &cond.speaker_emb;
        if spk.elem_count() == 0 || !spk.elem_count().is_multiple_of(self.speaker_embed_size) {
            return Err(T3Error::InvalidInput {
                what: "speaker_emb",
                reason: format!(
                    "{:?} is not a multiple of {} values",
                    spk.dims(),
                    self.speaker_embed_size
                ),
            });
        }
        let b = spk.elem_count() / self.speaker_embed_size;
        let spk = spk
            .reshape((b, self.speaker_embed_size))?
            .to_dtype(self.spkr_enc.dtype())?;
        let mut parts = vec![self.spkr_enc.forward(&spk)?.unsqueeze(1)?];
        if let Some(p) = prompt_emb {
            parts.push(match &self.perceiver {
                Some(perceiver) => perceiver.forward(p)?,
                None => p.clone(),
            });
        }
        if let Some(fc) = &self.emotion_adv_fc {
            let e =
                Tensor::full(cond.emotion_adv, (b, 1, 1), spk.device())?.to_dtype(spk.dtype())?;
            parts.push(fc.forward(&e)?);
        }
        Ok(Tensor::cat(&parts, D::Minus2)?)
    }
}
