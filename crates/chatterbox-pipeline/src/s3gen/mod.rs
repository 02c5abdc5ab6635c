//! S3Gen: speech tokens plus a reference voice to 24 kHz audio. Port of `S3Token2Mel` and
//! `S3Token2Wav` in chatterbox/models/s3gen/s3gen.py (upstream 5de7a54), composed from the
//! component crates:
//!
//! ```text
//! S3Gen
//! ├── reference         RefEncoder (chatterbox-s3gen): embed_ref, the reference voice
//! │   ├── tokenizer         S3Tokenizer                      prompt tokens
//! │   └── speaker_encoder   CAMPPlus (chatterbox-speaker)    x-vector
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
use chatterbox_s3gen::flow::{CausalMaskedDiffWithXvec, FlowOptions};
use chatterbox_s3gen::tokenizer::S3Tokenizer;
use chatterbox_s3gen::{RefEncoder, RefEncoderConfig, S3GenError};
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

impl S3GenOptions {
    /// Sets [`S3GenOptions::n_cfm_timesteps`].
    pub fn with_n_cfm_timesteps(mut self, steps: Option<usize>) -> Self {
        self.n_cfm_timesteps = steps;
        self
    }
}

/// `S3Token2Wav`: the reference-voice encoder, the token-to-mel flow and the HiFT vocoder.
///
/// Weights are the `tokenizer.*`, `speaker_encoder.*`, `flow.*` and `mel2wav.*` tensors of
/// `s3gen.safetensors`, `s3gen.pt` or `s3gen_meanflow.safetensors`. Everything runs in f32
/// except the flow's estimator, which may run in another float type.
#[derive(Debug, Clone)]
pub struct S3Gen {
    reference: RefEncoder,
    flow: CausalMaskedDiffWithXvec,
    mel2wav: HiFTGenerator,
    trim_fade: TrimFade,
    device: Device,
}

impl S3Gen {
    /// Builds S3Gen from `vb` (f32; the root of an S3Gen checkpoint), running the flow's
    /// estimator in `estimator_dtype`.
    pub fn new(cfg: &S3GenConfig, vb: VarBuilder, estimator_dtype: DType) -> Result<Self> {
        let device = vb.device().clone();
        Ok(Self {
            reference: RefEncoder::new(
                &RefEncoderConfig {
                    tokenizer: cfg.tokenizer.clone(),
                    speaker_encoder: cfg.speaker_encoder.clone(),
                },
                vb.clone(),
            )?,
            flow: CausalMaskedDiffWithXvec::new_with_estimator_dtype(
                &cfg.flow,
                vb.pp("flow"),
                estimator_dtype,
            )?,
            mel2wav: HiFTGenerator::new(&cfg.mel2wav, vb.pp("mel2wav"))?,
            trim_fade: TrimFade::new(S3GEN_SR as usize, &device)?,
            device,
        })
    }

    /// The speech tokenizer (also used for T3's prompt tokens and voice conversion).
    pub fn tokenizer(&self) -> &S3Tokenizer {
        self.reference.tokenizer()
    }

    /// The x-vector speaker encoder (CAMPPlus).
    pub fn speaker_encoder(&self) -> &CAMPPlus {
        self.reference.speaker_encoder()
    }

    /// The reference-voice encoder (`embed_ref` from the tokenizer, CAMPPlus and the mel).
    pub fn reference_encoder(&self) -> &RefEncoder {
        &self.reference
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
        let p = self
            .reference
            .embed_ref(ref_wav_24k, S3GEN_SR)
            .map_err(|e| match e {
                S3GenError::SilentAudio { what, len } => PipelineError::SilentAudio { what, len },
                S3GenError::InvalidInput { what, reason } => {
                    PipelineError::InvalidInput { what, reason }
                }
                S3GenError::Dsp(e) => PipelineError::Dsp(e),
                S3GenError::Speaker(e) => PipelineError::Speaker(*e),
                e => PipelineError::S3Gen(e),
            })?;
        S3GenRef::new(p.prompt_token, p.prompt_feat, p.embedding, &self.device)
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
