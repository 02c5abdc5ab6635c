//! Port of `librosa.resample(y, orig_sr, target_sr, res_type="polyphase")` (librosa 0.11.0
//! core/audio.py), which `PerthImplicitWatermarker.get_watermark` uses before detecting:
//! `scipy.signal.resample_poly(y, up, down)` (scipy 1.17 signal/_signaltools.py, the default
//! `window=('kaiser', 5.0)`, `padtype='constant'`) with `up / down` the rates divided by their
//! gcd, then `librosa.util.fix_length` to `ceil(n * target_sr / orig_sr)`.
//!
//! chatterbox-dsp has no polyphase resampler (its `HqResampler` is librosa's `soxr_hq`), so it
//! lives here. The filter is designed in f64 as `scipy.signal.firwin` does, cast to the
//! signal's f32 and scaled by `up` in f32; the output is accumulated in f32 in the order of
//! scipy's `upfirdn` (oldest input first), as scipy computes float32 input.
use crate::{Result, WatermarkError};

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The modified Bessel function of the first kind, order 0 (power series; converges to f64
/// precision for the arguments Kaiser windows use).
fn bessel_i0(x: f64) -> f64 {
    let q = x * x / 4.0;
    let (mut term, mut sum, mut k) = (1.0f64, 1.0f64, 1.0f64);
    loop {
        term *= q / (k * k);
        sum += term;
        if term < sum * 1e-17 {
            return sum;
        }
        k += 1.0;
    }
}

/// `np.sinc` (`sin(pi x) / (pi x)`, with x = 0 replaced by machine epsilon as scipy's array-API
/// `sinc` does).
fn sinc(x: f64) -> f64 {
    let y = std::f64::consts::PI * if x == 0.0 { f64::EPSILON } else { x };
    y.sin() / y
}

/// `scipy.signal.firwin(numtaps, cutoff, window=('kaiser', beta))`: a low-pass windowed-sinc
/// filter scaled to unit gain at DC (`cutoff` relative to Nyquist).
fn firwin_kaiser(numtaps: usize, cutoff: f64, beta: f64) -> Vec<f64> {
    let alpha = 0.5 * (numtaps as f64 - 1.0);
    // scipy.signal.windows.kaiser(numtaps, beta, sym=True)
    let i0_beta = bessel_i0(beta);
    let mut h: Vec<f64> = (0..numtaps)
        .map(|n| {
            let m = n as f64 - alpha;
            let r = if alpha > 0.0 { m / alpha } else { 0.0 };
            let win = bessel_i0(beta * (1.0 - r * r).max(0.0).sqrt()) / i0_beta;
            cutoff * sinc(cutoff * m) * win
        })
        .collect();
    let s: f64 = h.iter().sum();
    for v in &mut h {
        *v /= s;
    }
    h
}

/// A planned `resample_poly` between two integer rates.
#[derive(Debug, Clone)]
pub struct PolyphaseResampler {
    up: usize,
    down: usize,
    from_hz: u32,
    to_hz: u32,
    /// The filter with scipy's zero pre- and post-padding (post-padding grows with the input).
    h: Vec<f32>,
    n_pre_pad: usize,
    half_len: usize,
}

impl PolyphaseResampler {
    /// Designs the filter for `from_hz` to `to_hz` (`10 * max(up, down)` taps each side).
    pub fn new(from_hz: u32, to_hz: u32) -> Result<Self> {
        if from_hz == 0 || to_hz == 0 {
            return Err(WatermarkError::UnsupportedSampleRate {
                got: 0,
                min: crate::watermarker::MIN_SAMPLE_RATE,
                max: crate::watermarker::MAX_SAMPLE_RATE,
            });
        }
        let g = gcd(u64::from(from_hz), u64::from(to_hz));
        let up = (u64::from(to_hz) / g) as usize;
        let down = (u64::from(from_hz) / g) as usize;
        let max_rate = up.max(down);
        let half_len = 10 * max_rate;
        let h = if up == 1 && down == 1 {
            Vec::new()
        } else {
            let f_c = 1.0 / max_rate as f64;
            let up_f = up as f32;
            firwin_kaiser(2 * half_len + 1, f_c, 5.0)
                .into_iter()
                .map(|v| (v as f32) * up_f)
                .collect()
        };
        let n_pre_pad = down - half_len % down;
        Ok(Self {
            up,
            down,
            from_hz,
            to_hz,
            h,
            n_pre_pad,
            half_len,
        })
    }

    /// `(up, down)` after dividing by the gcd.
    pub fn ratio(&self) -> (usize, usize) {
        (self.up, self.down)
    }

    /// Output length for `n` input samples: librosa's `ceil(n * target_sr / orig_sr)`.
    pub fn output_len(&self, n: usize) -> usize {
        (n as f64 * (f64::from(self.to_hz) / f64::from(self.from_hz))).ceil() as usize
    }

    /// Resamples `x` as `librosa.resample(x, res_type="polyphase")` does.
    pub fn process(&self, x: &[f32]) -> Result<Vec<f32>> {
        let want = self.output_len(x.len());
        if self.from_hz == self.to_hz || (self.up == 1 && self.down == 1) {
            return Ok(x.to_vec());
        }
        let (up, down) = (self.up, self.down);
        let n_in = x.len();
        if n_in == 0 {
            return Ok(Vec::new());
        }
        // resample_poly's own output length, then fix_length (pads with zeros or cuts).
        let n_out = (n_in * up).div_ceil(down);
        let n_pre_remove = (self.half_len + self.n_pre_pad) / down;
        let len_h = self.n_pre_pad + self.h.len();
        // The padded filter `hp[k]`: zeros, then `h`, then zeros (post-padding) past its end.
        let tap = |k: usize| -> f32 {
            if k < self.n_pre_pad {
                0.0
            } else {
                self.h.get(k - self.n_pre_pad).copied().unwrap_or(0.0)
            }
        };
        let mut y = Vec::with_capacity(want);
        for m in n_pre_remove..n_pre_remove + n_out.min(want) {
            // y[m] = sum_i x[i] * hp[m * down - i * up], oldest input first (upfirdn's order).
            let pos = m * down;
            let i_hi = (pos / up).min(n_in - 1);
            // smallest i with pos - i * up < len_h (taps past the filter are zero anyway)
            let i_lo = if pos >= len_h {
                (pos - len_h) / up + 1
            } else {
                0
            };
            let mut acc = 0f32;
            if i_lo <= i_hi {
                for (i, &xi) in x.iter().enumerate().take(i_hi + 1).skip(i_lo) {
                    acc += xi * tap(pos - i * up);
                }
            }
            y.push(acc);
        }
        y.resize(want, 0.0);
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    #[test]
    fn bessel_i0_matches_known_values() {
        // scipy.special.i0(1.0), i0(5.0)
        assert_abs_diff_eq!(bessel_i0(0.0), 1.0, epsilon = 1e-15);
        assert_abs_diff_eq!(bessel_i0(1.0), 1.266_065_877_752_008_4, epsilon = 1e-14);
        assert_abs_diff_eq!(bessel_i0(5.0), 27.239_871_823_604_442, epsilon = 1e-11);
    }

    #[test]
    fn ratio_and_length_follow_librosa() {
        let r = PolyphaseResampler::new(44_100, 32_000).unwrap();
        assert_eq!(r.ratio(), (320, 441));
        // ceil(44100 * 32000 / 44100)
        assert_eq!(r.output_len(44_100), 32_000);
        assert_eq!(r.output_len(1000), 726); // ceil(725.62)
        let r = PolyphaseResampler::new(24_000, 32_000).unwrap();
        assert_eq!(r.ratio(), (4, 3));
    }

    #[test]
    fn passes_a_low_tone_and_keeps_its_timing() {
        // A 500 Hz tone at 24 kHz resampled to 32 kHz is the same tone at 32 kHz (the filter
        // is zero-phase: no delay), away from the zero-padded edges.
        let x: Vec<f32> = (0..2400)
            .map(|i| (2.0 * std::f32::consts::PI * 500.0 * i as f32 / 24_000.0).sin())
            .collect();
        let y = PolyphaseResampler::new(24_000, 32_000)
            .unwrap()
            .process(&x)
            .unwrap();
        assert_eq!(y.len(), 3200);
        let err = (400..2800)
            .map(|i| {
                let want = (2.0 * std::f32::consts::PI * 500.0 * i as f32 / 32_000.0).sin();
                (y[i] - want).abs()
            })
            .fold(0f32, f32::max);
        assert!(err < 2e-3, "max error {err}");
    }

    #[test]
    fn same_rate_is_identity() {
        let x = vec![0.1f32, -0.2, 0.3];
        let r = PolyphaseResampler::new(32_000, 32_000).unwrap();
        assert_eq!(r.process(&x).unwrap(), x);
    }
}
