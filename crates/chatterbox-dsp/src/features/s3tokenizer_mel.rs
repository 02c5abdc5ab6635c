//! Port of `S3Tokenizer.log_mel_spectrogram` in chatterbox/models/s3tokenizer/s3tokenizer.py
//! (upstream 5de7a54): the whisper-style 128-bin log mel of the speech tokenizer.
use crate::error::Result;
use crate::{window, Matrix, MelFilterbank, Stft};

/// Sample rate of the speech tokenizer's input.
pub const S3_SR: u32 = 16_000;
const N_FFT: usize = 400;
const HOP: usize = 160;

/// The speech tokenizer's log mel: centred STFT (n_fft 400, hop 160, periodic Hann, reflect),
/// the last frame dropped, power spectrum, Slaney mel (`n_mels`, fmax 8 kHz),
/// `log10(max(x, 1e-10))`, floored at `max - 8` over the whole utterance, then `(x + 4) / 4`.
///
/// Output layout: `(n_mels, n_frames)` with `n_frames = len / 160` (100 frames per second).
#[derive(Debug, Clone)]
pub struct S3TokenizerMel {
    stft: Stft,
    mel: MelFilterbank,
}

impl S3TokenizerMel {
    /// Plans the transform with `n_mels` bins (128 for S3TokenizerV2).
    pub fn new(n_mels: usize) -> Result<Self> {
        Ok(Self {
            stft: Stft::new(N_FFT, HOP, &window::hann(N_FFT, true), true)?,
            mel: MelFilterbank::new(S3_SR, N_FFT, n_mels, 0.0, None)?,
        })
    }

    /// The filterbank (the reference keeps it as the `_mel_filters` buffer).
    pub fn filterbank(&self) -> &MelFilterbank {
        &self.mel
    }

    /// Frames produced for `n` samples.
    pub fn num_frames(&self, n: usize) -> usize {
        self.stft.num_frames(n).saturating_sub(1)
    }

    /// Computes the log mel of `wav` (mono, 16 kHz).
    pub fn compute(&self, wav: &[f32]) -> Result<Matrix> {
        let n_frames = self.num_frames(wav.len());
        let mut out = Matrix::zeros(self.mel.n_mels(), n_frames);
        let mut power = vec![0f32; self.stft.n_freq()];
        let used = self.mel.used_bins();
        self.stft.for_each_frame(wav, |t, bins| {
            if t < n_frames {
                for (p, b) in power.iter_mut().zip(&bins[..used]) {
                    *p = b.re * b.re + b.im * b.im;
                }
                self.mel.apply_to_column(&power, &mut out, t);
            }
        })?;
        let data = out.as_mut_slice();
        crate::math::log10_clamped(data, 1e-10);
        let floor = data.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) - 8.0;
        for v in data.iter_mut() {
            *v = (v.max(floor) + 4.0) / 4.0;
        }
        Ok(out)
    }
}
