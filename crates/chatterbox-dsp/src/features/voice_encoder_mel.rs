//! Port of `melspectrogram` in chatterbox/models/voice_encoder/melspec.py (upstream 5de7a54):
//! the VoiceEncoder's 40-bin power mel (librosa STFT, no log).
use crate::error::{invalid, Result};
use crate::{window, Matrix, MelFilterbank, Stft};

/// The `VoiceEncConfig` fields the mel uses; `Default` is the reference's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceEncoderMelConfig {
    /// Mel bins. Default: `40`.
    pub num_mels: usize,
    /// Sample rate in Hz. Default: `16000`.
    pub sample_rate: u32,
    /// FFT size. Default: `400`.
    pub n_fft: usize,
    /// Hop in samples. Default: `160`.
    pub hop_size: usize,
    /// Window length. Default: `400`.
    pub win_size: usize,
    /// Lowest mel frequency. Default: `0`.
    pub fmin: f64,
    /// Highest mel frequency. Default: `8000`.
    pub fmax: f64,
    /// Exponent applied to the magnitude (2 = power). Default: `2.0`.
    pub mel_power: f32,
}

with_setters!(VoiceEncoderMelConfig {
    with_num_mels => num_mels: usize,
    with_sample_rate => sample_rate: u32,
    with_n_fft => n_fft: usize,
    with_hop_size => hop_size: usize,
    with_win_size => win_size: usize,
    with_fmin => fmin: f64,
    with_fmax => fmax: f64,
    with_mel_power => mel_power: f32,
});

impl Default for VoiceEncoderMelConfig {
    fn default() -> Self {
        Self {
            num_mels: 40,
            sample_rate: 16000,
            n_fft: 400,
            hop_size: 160,
            win_size: 400,
            fmin: 0.0,
            fmax: 8000.0,
            mel_power: 2.0,
        }
    }
}

/// The VoiceEncoder's mel spectrogram: centred STFT with reflect padding (periodic Hann),
/// `|X|^mel_power`, Slaney mel. `preemphasis = 0`, `mel_type = "amp"` and
/// `normalized_mels = False` in the reference configuration, so there is no log.
///
/// Output layout: `(num_mels, n_frames)` with `n_frames = 1 + len / hop`, as the reference
/// returns it (the VoiceEncoder transposes it to `(n_frames, num_mels)`).
#[derive(Debug, Clone)]
pub struct VoiceEncoderMel {
    cfg: VoiceEncoderMelConfig,
    stft: Stft,
    mel: MelFilterbank,
}

impl VoiceEncoderMel {
    /// Plans the transform for `cfg`.
    pub fn new(cfg: VoiceEncoderMelConfig) -> Result<Self> {
        if cfg.fmax > (cfg.sample_rate / 2) as f64 {
            return Err(invalid("fmax", "must not exceed half the sample rate"));
        }
        let stft = Stft::new(
            cfg.n_fft,
            cfg.hop_size,
            &window::hann(cfg.win_size, true),
            true,
        )?;
        let mel = MelFilterbank::new(
            cfg.sample_rate,
            cfg.n_fft,
            cfg.num_mels,
            cfg.fmin,
            Some(cfg.fmax),
        )?;
        Ok(Self { cfg, stft, mel })
    }

    /// The configuration.
    pub fn config(&self) -> &VoiceEncoderMelConfig {
        &self.cfg
    }

    /// Computes the mel of `wav` (mono, at `sample_rate`).
    pub fn compute(&self, wav: &[f32]) -> Result<Matrix> {
        let n_frames = self.stft.num_frames(wav.len());
        let mut out = Matrix::zeros(self.mel.n_mels(), n_frames);
        let mut mag = vec![0f32; self.stft.n_freq()];
        let power = self.cfg.mel_power;
        let used = self.mel.used_bins();
        self.stft.for_each_frame(wav, |t, bins| {
            let bins = &bins[..used];
            if power == 2.0 {
                for (m, b) in mag.iter_mut().zip(bins) {
                    *m = b.re * b.re + b.im * b.im;
                }
            } else {
                for (m, b) in mag.iter_mut().zip(bins) {
                    *m = b.norm().powf(power);
                }
            }
            self.mel.apply_to_column(&mag, &mut out, t);
        })?;
        Ok(out)
    }
}
