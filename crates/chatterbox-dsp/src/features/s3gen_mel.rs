//! Port of `mel_spectrogram` in chatterbox/models/s3gen/utils/mel.py (upstream 5de7a54), the
//! Matcha-TTS log-magnitude mel of S3Gen's 24 kHz prompt and decoder output.
use crate::error::Result;
use crate::stft::reflect_pad;
use crate::{window, Matrix, MelFilterbank, Stft};

/// Hyper-parameters of [`S3GenMel`]; `Default` is the reference's (CosyVoice) configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct S3GenMelConfig {
    /// FFT size. Default: `1920`.
    pub n_fft: usize,
    /// Mel bins. Default: `80`.
    pub num_mels: usize,
    /// Sample rate in Hz. Default: `24000`.
    pub sampling_rate: u32,
    /// Hop in samples. Default: `480`.
    pub hop_size: usize,
    /// Window length. Default: `1920`.
    pub win_size: usize,
    /// Lowest mel frequency. Default: `0`.
    pub fmin: f64,
    /// Highest mel frequency. Default: `8000`.
    pub fmax: f64,
}

with_setters!(S3GenMelConfig {
    with_n_fft => n_fft: usize,
    with_num_mels => num_mels: usize,
    with_sampling_rate => sampling_rate: u32,
    with_hop_size => hop_size: usize,
    with_win_size => win_size: usize,
    with_fmin => fmin: f64,
    with_fmax => fmax: f64,
});

impl S3GenMelConfig {
    /// The sample rate in Hz: [`sampling_rate`](Self::sampling_rate) (the Python name) under
    /// the name the other configurations use.
    pub fn sample_rate(&self) -> u32 {
        self.sampling_rate
    }
}

impl Default for S3GenMelConfig {
    fn default() -> Self {
        Self {
            n_fft: 1920,
            num_mels: 80,
            sampling_rate: 24000,
            hop_size: 480,
            win_size: 1920,
            fmin: 0.0,
            fmax: 8000.0,
        }
    }
}

/// S3Gen's mel spectrogram: reflect-pad `(n_fft - hop) / 2` on both sides, STFT without
/// centring (periodic Hann), magnitude `sqrt(re^2 + im^2 + 1e-9)`, Slaney mel, natural log of
/// the value clamped at `1e-5`.
///
/// Output layout: `(num_mels, n_frames)` with `n_frames = 1 + (len - hop) / hop` (500 frames for
/// 10 s at 24 kHz). Input samples are expected in `[-1, 1]`; like the reference, louder input is
/// processed as is.
#[derive(Debug, Clone)]
pub struct S3GenMel {
    cfg: S3GenMelConfig,
    stft: Stft,
    mel: MelFilterbank,
}

impl S3GenMel {
    /// Plans the transform for `cfg`.
    pub fn new(cfg: S3GenMelConfig) -> Result<Self> {
        let stft = Stft::new(
            cfg.n_fft,
            cfg.hop_size,
            &window::hann(cfg.win_size, true),
            false,
        )?;
        let mel = MelFilterbank::new(
            cfg.sampling_rate,
            cfg.n_fft,
            cfg.num_mels,
            cfg.fmin,
            Some(cfg.fmax),
        )?;
        Ok(Self { cfg, stft, mel })
    }

    /// The configuration.
    pub fn config(&self) -> &S3GenMelConfig {
        &self.cfg
    }

    /// Frames produced for `n` samples.
    pub fn num_frames(&self, n: usize) -> usize {
        self.stft
            .num_frames(n + 2 * ((self.cfg.n_fft - self.cfg.hop_size) / 2))
    }

    /// Computes the log mel of `wav` (mono, at `sampling_rate`).
    pub fn compute(&self, wav: &[f32]) -> Result<Matrix> {
        crate::error::check_signal("s3gen mel input", wav)?;
        let pad = (self.cfg.n_fft - self.cfg.hop_size) / 2;
        let padded = reflect_pad("s3gen mel input", wav, pad)?;
        let n_frames = self.stft.num_frames(padded.len());
        let mut out = Matrix::zeros(self.mel.n_mels(), n_frames);
        let mut mag = vec![0f32; self.stft.n_freq()];
        let used = self.mel.used_bins();
        self.stft.for_each_frame(&padded, |t, bins| {
            // bins above the last filter's span never reach the output
            for (m, b) in mag[..used].iter_mut().zip(bins) {
                *m = (b.re * b.re + b.im * b.im + 1e-9).sqrt();
            }
            self.mel.apply_to_column(&mag, &mut out, t);
        })?;
        crate::math::ln_clamped(out.as_mut_slice(), 1e-5);
        Ok(out)
    }
}
