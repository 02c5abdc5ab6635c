//! Mel filterbanks matching `librosa.filters.mel` (Slaney mel scale, Slaney area normalisation,
//! `htk=False, norm="slaney"`, float32 result), stored sparsely for fast application.
use crate::error::{invalid, Result};
use crate::Matrix;

const F_SP: f64 = 200.0 / 3.0;
const MIN_LOG_HZ: f64 = 1000.0;
const MIN_LOG_MEL: f64 = MIN_LOG_HZ / F_SP;

fn logstep() -> f64 {
    6.4f64.ln() / 27.0
}

/// `librosa.hz_to_mel(f, htk=False)`.
pub fn hz_to_mel(f: f64) -> f64 {
    if f >= MIN_LOG_HZ {
        MIN_LOG_MEL + (f / MIN_LOG_HZ).ln() / logstep()
    } else {
        f / F_SP
    }
}

/// `librosa.mel_to_hz(m, htk=False)`.
pub fn mel_to_hz(m: f64) -> f64 {
    if m >= MIN_LOG_MEL {
        MIN_LOG_HZ * (logstep() * (m - MIN_LOG_MEL)).exp()
    } else {
        F_SP * m
    }
}

/// `np.linspace(start, stop, n)` exactly as numpy computes it.
fn linspace(start: f64, stop: f64, n: usize) -> Vec<f64> {
    if n == 1 {
        return vec![start];
    }
    let step = (stop - start) / (n - 1) as f64;
    let mut v: Vec<f64> = (0..n).map(|i| i as f64 * step + start).collect();
    v[n - 1] = stop;
    v
}

/// A mel filterbank: `n_mels` triangular filters over the `n_fft / 2 + 1` bins of a onesided
/// spectrum. Only the non-zero span of each filter is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct MelFilterbank {
    n_freq: usize,
    /// Per filter: first non-zero bin and its weights.
    filters: Vec<(usize, Vec<f32>)>,
}

impl MelFilterbank {
    /// The filterbank `librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin,
    /// fmax=fmax)` returns (`fmax = None` there is `sr / 2` here).
    pub fn new(sr: u32, n_fft: usize, n_mels: usize, fmin: f64, fmax: Option<f64>) -> Result<Self> {
        if sr == 0 {
            return Err(invalid("sample rate", "must be positive"));
        }
        if n_fft < 2 || n_mels == 0 {
            return Err(invalid(
                "mel filterbank",
                format!("n_fft {n_fft} must be >= 2 and n_mels {n_mels} >= 1"),
            ));
        }
        let fmax = fmax.unwrap_or(sr as f64 / 2.0);
        if !(fmin >= 0.0 && fmin < fmax) {
            return Err(invalid(
                "mel filterbank",
                format!("need 0 <= fmin ({fmin}) < fmax ({fmax})"),
            ));
        }
        let n_freq = n_fft / 2 + 1;
        // np.fft.rfftfreq(n_fft, d=1/sr)
        let d = 1.0 / sr as f64;
        let val = 1.0 / (n_fft as f64 * d);
        let fftfreqs: Vec<f64> = (0..n_freq).map(|k| k as f64 * val).collect();
        let mels = linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2);
        let mel_f: Vec<f64> = mels.into_iter().map(mel_to_hz).collect();
        let fdiff: Vec<f64> = mel_f.windows(2).map(|w| w[1] - w[0]).collect();
        let mut filters = Vec::with_capacity(n_mels);
        for i in 0..n_mels {
            let enorm = 2.0 / (mel_f[i + 2] - mel_f[i]);
            let row: Vec<f32> = fftfreqs
                .iter()
                .map(|&f| {
                    let lower = -(mel_f[i] - f) / fdiff[i];
                    let upper = (mel_f[i + 2] - f) / fdiff[i + 1];
                    let w = 0f64.max(lower.min(upper)) as f32;
                    // librosa stores the ramp as float32, then scales it in float64.
                    (w as f64 * enorm) as f32
                })
                .collect();
            let first = row.iter().position(|&w| w != 0.0);
            match first {
                Some(a) => {
                    let b = row.iter().rposition(|&w| w != 0.0).unwrap_or(a);
                    filters.push((a, row[a..=b].to_vec()));
                }
                None => filters.push((0, Vec::new())),
            }
        }
        Ok(Self { n_freq, filters })
    }

    /// Number of leading spectrum bins any filter reads (bins above it have zero weight).
    pub fn used_bins(&self) -> usize {
        self.filters
            .iter()
            .map(|(start, w)| start + w.len())
            .max()
            .unwrap_or(0)
    }

    /// Number of filters.
    pub fn n_mels(&self) -> usize {
        self.filters.len()
    }

    /// Number of spectrum bins the filters expect.
    pub fn n_freq(&self) -> usize {
        self.n_freq
    }

    /// The dense `(n_mels, n_freq)` matrix, as librosa returns it.
    pub fn to_dense(&self) -> Matrix {
        let mut m = Matrix::zeros(self.n_mels(), self.n_freq);
        for (i, (start, w)) in self.filters.iter().enumerate() {
            m.row_mut(i)[*start..start + w.len()].copy_from_slice(w);
        }
        m
    }

    /// Applies the filters to one spectrum frame (`n_freq` values), writing `n_mels` values.
    #[inline]
    pub fn apply(&self, spectrum: &[f32], out: &mut [f32]) {
        for ((start, w), o) in self.filters.iter().zip(out.iter_mut()) {
            let s = &spectrum[*start..start + w.len()];
            *o = w.iter().zip(s).map(|(a, b)| a * b).sum();
        }
    }

    /// Applies the filters to a frame and writes into a column of a `(n_mels, n_frames)`
    /// matrix.
    #[inline]
    /// The filters applied to `spectrum`, into `out` (`n_mels` values), with the sums of
    /// [`MelFilterbank::apply_to_column`].
    pub(crate) fn apply_to_slice(&self, spectrum: &[f32], out: &mut [f32]) {
        for (o, (start, w)) in out.iter_mut().zip(&self.filters) {
            let s = &spectrum[*start..start + w.len()];
            *o = w.iter().zip(s).map(|(a, b)| a * b).sum();
        }
    }

    pub(crate) fn apply_to_column(&self, spectrum: &[f32], out: &mut Matrix, t: usize) {
        let cols = out.cols();
        let data = out.as_mut_slice();
        for (m, (start, w)) in self.filters.iter().enumerate() {
            let s = &spectrum[*start..start + w.len()];
            data[m * cols + t] = w.iter().zip(s).map(|(a, b)| a * b).sum();
        }
    }
}
