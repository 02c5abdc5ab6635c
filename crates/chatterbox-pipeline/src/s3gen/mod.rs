//! S3Gen: speech tokens plus a reference voice to 24 kHz audio. Port of `S3Token2Mel` and
//! `S3Token2Wav` in chatterbox/models/s3gen/s3gen.py (upstream 5de7a54), composed from the
//! component crates:
//!
//! ```text
//! S3Gen                 embed_ref: 24 kHz mel (chatterbox-dsp), torchaudio 24k -> 16k resample,
//! ├── tokenizer         S3Tokenizer (chatterbox-s3gen)       prompt tokens
//! ├── speaker_encoder   CAMPPlus (chatterbox-speaker)        x-vector
//! ├── flow              CausalMaskedDiffWithXvec (chatterbox-s3gen)   tokens -> mel
//! ├── mel2wav           HiFTGenerator (chatterbox-vocoder)            mel -> wav
//! └── trim_fade         TrimFade (chatterbox-vocoder)
//! ```
mod reference;

pub use reference::S3GenRef;

use crate::config::S3GenConfig;
use crate::draws::Draws;
use crate::{PipelineError, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_dsp::features::{S3GenMel, S3GenMelConfig};
use chatterbox_dsp::resample::SincResampler;
use chatterbox_s3gen::flow::{CausalMaskedDiffWithXvec, FlowOptions};
use chatterbox_s3gen::tokenizer::S3Tokenizer;
use chatterbox_speaker::CAMPPlus;
use chatterbox_vocoder::{HiFTGenerator, TrimFade};

/// Output sample rate of S3Gen (`S3GEN_SR`).
pub const S3GEN_SR: u32 = 24_000;
/// Sample rate of the speech tokenizer and the speaker encoders (`S3_SR`).
pub const S3_SR: u32 = 16_000;
/// Output samples per speech token (`S3GEN_SR // S3_TOKEN_RATE`).
pub const SAMPLES_PER_TOKEN: usize = 960;
/// The silence token Turbo appends (`S3GEN_SIL`).
pub const S3GEN_SIL: u32 = 4299;
/// Reference audio `embed_ref` uses: the first 10 s (`DEC_COND_LEN`).
pub const DEC_COND_LEN: usize = 10 * S3GEN_SR as usize;

/// Knobs of [`S3Gen::inference`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct S3GenOptions {
    /// CFM Euler steps. Default: `None` (10, or 2 for the meanflow model).
    pub n_cfm_timesteps: Option<usize>,
}

/// `S3Token2Wav`: the reference-voice encoder, the token-to-mel flow and the HiFT vocoder.
///
/// Weights are the `tokenizer.*`, `speaker_encoder.*`, `flow.*` and `mel2wav.*` tensors of
/// `s3gen.safetensors`, `s3gen.pt` or `s3gen_meanflow.safetensors`. Everything runs in f32
/// except the flow's estimator, which may run in another float type.
#[derive(Debug, Clone)]
pub struct S3Gen {
    tokenizer: S3Tokenizer,
    speaker_encoder: CAMPPlus,
    flow: CausalMaskedDiffWithXvec,
    mel2wav: HiFTGenerator,
    trim_fade: TrimFade,
    mel: S3GenMel,
    resampler: SincResampler,
    device: Device,
}

impl S3Gen {
    /// Builds S3Gen from `vb` (f32; the root of an S3Gen checkpoint), running the flow's
    /// estimator in `estimator_dtype`.
    pub fn new(cfg: &S3GenConfig, vb: VarBuilder, estimator_dtype: DType) -> Result<Self> {
        let device = vb.device().clone();
        Ok(Self {
            tokenizer: S3Tokenizer::new(&cfg.tokenizer, vb.pp("tokenizer"))?,
            speaker_encoder: CAMPPlus::new(&cfg.speaker_encoder, vb.pp("speaker_encoder"))?,
            flow: CausalMaskedDiffWithXvec::new_with_estimator_dtype(
                &cfg.flow,
                vb.pp("flow"),
                estimator_dtype,
            )?,
            mel2wav: HiFTGenerator::new(&cfg.mel2wav, vb.pp("mel2wav"))?,
            trim_fade: TrimFade::new(S3GEN_SR as usize, &device)?,
            mel: S3GenMel::new(S3GenMelConfig::default())?,
            resampler: SincResampler::new(S3GEN_SR, S3_SR)?,
            device,
        })
    }

    /// The speech tokenizer (also used for T3's prompt tokens and voice conversion).
    pub fn tokenizer(&self) -> &S3Tokenizer {
        &self.tokenizer
    }

    /// The x-vector speaker encoder (CAMPPlus).
    pub fn speaker_encoder(&self) -> &CAMPPlus {
        &self.speaker_encoder
    }

    /// The flow.
    pub fn flow(&self) -> &CausalMaskedDiffWithXvec {
        &self.flow
    }

    /// The vocoder.
    pub fn mel2wav(&self) -> &HiFTGenerator {
        &self.mel2wav
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether this is Turbo's meanflow S3Gen (2 steps, no guidance).
    pub fn meanflow(&self) -> bool {
        self.flow.config().meanflow()
    }

    /// `embed_ref(ref_wav, 24000)`: the reference voice of a 24 kHz clip (callers pass the first
    /// 10 s, [`DEC_COND_LEN`]): its 24 kHz mel, its x-vector and speech tokens from a 16 kHz
    /// copy made with torchaudio's sinc resampler (exactly as the reference).
    ///
    /// When the mel has more frames than twice the tokens, the reference keeps the longer mel
    /// and its flow misaligns prompt and tokens; this port cuts the mel to twice the tokens
    /// instead (logged). When it has fewer, the tokens are cut, as in the reference.
    pub fn embed_ref(&self, ref_wav_24k: &[f32]) -> Result<S3GenRef> {
        let _span = tracing::debug_span!("embed_ref", samples = ref_wav_24k.len()).entered();
        chatterbox_dsp::check_signal("reference clip", ref_wav_24k)?;
        if ref_wav_24k.iter().all(|&v| v == 0.0) {
            return Err(PipelineError::SilentAudio {
                what: "reference clip",
                len: ref_wav_24k.len(),
            });
        }
        if ref_wav_24k.len() > DEC_COND_LEN {
            tracing::warn!("s3gen received a reference longer than 10 s");
        }
        let mel = self.mel.compute(ref_wav_24k)?; // (80, frames)
        let (bins, frames) = mel.shape();
        let wav_16k = self.resampler.process(ref_wav_24k)?;
        let embedding = self.speaker_encoder.inference(&wav_16k, S3_SR)?;
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
            return Err(PipelineError::InvalidInput {
                what: "reference clip",
                reason: format!(
                    "{} samples give no speech token; use at least a second of speech",
                    ref_wav_24k.len()
                ),
            });
        }
        let n = tokens.len();
        let mel = Tensor::from_vec(mel.into_vec(), (bins, frames), &self.device)?
            .narrow(1, 0, keep_frames)?
            .t()?
            .unsqueeze(0)?;
        S3GenRef::new(
            Tensor::from_vec(tokens, (1, n), &self.device)?,
            mel,
            embedding,
            &self.device,
        )
    }

    /// `flow_inference`: the mel `(1, 80, 2 n)` of `speech_tokens` (every id below 6561) in the
    /// voice of `reference`. Draws the CFM noise (and meanflow's `noised_mels`) from `draws`.
    pub fn flow_inference(
        &self,
        speech_tokens: &[u32],
        reference: &S3GenRef,
        opts: &S3GenOptions,
        draws: &mut dyn Draws,
    ) -> Result<Tensor> {
        let _span = tracing::debug_span!("flow", tokens = speech_tokens.len()).entered();
        if speech_tokens.is_empty() {
            return Err(PipelineError::InvalidInput {
                what: "speech tokens",
                reason: "no tokens to synthesise".into(),
            });
        }
        let n = speech_tokens.len();
        let tokens = Tensor::from_slice(speech_tokens, (1, n), &self.device)?;
        let shape = self
            .flow
            .noise_shape(1, reference.n_prompt_tokens(), n, true);
        let noised_mels = if self.meanflow() {
            // `S3Token2Wav.flow_inference` draws these first.
            let ratio = self.flow.config().token_mel_ratio;
            Some(draws.noised_mels((1, shape.1, ratio * n), &self.device)?)
        } else {
            None
        };
        let noise = draws.cfm_noise(shape, &self.device)?;
        let mut flow_opts = FlowOptions::default();
        if let Some(steps) = opts.n_cfm_timesteps {
            flow_opts = flow_opts.with_n_timesteps(steps);
        }
        Ok(self.flow.inference(
            &tokens,
            &reference.flow_prompt(),
            &noise,
            noised_mels.as_ref(),
            &flow_opts,
        )?)
    }

    /// `hift_inference` followed by the trim-fade: mel `(1, 80, T)` to the waveform
    /// `(1, 480 T)`.
    pub fn hift_inference(&self, mel: &Tensor, draws: &mut dyn Draws) -> Result<Tensor> {
        let _span = tracing::debug_span!("hift").entered();
        let (b, _, t) = mel.dims3()?;
        let sine = draws.sine(
            b,
            self.mel2wav.m_source().sine_gen().harmonics(),
            t * self.mel2wav.config().samples_per_frame(),
            &self.device,
        )?;
        let (wav, _source) =
            self.mel2wav
                .inference_with_draws(&mel.to_dtype(DType::F32)?, &sine, None)?;
        Ok(self.trim_fade.forward(&wav)?)
    }

    /// `S3Token2Wav.inference(speech_tokens, ref_dict)`: flow, vocoder and trim-fade; returns
    /// the waveform `(1, 960 n)` at 24 kHz.
    pub fn inference(
        &self,
        speech_tokens: &[u32],
        reference: &S3GenRef,
        opts: &S3GenOptions,
        draws: &mut dyn Draws,
    ) -> Result<Tensor> {
        let mel = self.flow_inference(speech_tokens, reference, opts, draws)?;
        self.hift_inference(&mel, draws)
    }
}
