//! Port of torchaudio's `transforms.Resample` (torchaudio/functional/functional.py,
//! `_get_sinc_resample_kernel` and `_apply_sinc_resample_kernel`, torchaudio 2.6), which
//! `S3Gen.embed_ref` uses to bring the 24 kHz prompt to 16 kHz.
use super::{check_rates, gcd};
use crate::error::{check_signal, Result};

/// torchaudio's band-limited sinc resampler with a Hann window (`sinc_interp_hann`).
///
/// The kernel has one phase per output sample of a period (`new / gcd` phases of
/// `2 * width + orig / gcd` taps). The output has `ceil(len * new / orig)` samples.
#[derive(Debug, Clone)]
pub struct SincResampler {
    orig: usize,
    new: usize,
    width: usize,
    /// Phase-major kernel: `kernel[phase * taps + k]`.
    kernel: Vec<f32>,
    taps: usize,
    from_hz: u32,
    to_hz: u32,
}

impl SincResampler {
    /// The resampler `torchaudio.transforms.Resample(from_hz, to_hz)` builds: lowpass filter
    /// width 6, rolloff 0.99.
    pub fn new(from_hz: u32, to_hz: u32) -> Result<Self> {
        Self::with_params(from_hz, to_hz, 6, 0.99)
    }

    /// The same with another `lowpass_filter_width` and `rolloff`.
    pub fn with_params(
        from_hz: u32,
        to_hz: u32,
        lowpass_filter_width: usize,
        rolloff: f64,
    ) -> Result<Self> {
        check_rates(from_hz, to_hz)?;
        if lowpass_filter_width == 0 || !(rolloff > 0.0 && rolloff <= 1.0) {
            return Err(crate::error::invalid(
                "sinc resampler",
                "lowpass_filter_width must be positive and rolloff in (0, 1]",
            ));
        }
        let g = gcd(from_hz, to_hz);
        let orig = (from_hz / g) as usize;
        let new = (to_hz / g) as usize;
        let lw = lowpass_filter_width as f64;
        let base_freq = orig.min(new) as f64 * rolloff;
        let width = (lw * orig as f64 / base_freq).ceil() as usize;
        let taps = 2 * width + orig;
        let scale = base_freq / orig as f64;
        let mut kernel = Vec::with_capacity(new * taps);
        for j in 0..new {
            // torch computes this offset as an int64 tensor divided into float32.
            let phase = (-(j as f32) / new as f32) as f64;
            for k in 0..taps {
                let idx = (k as f64 - width as f64) / orig as f64;
                let mut t = (phase + idx) * base_freq;
                t = t.clamp(-lw, lw);
                let window = (t * std::f64::consts::PI / lw / 2.0).cos().powi(2);
                let tp = t * std::f64::consts::PI;
                let sinc = if tp == 0.0 { 1.0 } else { tp.sin() / tp };
                kernel.push((sinc * window * scale) as f32);
            }
        }
        Ok(Self {
            orig,
            new,
            width,
            kernel,
            taps,
            from_hz,
            to_hz,
        })
    }

    /// Source rate in Hz.
    pub fn from_hz(&self) -> u32 {
        self.from_hz
    }

    /// Target rate in Hz.
    pub fn to_hz(&self) -> u32 {
        self.to_hz
    }

    /// Output length for `n` input samples: `ceil(n * new / orig)`.
    pub fn output_len(&self, n: usize) -> usize {
        (n * self.new).div_ceil(self.orig)
    }

    /// Resamples `x`.
    pub fn process(&self, x: &[f32]) -> Result<Vec<f32>> {
        check_signal("resample input", x)?;
        if self.orig == self.new {
            return Ok(x.to_vec());
        }
        let n = x.len();
        // torch zero-pads (width, width + orig) and runs a strided convolution: output
        // `b * new + ph` is `kernel[ph] . padded[b * orig..b * orig + taps]`. Splitting the padded
        // input into `orig` phase streams turns each tap into a contiguous multiply-add over all
        // blocks, which vectorises.
        let padded_len = n + 2 * self.width + self.orig;
        let n_blocks = (padded_len - self.taps) / self.orig + 1;
        let target = self.output_len(n);
        let stream_len = n_blocks + self.taps.div_ceil(self.orig);
        let mut streams = vec![0f32; self.orig * stream_len];
        for (i, &v) in x.iter().enumerate() {
            let p = i + self.width;
            streams[(p % self.orig) * stream_len + p / self.orig] = v;
        }
        let mut acc = vec![0f32; n_blocks];
        let mut out = vec![0f32; n_blocks * self.new];
        for ph in 0..self.new {
            acc.iter_mut().for_each(|a| *a = 0.0);
            let kernel = &self.kernel[ph * self.taps..(ph + 1) * self.taps];
            for (k, &c) in kernel.iter().enumerate() {
                let stream = &streams[(k % self.orig) * stream_len + k / self.orig..];
                for (a, &v) in acc.iter_mut().zip(&stream[..n_blocks]) {
                    *a += c * v;
                }
            }
            for (b, &a) in acc.iter().enumerate() {
                out[b * self.new + ph] = a;
            }
        }
        out.truncate(target);
        Ok(out)
    }
}
