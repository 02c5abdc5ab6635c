//! Port of `fbank` in torchaudio/compliance/kaldi.py (torchaudio 2.6), the Kaldi filterbank
//! features CAMPPlus consumes (chatterbox/models/s3gen/xvector.py `extract_feature`).
use crate::error::{check_signal, invalid, DspError, Result};
use crate::{window, Matrix};
use realfft::{RealFftPlanner, RealToComplex};
use std::sync::Arc;

/// Window applied to each frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FbankWindow {
    /// Symmetric Hann raised to 0.85 (Kaldi's default).
    Povey,
    /// Symmetric Hann.
    Hanning,
    /// Symmetric Hamming (0.54 / 0.46).
    Hamming,
    /// No window.
    Rectangular,
}

/// Options of [`KaldiFbank`], named after torchaudio's arguments. `Default` is torchaudio's
/// defaults; frames are always taken with `snip_edges = True` and without dither (torchaudio's
/// defaults), and energy features are not produced.
#[derive(Debug, Clone, PartialEq)]
pub struct FbankOptions {
    /// Sample rate in Hz. Default: `16000`.
    pub sample_frequency: f32,
    /// Frame length in milliseconds. Default: `25`.
    pub frame_length_ms: f32,
    /// Frame shift in milliseconds. Default: `10`.
    pub frame_shift_ms: f32,
    /// Number of triangular mel bins. Default: `23` (CAMPPlus uses 80).
    pub num_mel_bins: usize,
    /// Low cut-off of the mel bins in Hz. Default: `20`.
    pub low_freq: f32,
    /// High cut-off in Hz; `<= 0` is an offset from the Nyquist frequency. Default: `0`.
    pub high_freq: f32,
    /// Pre-emphasis coefficient. Default: `0.97`.
    pub preemphasis_coefficient: f32,
    /// Subtract each frame's mean before processing. Default: `true`.
    pub remove_dc_offset: bool,
    /// Frame window. Default: `Povey`.
    pub window_type: FbankWindow,
    /// Zero-pad frames to the next power of two for the FFT. Default: `true`.
    pub round_to_power_of_two: bool,
    /// Power spectrum (else magnitude). Default: `true`.
    pub use_power: bool,
    /// Natural log of the mel energies, floored at f32 epsilon. Default: `true`.
    pub use_log_fbank: bool,
    /// Subtract the per-bin mean over all frames (CAMPPlus's normalisation). Default: `false`.
    pub subtract_mean: bool,
}

with_setters!(FbankOptions {
    with_sample_frequency => sample_frequency: f32,
    with_frame_length_ms => frame_length_ms: f32,
    with_frame_shift_ms => frame_shift_ms: f32,
    with_num_mel_bins => num_mel_bins: usize,
    with_low_freq => low_freq: f32,
    with_high_freq => high_freq: f32,
    with_preemphasis_coefficient => preemphasis_coefficient: f32,
    with_remove_dc_offset => remove_dc_offset: bool,
    with_window_type => window_type: FbankWindow,
    with_round_to_power_of_two => round_to_power_of_two: bool,
    with_use_power => use_power: bool,
    with_use_log_fbank => use_log_fbank: bool,
    with_subtract_mean => subtract_mean: bool,
});

impl Default for FbankOptions {
    fn default() -> Self {
        Self {
            sample_frequency: 16000.0,
            frame_length_ms: 25.0,
            frame_shift_ms: 10.0,
            num_mel_bins: 23,
            low_freq: 20.0,
            high_freq: 0.0,
            preemphasis_coefficient: 0.97,
            remove_dc_offset: true,
            window_type: FbankWindow::Povey,
            round_to_power_of_two: true,
            use_power: true,
            use_log_fbank: true,
            subtract_mean: false,
        }
    }
}

impl FbankOptions {
    /// The features CAMPPlus computes: 80 bins, then per-utterance mean subtraction.
    pub fn campplus() -> Self {
        Self {
            num_mel_bins: 80,
            subtract_mean: true,
            ..Self::default()
        }
    }
}

/// Kaldi filterbank features (`torchaudio.compliance.kaldi.fbank`).
///
/// Output layout: `(n_frames, num_mel_bins)` with `n_frames = 1 + (len - frame_length) /
/// frame_shift` (snip edges); input in `[-1, 1]` as the reference passes it.
#[derive(Clone)]
pub struct KaldiFbank {
    opts: FbankOptions,
    window_size: usize,
    window_shift: usize,
    padded: usize,
    window: Vec<f32>,
    /// Per bin: first FFT bin and weights.
    banks: Vec<(usize, Vec<f32>)>,
    fft: Arc<dyn RealToComplex<f32>>,
}

impl std::fmt::Debug for KaldiFbank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KaldiFbank")
            .field("opts", &self.opts)
            .finish()
    }
}

fn mel_scale(f: f32) -> f32 {
    1127.0f32 * (1.0f32 + f / 700.0f32).ln()
}

/// torchaudio's `get_mel_banks` (no VTLN warp), computed in float32 as torch does.
fn mel_banks(
    num_bins: usize,
    padded: usize,
    sample_freq: f32,
    low: f32,
    high: f32,
) -> Vec<(usize, Vec<f32>)> {
    let nyquist = 0.5 * sample_freq as f64;
    let high = if high <= 0.0 {
        high as f64 + nyquist
    } else {
        high as f64
    };
    let fft_bin_width = sample_freq as f64 / padded as f64;
    let mel = |f: f64| 1127.0 * (1.0 + f / 700.0).ln();
    let mel_low = mel(low as f64);
    let mel_high = mel(high);
    let delta = ((mel_high - mel_low) / (num_bins + 1) as f64) as f32;
    let low32 = mel_low as f32;
    let num_fft_bins = padded / 2;
    let bin_mel: Vec<f32> = (0..num_fft_bins)
        .map(|k| mel_scale(fft_bin_width as f32 * k as f32))
        .collect();
    (0..num_bins)
        .map(|i| {
            let left = low32 + i as f32 * delta;
            let center = low32 + (i as f32 + 1.0) * delta;
            let right = low32 + (i as f32 + 2.0) * delta;
            let row: Vec<f32> = bin_mel
                .iter()
                .map(|&m| {
                    let up = (m - left) / (center - left);
                    let down = (right - m) / (right - center);
                    0f32.max(up.min(down))
                })
                .collect();
            match row.iter().position(|&w| w != 0.0) {
                Some(a) => {
                    let b = row.iter().rposition(|&w| w != 0.0).unwrap_or(a);
                    (a, row[a..=b].to_vec())
                }
                None => (0, Vec::new()),
            }
        })
        .collect()
}

impl KaldiFbank {
    /// Plans the features for `opts`.
    pub fn new(opts: FbankOptions) -> Result<Self> {
        if opts.sample_frequency.is_nan() || opts.sample_frequency <= 0.0 {
            return Err(DspError::UnsupportedSampleRate {
                what: "kaldi fbank".into(),
                got: opts.sample_frequency.max(0.0) as u32,
                expected: None,
            });
        }
        let window_shift = (opts.sample_frequency * opts.frame_shift_ms * 0.001) as usize;
        let window_size = (opts.sample_frequency * opts.frame_length_ms * 0.001) as usize;
        if window_size < 2 || window_shift == 0 {
            return Err(invalid(
                "frame length/shift",
                "frames must hold at least 2 samples",
            ));
        }
        if opts.num_mel_bins <= 3 {
            return Err(invalid("num_mel_bins", "must be greater than 3"));
        }
        let nyquist = 0.5 * opts.sample_frequency;
        let high = if opts.high_freq <= 0.0 {
            opts.high_freq + nyquist
        } else {
            opts.high_freq
        };
        if !(opts.low_freq >= 0.0 && opts.low_freq < high && high <= nyquist) {
            return Err(invalid(
                "low_freq/high_freq",
                format!(
                    "need 0 <= low ({}) < high ({high}) <= nyquist ({nyquist})",
                    opts.low_freq
                ),
            ));
        }
        let padded = if opts.round_to_power_of_two {
            window_size.next_power_of_two()
        } else {
            window_size
        };
        if padded % 2 != 0 {
            return Err(invalid("frame length", "the FFT size must be even"));
        }
        let window = match opts.window_type {
            FbankWindow::Povey => window::povey(window_size),
            FbankWindow::Hanning => window::hann(window_size, false),
            FbankWindow::Hamming => window::hamming(window_size),
            FbankWindow::Rectangular => vec![1.0; window_size],
        };
        let banks = mel_banks(
            opts.num_mel_bins,
            padded,
            opts.sample_frequency,
            opts.low_freq,
            opts.high_freq,
        );
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(padded);
        Ok(Self {
            opts,
            window_size,
            window_shift,
            padded,
            window,
            banks,
            fft,
        })
    }

    /// The options.
    pub fn options(&self) -> &FbankOptions {
        &self.opts
    }

    /// Frames produced for `n` samples.
    pub fn num_frames(&self, n: usize) -> usize {
        if n < self.window_size {
            0
        } else {
            1 + (n - self.window_size) / self.window_shift
        }
    }

    /// Computes the features of `wav` (mono, at `sample_frequency`).
    pub fn compute(&self, wav: &[f32]) -> Result<Matrix> {
        check_signal("kaldi fbank input", wav)?;
        let n_frames = self.num_frames(wav.len());
        if n_frames == 0 {
            return Err(DspError::TooShort {
                what: "kaldi fbank input".into(),
                len: wav.len(),
                min: self.window_size,
            });
        }
        let nb = self.opts.num_mel_bins;
        let mut out = Matrix::zeros(n_frames, nb);
        let mut frame = vec![0f32; self.padded];
        let mut spec = self.fft.make_output_vec();
        let mut power = vec![0f32; spec.len()];
        let mut scratch = self.fft.make_scratch_vec();
        let ws = self.window_size;
        for t in 0..n_frames {
            let src = &wav[t * self.window_shift..t * self.window_shift + ws];
            let mean = if self.opts.remove_dc_offset {
                (src.iter().map(|&v| v as f64).sum::<f64>() / ws as f64) as f32
            } else {
                0.0
            };
            // pre-emphasis with the first sample replicated: y[i] = x[i] - p * x[i - 1]
            let p = self.opts.preemphasis_coefficient;
            let first = src[0] - mean;
            frame[0] = (first - p * first) * self.window[0];
            for i in 1..ws {
                let cur = src[i] - mean;
                let prev = src[i - 1] - mean;
                frame[i] = (cur - p * prev) * self.window[i];
            }
            frame[ws..].iter_mut().for_each(|v| *v = 0.0);
            self.fft
                .process_with_scratch(&mut frame, &mut spec, &mut scratch)
                .map_err(|e| invalid("fbank fft", e.to_string()))?;
            if self.opts.use_power {
                for (p, s) in power.iter_mut().zip(&spec) {
                    *p = s.re * s.re + s.im * s.im;
                }
            } else {
                for (p, s) in power.iter_mut().zip(&spec) {
                    *p = (s.re * s.re + s.im * s.im).sqrt();
                }
            }
            let row = out.row_mut(t);
            for ((start, w), o) in self.banks.iter().zip(row.iter_mut()) {
                *o = w.iter().zip(&power[*start..]).map(|(a, b)| a * b).sum();
            }
        }
        if self.opts.use_log_fbank {
            crate::math::ln_clamped(out.as_mut_slice(), f32::EPSILON);
        }
        if self.opts.subtract_mean {
            for c in 0..nb {
                let mean =
                    (0..n_frames).map(|t| out.get(t, c) as f64).sum::<f64>() / n_frames as f64;
                let mean = mean as f32;
                for t in 0..n_frames {
                    out.row_mut(t)[c] -= mean;
                }
            }
        }
        Ok(out)
    }
}
