//! Port of `S3Token2Mel.embed_ref` in chatterbox/models/s3gen/s3gen.py (upstream 5de7a54): a
//! reference clip to the `ref_dict` the flow is prompted with.
use super::RefEncoderConfig;
use crate::flow::FlowPrompt;
use crate::tokenizer::{S3Tokenizer, S3_SR};
use crate::{Result, S3GenError};
use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_dsp::features::{S3GenMel, S3GenMelConfig};
use chatterbox_dsp::resample::SincResampler;
use chatterbox_speaker::CAMPPlus;
use std::borrow::Cow;

/// S3Gen's output sample rate and the rate of its prompt mel (`S3GEN_SR`).
pub const S3GEN_SR: u32 = 24_000;
/// Reference audio S3Gen is meant to be given: the first 10 s at 24 kHz (`DEC_COND_LEN`).
/// Longer clips are embedded whole (with a warning, as in the reference).
pub const DEC_COND_LEN: usize = 10 * S3GEN_SR as usize;

/// `embed_ref` on its own: the speech tokenizer, the CAMPPlus speaker encoder, the 24 kHz mel
/// and torchaudio's sinc resampler, without the flow or the vocoder.
///
/// [`RefEncoder::embed_ref`] returns the flow's [`FlowPrompt`]: prompt speech tokens
/// `(1, n)` u32 from a 16 kHz copy of the clip, its 24 kHz log mel `(1, 2 n, 80)` f32, and the
/// CAMPPlus x-vector `(1, 192)` f32.
#[derive(Debug, Clone)]
pub struct RefEncoder {
    tokenizer: S3Tokenizer,
    speaker_encoder: CAMPPlus,
    mel: S3GenMel,
    /// 24 kHz to 16 kHz, the rate S3Gen's callers use.
    resampler: SincResampler,
}

impl RefEncoder {
    /// Loads the `tokenizer.*` and `speaker_encoder.*` tensors under `vb` (the root of
    /// `s3gen.safetensors` / `s3gen.pt`). No flow or vocoder tensor is read.
    pub fn new(cfg: &RefEncoderConfig, vb: VarBuilder) -> Result<Self> {
        let tokenizer = S3Tokenizer::new(&cfg.tokenizer, vb.pp("tokenizer"))?;
        let speaker_encoder = CAMPPlus::new(&cfg.speaker_encoder, vb.pp("speaker_encoder"))?;
        Self::from_parts(tokenizer, speaker_encoder)
    }

    /// From a tokenizer and a speaker encoder already built (on the same device), e.g. the ones
    /// a whole S3Gen holds. Both are cheap to clone (their weights are shared).
    pub fn from_parts(tokenizer: S3Tokenizer, speaker_encoder: CAMPPlus) -> Result<Self> {
        if !tokenizer.device().same_device(speaker_encoder.device()) {
            return Err(S3GenError::InvalidInput {
                what: "RefEncoder parts",
                reason: format!(
                    "the tokenizer is on {:?} and the speaker encoder on {:?}",
                    tokenizer.device(),
                    speaker_encoder.device()
                ),
            });
        }
        Ok(Self {
            tokenizer,
            speaker_encoder,
            mel: S3GenMel::new(S3GenMelConfig::default())?,
            resampler: SincResampler::new(S3GEN_SR, S3_SR)?,
        })
    }

    /// The speech tokenizer (also what makes T3's prompt tokens and voice conversion's source
    /// tokens).
    pub fn tokenizer(&self) -> &S3Tokenizer {
        &self.tokenizer
    }

    /// The x-vector speaker encoder.
    pub fn speaker_encoder(&self) -> &CAMPPlus {
        &self.speaker_encoder
    }

    /// The 24 kHz mel of the prompt (`mel_extractor`).
    pub fn mel(&self) -> &S3GenMel {
        &self.mel
    }

    /// The device the results come out on.
    pub fn device(&self) -> &Device {
        self.tokenizer.device()
    }

    /// `embed_ref(ref_wav, sample_rate)`: the reference voice of one clip (S3Gen's callers pass
    /// the first 10 s at 24 kHz, [`DEC_COND_LEN`]). The clip is brought to 24 kHz for the mel
    /// and to 16 kHz for the x-vector and the speech tokens with torchaudio's sinc resampler,
    /// exactly as the reference (no resampling at a rate that is already right).
    ///
    /// When the mel has more frames than twice the tokens, the reference keeps the longer mel
    /// and its flow misaligns prompt and tokens; this port cuts the mel to twice the tokens
    /// instead (logged). When it has fewer, the tokens are cut, as in the reference.
    ///
    /// Errors: an empty clip or a NaN/infinite sample (`Dsp`), a clip of digital silence
    /// (`SilentAudio`), a clip too short for the speaker encoder (`Speaker`) or giving no speech
    /// token (`InvalidInput`), a sample rate of 0.
    pub fn embed_ref(&self, wav: &[f32], sample_rate: u32) -> Result<FlowPrompt> {
        const WHAT: &str = "reference clip";
        let _span = tracing::debug_span!("embed_ref", samples = wav.len(), sample_rate).entered();
        chatterbox_dsp::check_signal(WHAT, wav)?;
        if wav.iter().all(|&v| v == 0.0) {
            return Err(S3GenError::SilentAudio {
                what: WHAT,
                len: wav.len(),
            });
        }
        if sample_rate == 0 {
            return Err(S3GenError::InvalidInput {
                what: "sample rate",
                reason: "0 Hz".into(),
            });
        }
        if wav.len() as u64 > 10 * u64::from(sample_rate) {
            tracing::warn!("s3gen received a reference longer than 10 s");
        }
        let wav_24k: Cow<[f32]> = if sample_rate == S3GEN_SR {
            Cow::Borrowed(wav)
        } else {
            Cow::Owned(SincResampler::new(sample_rate, S3GEN_SR)?.process(wav)?)
        };
        let mel = self.mel.compute(&wav_24k)?; // (80, frames)
        let (bins, frames) = mel.shape();
        let wav_16k: Cow<[f32]> = match sample_rate {
            S3_SR => Cow::Borrowed(wav),
            S3GEN_SR => Cow::Owned(self.resampler.process(wav)?),
            sr => Cow::Owned(SincResampler::new(sr, S3_SR)?.process(wav)?),
        };
        let device = self.device();
        let embedding = self
            .speaker_encoder
            .inference(&wav_16k, S3_SR)?
            .to_device(device)?;
        let tokens = self.tokenizer.forward(&[&wav_16k], S3_SR, None)?;
        let mut tokens = tokens.to_vecs()?.into_iter().next().unwrap_or_default();
        let mut keep_frames = frames;
        if frames != 2 * tokens.len() {
            // A frame or two either way is what clips of ordinary lengths give (the mel and
            // the tokenizer round the length differently): not worth a warning.
            if frames.abs_diff(2 * tokens.len()) > 2 {
                tracing::warn!(
                    frames,
                    tokens = tokens.len(),
                    "reference mel length is not equal to 2 * reference token length"
                );
            } else {
                tracing::debug!(frames, tokens = tokens.len(), "mel/token length rounding");
            }
            tokens.truncate(frames / 2);
            keep_frames = frames.min(2 * tokens.len());
        }
        if tokens.is_empty() {
            return Err(S3GenError::InvalidInput {
                what: WHAT,
                reason: format!(
                    "{} samples give no speech token; use at least a second of speech",
                    wav.len()
                ),
            });
        }
        let n = tokens.len();
        let prompt_feat = Tensor::from_vec(mel.into_vec(), (bins, frames), device)?
            .narrow(1, 0, keep_frames)?
            .t()?
            .unsqueeze(0)?
            .contiguous()?;
        Ok(FlowPrompt {
            prompt_token: Tensor::from_vec(tokens, (1, n), device)?,
            prompt_feat,
            embedding,
        })
    }
}
