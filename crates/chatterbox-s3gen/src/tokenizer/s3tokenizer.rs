//! Port of chatterbox/models/s3tokenizer/s3tokenizer.py (upstream 5de7a54): `S3Tokenizer`, the
//! wrapper chatterbox calls: 16 kHz audio -> log mel -> `max_len` truncation -> padded batch ->
//! [`S3TokenizerV2::quantize`].
use super::config::ModelConfig;
use super::model::{S3TokenizerV2, SpeechTokens};
use super::utils::padding;
use super::weights;
use crate::{Result, S3GenError};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_dsp::features::S3TokenizerMel;

/// Sample rate of the tokenizer's input.
pub const S3_SR: u32 = 16_000;
/// Mel hop in samples (100 frames per second).
pub const S3_HOP: usize = 160;
/// Samples per token (25 tokens per second).
pub const S3_TOKEN_HOP: usize = 640;
/// Tokens per second.
pub const S3_TOKEN_RATE: usize = 25;
/// Number of speech tokens (FSQ codes).
pub const SPEECH_VOCAB_SIZE: usize = 6561;
/// Mel frames per token: `max_len` tokens keep `4 * max_len` frames.
const MEL_FRAMES_PER_TOKEN: usize = 4;
const N_FFT: usize = 400;

/// chatterbox's speech tokenizer: `S3TokenizerV2` plus its 128-bin log mel front end.
///
/// The reference registers the mel filterbank and the Hann window as buffers (`_mel_filters`,
/// `window`); real checkpoints may lack them. They are computed here (chatterbox-dsp) and, when
/// a checkpoint has them, checked against the computed ones.
///
/// <https://github.com/resemble-ai/chatterbox/blob/5de7a54/src/chatterbox/models/s3tokenizer/s3tokenizer.py>
/// `S3Tokenizer`
#[derive(Debug, Clone)]
pub struct S3Tokenizer {
    model: S3TokenizerV2,
    mel: S3TokenizerMel,
    device: Device,
    dtype: DType,
}

impl S3Tokenizer {
    /// Loads the tokenizer from `vb` at its prefix (`vb.pp("tokenizer")` for
    /// `s3gen.safetensors`). Chatterbox always uses [`ModelConfig::v2_25hz`].
    pub fn new(cfg: &ModelConfig, vb: VarBuilder) -> Result<Self> {
        let model = S3TokenizerV2::new(cfg, vb.clone())?;
        let mel = S3TokenizerMel::new(cfg.n_mels)?;
        if vb.contains_tensor("_mel_filters") {
            let fb = mel.filterbank().to_dense();
            let (rows, cols) = fb.shape();
            let got = weights::tensor(&vb, "_mel_filters", &[rows, cols])?;
            check_buffer(&vb, "_mel_filters", &got, fb.as_slice())?;
        }
        if vb.contains_tensor("window") {
            let got = weights::tensor(&vb, "window", &[N_FFT])?;
            check_buffer(
                &vb,
                "window",
                &got,
                &chatterbox_dsp::window::hann(N_FFT, true),
            )?;
        }
        Ok(Self {
            model,
            mel,
            device: vb.device().clone(),
            dtype: vb.dtype(),
        })
    }

    /// The encoder and quantiser.
    pub fn model(&self) -> &S3TokenizerV2 {
        &self.model
    }

    /// The device the weights live on (and the tokens come out on).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `pad`: `wav` (at `sr` Hz) zero-padded to a whole number of 40 ms tokens, with the
    /// reference's float arithmetic: `int(ceil(len / sr * 25) * (sr / 25))` samples. That
    /// rounding gives some exact multiples one extra token (4480 samples at 16 kHz become
    /// 5120), and a result shorter than `wav` crops it, as `F.pad` with a negative pad does.
    /// A sample rate of 0 is an error.
    pub fn pad(wav: &[f32], sr: u32) -> Result<Vec<f32>> {
        if sr == 0 {
            return Err(S3GenError::InvalidInput {
                what: "sample rate",
                reason: "0 Hz".into(),
            });
        }
        let sr = f64::from(sr);
        let n_tokens = (wav.len() as f64 / sr * S3_TOKEN_RATE as f64).ceil();
        let intended = (n_tokens * (sr / S3_TOKEN_RATE as f64)) as usize;
        let mut out = wav[..intended.min(wav.len())].to_vec();
        out.resize(intended, 0.0);
        Ok(out)
    }

    /// `log_mel_spectrogram`: the `(n_mels, frames)` log mel of 16 kHz `wav` (100 frames per
    /// second), on the tokenizer's device.
    pub fn log_mel_spectrogram(&self, wav: &[f32]) -> Result<Tensor> {
        chatterbox_dsp::check_signal("S3Tokenizer input", wav)?;
        let m = self.mel.compute(wav)?;
        let (rows, cols) = m.shape();
        Ok(Tensor::from_vec(m.into_vec(), (rows, cols), &self.device)?.to_dtype(self.dtype)?)
    }

    /// The mel batch `forward` feeds to the model: each clip's log mel (normalised on its own),
    /// cut to `4 * max_len` frames, zero-padded to the longest: `(batch, n_mels, frames)` and
    /// the frame counts.
    pub fn mel_batch(
        &self,
        wavs: &[&[f32]],
        sample_rate: u32,
        max_len: Option<usize>,
    ) -> Result<(Tensor, Vec<usize>)> {
        if sample_rate != S3_SR {
            return Err(S3GenError::UnsupportedSampleRate {
                what: "S3Tokenizer input",
                got: sample_rate,
                expected: S3_SR,
            });
        }
        if wavs.is_empty() {
            return Err(S3GenError::InvalidInput {
                what: "S3Tokenizer input",
                reason: "no audio clips".into(),
            });
        }
        if max_len == Some(0) {
            return Err(S3GenError::InvalidInput {
                what: "max_len",
                reason: "must be at least 1 token".into(),
            });
        }
        let mut mels = Vec::with_capacity(wavs.len());
        for (i, wav) in wavs.iter().enumerate() {
            chatterbox_dsp::check_signal(&format!("S3Tokenizer input {i}"), wav)?;
            let m = self.mel.compute(wav)?;
            let (n_mels, frames) = m.shape();
            let keep = max_len.map_or(frames, |l| frames.min(l * MEL_FRAMES_PER_TOKEN));
            if keep == frames {
                mels.push((m.into_vec(), frames));
            } else {
                let mut cut = Vec::with_capacity(n_mels * keep);
                for r in 0..n_mels {
                    cut.extend_from_slice(&m.row(r)[..keep]);
                }
                mels.push((cut, keep));
            }
        }
        let (mel, lens) = padding(&mels, self.model.config().n_mels, &self.device)?;
        Ok((mel.to_dtype(self.dtype)?, lens))
    }

    /// `forward(wavs, max_len=...)`: speech tokens of 16 kHz clips (`sample_rate` must be
    /// 16000), at most `max_len` per clip. Each row of the result holds one clip's tokens,
    /// zero-padded past its length (see [`SpeechTokens`]).
    pub fn forward(
        &self,
        wavs: &[&[f32]],
        sample_rate: u32,
        max_len: Option<usize>,
    ) -> Result<SpeechTokens> {
        let (mel, lens) = self.mel_batch(wavs, sample_rate, max_len)?;
        self.model.quantize(&mel, &lens)
    }
}

/// Fails when a checkpoint buffer differs from the value computed for it (beyond f32
/// rounding), since the log mel is computed from the latter.
fn check_buffer(vb: &VarBuilder, name: &str, got: &Tensor, expected: &[f32]) -> Result<()> {
    let got = got.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let peak = expected.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = got
        .iter()
        .zip(expected)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    if diff > 1e-5 * peak {
        return Err(S3GenError::InvalidInput {
            what: "checkpoint buffer",
            reason: format!(
                "{}.{name} differs from the computed one by {diff:e} (peak {peak:e}); this \
                 port computes it and cannot use a different one",
                vb.prefix()
            ),
        });
    }
    Ok(())
}
