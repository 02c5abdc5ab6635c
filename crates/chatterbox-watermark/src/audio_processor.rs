//! Port of perth/perth_net/perth_net_implicit/audio_processor.py and the magnitude/phase helpers
//! of its utils.py (resemble-perth 1.0.1): torchaudio's `Spectrogram(power=None)` and
//! `InverseSpectrogram` (n_fft 2048, hop 320, periodic Hann, `center=True` with reflect padding,
//! `normalized=False`), through chatterbox-dsp's `Stft` / `Istft`; the magnitude as a normalised
//! log spectrogram (`cx_to_magphase`, `normalize`) and back (`denormalize_spectrogram`,
//! `magphase_to_cx`).
//!
//! All arithmetic is f32, in the reference's order: `20 * log10(max(|X|, 1e-9))`, then
//! `(db + 180) / 195`; back: `mag * 195 - 180`, `10 ^ min(db / 20, 10)` times `exp(i phase)`.
use crate::{PerthConfig, Result, WatermarkError};
use chatterbox_dsp::{window, Complex32, Istft, Spectrum, Stft};
use rayon::prelude::*;

/// STFT frames per parallel task.
const FRAMES_PER_RUN: usize = 32;
/// `headroom_db` of utils.py `normalize` / `denormalize_spectrogram`.
const HEADROOM_DB: f32 = 15.0;

/// A magnitude/phase spectrogram in torch's layout: `(n_freq, n_frames)`, frequency-major
/// (`mag[f * n_frames + t]`).
#[derive(Debug, Clone, PartialEq)]
pub struct MagPhase {
    /// Bins per frame, `n_fft / 2 + 1`.
    pub n_freq: usize,
    /// Frames.
    pub n_frames: usize,
    /// Normalised log magnitude: 0 at the 1e-9 floor, 1 at +15 dB.
    pub mag: Vec<f32>,
    /// Phase in radians, `atan2(im, re)`.
    pub phase: Vec<f32>,
}

/// `AudioProcessor` (audio_processor.py): the STFT pair of a [`PerthConfig`].
#[derive(Debug, Clone)]
pub struct AudioProcessor {
    stft: Stft,
    istft: Istft,
    n_fft: usize,
    hop: usize,
    /// `20 * log10(stft_magnitude_min)` (utils.py `min_level_db`), -180 for 1e-9.
    min_level_db: f32,
    magnitude_min: f32,
    sample_rate: u32,
}

impl AudioProcessor {
    /// Plans the STFT and its inverse.
    pub fn new(cfg: &PerthConfig) -> Result<Self> {
        cfg.validate()?;
        let win = window::hann(cfg.window_size, true);
        let stft = Stft::new(cfg.n_fft, cfg.hop_size, &win, true)?;
        let istft = Istft::new(cfg.n_fft, cfg.hop_size, &win, true)?;
        Ok(Self {
            stft,
            istft,
            n_fft: cfg.n_fft,
            hop: cfg.hop_size,
            // numpy computes 20 * np.log10(min) in f64; torch casts the scalar to f32
            min_level_db: (20.0 * cfg.stft_magnitude_min.log10()) as f32,
            magnitude_min: cfg.stft_magnitude_min as f32,
            sample_rate: cfg.sample_rate,
        })
    }

    /// The fewest samples the STFT accepts: its reflect padding of `n_fft / 2` needs a longer
    /// signal (1025 samples at 32 kHz for the shipped model).
    pub fn min_signal_len(&self) -> usize {
        self.n_fft / 2 + 1
    }

    /// Frames for `n` samples: `1 + n / hop`.
    pub fn num_frames(&self, n: usize) -> usize {
        1 + n / self.hop
    }

    /// Samples [`AudioProcessor::magphase_to_signal`] returns for `n_frames` frames:
    /// `hop * (n_frames - 1)` (the input length rounded down to a whole hop).
    pub fn output_len(&self, n_frames: usize) -> usize {
        self.istft.output_len(n_frames)
    }

    /// `signal_to_magphase`: the normalised log magnitude and the phase of `signal`'s STFT.
    pub fn signal_to_magphase(&self, signal: &[f32]) -> Result<MagPhase> {
        self.analyse(signal, true)
    }

    /// The magnitude half of [`AudioProcessor::signal_to_magphase`] (what the detector
    /// reads); `phase` is left empty.
    pub fn signal_to_magnitude(&self, signal: &[f32]) -> Result<MagPhase> {
        self.analyse(signal, false)
    }

    fn analyse(&self, signal: &[f32], with_phase: bool) -> Result<MagPhase> {
        check_signal("signal_to_magphase", signal)?;
        if signal.len() < self.min_signal_len() {
            return Err(WatermarkError::SignalTooShort {
                what: "signal_to_magphase",
                len: signal.len(),
                sample_rate: self.sample_rate,
                min: self.min_signal_len(),
            });
        }
        let n_freq = self.n_fft / 2 + 1;
        let scale = -self.min_level_db + HEADROOM_DB;
        let (floor, min_db) = (self.magnitude_min, self.min_level_db);
        // frames in runs on rayon's threads; each run's (mag, phase), frame-major
        let runs = self.stft.par_frame_runs(
            signal,
            FRAMES_PER_RUN,
            |n| {
                let phase = if with_phase { n * n_freq } else { 0 };
                (Vec::with_capacity(n * n_freq), Vec::with_capacity(phase))
            },
            |(mag, phase): &mut (Vec<f32>, Vec<f32>), _, bins: &[Complex32]| {
                for c in bins {
                    // |z| as torch's vectorised complex abs computes it: sqrt(re^2 + im^2)
                    let abs = (c.re * c.re + c.im * c.im).sqrt();
                    let db = 20.0 * abs.max(floor).log10();
                    mag.push((db - min_db) / scale);
                    if with_phase {
                        phase.push(c.im.atan2(c.re));
                    }
                }
            },
        )?;
        let n_frames = runs.iter().map(|(m, _)| m.len() / n_freq).sum::<usize>();
        let mut mag = vec![0f32; n_freq * n_frames];
        let mut phase = vec![0f32; if with_phase { n_freq * n_frames } else { 0 }];
        let mut t0 = 0;
        for (m, p) in &runs {
            let frames = m.len() / n_freq;
            for i in 0..frames {
                for f in 0..n_freq {
                    mag[f * n_frames + t0 + i] = m[i * n_freq + f];
                    if with_phase {
                        phase[f * n_frames + t0 + i] = p[i * n_freq + f];
                    }
                }
            }
            t0 += frames;
        }
        Ok(MagPhase {
            n_freq,
            n_frames,
            mag,
            phase,
        })
    }

    /// `magphase_to_signal`: the inverse STFT of `10^(db / 20) * exp(i phase)`. Both inputs are
    /// `(n_freq, n_frames)` frequency-major.
    pub fn magphase_to_signal(&self, mp: &MagPhase) -> Result<Vec<f32>> {
        let n_freq = self.n_fft / 2 + 1;
        let len = mp.n_freq * mp.n_frames;
        if mp.n_freq != n_freq || mp.n_frames == 0 || mp.mag.len() != len || mp.phase.len() != len {
            return Err(WatermarkError::InvalidInput {
                what: "magphase_to_signal",
                reason: format!(
                    "expected {n_freq} bins x n_frames > 0 with equal magnitude and phase \
                     lengths, got {} x {} ({} magnitudes, {} phases)",
                    mp.n_freq,
                    mp.n_frames,
                    mp.mag.len(),
                    mp.phase.len()
                ),
            });
        }
        let scale = -self.min_level_db + HEADROOM_DB;
        let mut data = vec![Complex32::new(0.0, 0.0); len];
        let (n_frames, min_db) = (mp.n_frames, self.min_level_db);
        data.par_chunks_mut(n_freq)
            .enumerate()
            .for_each(|(t, frame)| {
                for (f, z) in frame.iter_mut().enumerate() {
                    let i = f * n_frames + t;
                    let db = mp.mag[i] * scale + min_db;
                    let m = 10f32.powf((db / 20.0).min(10.0));
                    let (s, c) = mp.phase[i].sin_cos();
                    *z = Complex32::new(m * c, m * s);
                }
            });
        let spec = Spectrum {
            n_freq,
            n_frames: mp.n_frames,
            data,
        };
        Ok(self.istft.process(&spec)?)
    }
}

/// Rejects empty and non-finite signals, naming the operation.
pub(crate) fn check_signal(what: &'static str, x: &[f32]) -> Result<()> {
    if x.is_empty() {
        return Err(WatermarkError::EmptySignal { what });
    }
    if let Some((index, &value)) = x.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(WatermarkError::NonFinite { what, index, value });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| 0.3 * (i as f32 * 0.05).sin() + 0.1 * (i as f32 * 0.31).cos())
            .collect()
    }

    #[test]
    fn round_trip_gives_back_the_signal_cut_to_whole_hops() {
        let ap = AudioProcessor::new(&PerthConfig::implicit()).unwrap();
        let x = tone(5000);
        let mp = ap.signal_to_magphase(&x).unwrap();
        assert_eq!((mp.n_freq, mp.n_frames), (1025, 1 + 5000 / 320));
        let y = ap.magphase_to_signal(&mp).unwrap();
        assert_eq!(y.len(), 15 * 320);
        let err = y
            .iter()
            .zip(&x)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(err < 1e-5, "round trip error {err}");
    }

    #[test]
    fn silence_sits_at_zero_and_the_floor_is_kept() {
        let ap = AudioProcessor::new(&PerthConfig::implicit()).unwrap();
        let mp = ap.signal_to_magphase(&vec![0f32; 2000]).unwrap();
        assert!(mp.mag.iter().all(|&m| m == 0.0));
    }

    #[test]
    fn rejects_short_empty_and_nan_signals() {
        let ap = AudioProcessor::new(&PerthConfig::implicit()).unwrap();
        assert_eq!(ap.min_signal_len(), 1025);
        assert!(matches!(
            ap.signal_to_magphase(&[0.1; 1024]),
            Err(WatermarkError::SignalTooShort {
                len: 1024,
                min: 1025,
                ..
            })
        ));
        assert!(ap.signal_to_magphase(&[0.1; 1025]).is_ok());
        assert!(matches!(
            ap.signal_to_magphase(&[]),
            Err(WatermarkError::EmptySignal { .. })
        ));
        let mut x = tone(2000);
        x[7] = f32::NAN;
        assert!(matches!(
            ap.signal_to_magphase(&x),
            Err(WatermarkError::NonFinite { index: 7, .. })
        ));
    }
}
