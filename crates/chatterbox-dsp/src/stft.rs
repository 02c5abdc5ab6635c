//! Short-time Fourier transform matching `torch.stft` / `torch.istft` (onesided, unnormalised;
//! `center` pads `n_fft / 2` samples with a reflection at both ends).
use crate::error::{check_signal, invalid, DspError, Result};
use realfft::num_complex::Complex32;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use std::borrow::Cow;
use std::sync::Arc;

/// A complex spectrogram, frame-major: frame `t` is `data[t * n_freq..(t + 1) * n_freq]`
/// (`torch.stft` returns the transpose, `(n_freq, n_frames)`).
#[derive(Debug, Clone, PartialEq)]
pub struct Spectrum {
    /// `n_fft / 2 + 1` bins per frame.
    pub n_freq: usize,
    /// Number of frames.
    pub n_frames: usize,
    /// Bins, frame-major.
    pub data: Vec<Complex32>,
}

impl Spectrum {
    /// Frame `t`.
    pub fn frame(&self, t: usize) -> &[Complex32] {
        &self.data[t * self.n_freq..(t + 1) * self.n_freq]
    }
}

/// A planned STFT: `Stft::new` builds the FFT plan and the padded window once.
#[derive(Clone)]
pub struct Stft {
    n_fft: usize,
    hop: usize,
    center: bool,
    window: Vec<f32>,
    fft: Arc<dyn RealToComplex<f32>>,
}

impl std::fmt::Debug for Stft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stft")
            .field("n_fft", &self.n_fft)
            .field("hop", &self.hop)
            .field("center", &self.center)
            .finish()
    }
}

/// Pads `window` (of length <= `n_fft`) with zeros on both sides to `n_fft`, as torch does.
fn pad_window(window: &[f32], n_fft: usize) -> Result<Vec<f32>> {
    if window.is_empty() || window.len() > n_fft {
        return Err(invalid(
            "window",
            format!("length {} must be in 1..={n_fft}", window.len()),
        ));
    }
    let left = (n_fft - window.len()) / 2;
    let mut w = vec![0.0; n_fft];
    w[left..left + window.len()].copy_from_slice(window);
    Ok(w)
}

/// Reflect-pads `x` by `pad` samples on both sides (`torch.nn.functional.pad(mode="reflect")`).
pub fn reflect_pad(what: &str, x: &[f32], pad: usize) -> Result<Vec<f32>> {
    if pad >= x.len() {
        return Err(DspError::TooShort {
            what: format!("{what} (reflect padding of {pad})"),
            len: x.len(),
            min: pad + 1,
        });
    }
    let n = x.len();
    let mut out = Vec::with_capacity(n + 2 * pad);
    out.extend((1..=pad).rev().map(|i| x[i]));
    out.extend_from_slice(x);
    out.extend((1..=pad).map(|i| x[n - 1 - i]));
    Ok(out)
}

impl Stft {
    /// Plans an STFT of size `n_fft` with hop `hop` and `window` (zero-padded to `n_fft` when
    /// shorter, like torch's `win_length`). `center` reflect-pads `n_fft / 2` on both sides.
    pub fn new(n_fft: usize, hop: usize, window: &[f32], center: bool) -> Result<Self> {
        if n_fft < 2 {
            return Err(invalid("n_fft", format!("{n_fft} must be at least 2")));
        }
        if hop == 0 {
            return Err(invalid("hop", "must be positive"));
        }
        let window = pad_window(window, n_fft)?;
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(n_fft);
        Ok(Self {
            n_fft,
            hop,
            center,
            window,
            fft,
        })
    }

    /// FFT size.
    pub fn n_fft(&self) -> usize {
        self.n_fft
    }

    /// Bins per frame, `n_fft / 2 + 1`.
    pub fn n_freq(&self) -> usize {
        self.n_fft / 2 + 1
    }

    /// Frames produced for `n` input samples (0 if too short).
    pub fn num_frames(&self, n: usize) -> usize {
        let padded = if self.center {
            n + 2 * (self.n_fft / 2)
        } else {
            n
        };
        if padded < self.n_fft {
            0
        } else {
            1 + (padded - self.n_fft) / self.hop
        }
    }

    /// Transforms `x` into a new [`Spectrum`].
    pub fn process(&self, x: &[f32]) -> Result<Spectrum> {
        let mut out = Spectrum {
            n_freq: self.n_freq(),
            n_frames: 0,
            data: Vec::new(),
        };
        self.process_into(x, &mut out)?;
        Ok(out)
    }

    /// Transforms `x` into `out`, reusing its allocation.
    pub fn process_into(&self, x: &[f32], out: &mut Spectrum) -> Result<()> {
        let n_freq = self.n_freq();
        out.n_freq = n_freq;
        out.n_frames = 0;
        out.data.clear();
        let data = &mut out.data;
        out.n_frames = self.for_each_frame(x, |_, bins| data.extend_from_slice(bins))?;
        Ok(())
    }

    /// Transforms `x` frame by frame without storing the spectrogram: `f(t, bins)` is called
    /// for each frame in order. Returns the number of frames.
    pub fn for_each_frame(
        &self,
        x: &[f32],
        mut f: impl FnMut(usize, &[Complex32]),
    ) -> Result<usize> {
        let (signal, n_frames) = self.framed(x)?;
        let mut work = self.work();
        for t in 0..n_frames {
            f(t, work.transform(self, &signal, t)?);
        }
        Ok(n_frames)
    }

    /// Transforms `x` on rayon's threads, in runs of `run` consecutive frames: each run gets a
    /// state `init(frames_in_run)`, then `f(&mut state, i, bins)` for its `i`-th frame in
    /// order. Returns the states in run order. Each frame's values are exactly those of
    /// [`Stft::for_each_frame`].
    pub fn par_frame_runs<T: Send>(
        &self,
        x: &[f32],
        run: usize,
        init: impl Fn(usize) -> T + Sync,
        f: impl Fn(&mut T, usize, &[Complex32]) + Sync,
    ) -> Result<Vec<T>> {
        use rayon::prelude::*;
        let (signal, n_frames) = self.framed(x)?;
        let run = run.max(1);
        (0..n_frames.div_ceil(run))
            .into_par_iter()
            .map(|r| {
                let frames = r * run..n_frames.min((r + 1) * run);
                let mut state = init(frames.len());
                let mut work = self.work();
                for (i, t) in frames.enumerate() {
                    f(&mut state, i, work.transform(self, &signal, t)?);
                }
                Ok(state)
            })
            .collect()
    }

    /// `x` checked and padded as the frames read it, and the number of frames.
    fn framed<'a>(&self, x: &'a [f32]) -> Result<(Cow<'a, [f32]>, usize)> {
        check_signal("stft input", x)?;
        let signal = if self.center {
            Cow::Owned(reflect_pad("stft input", x, self.n_fft / 2)?)
        } else {
            Cow::Borrowed(x)
        };
        let n_frames = self.num_frames(x.len());
        if n_frames == 0 {
            return Err(DspError::TooShort {
                what: "stft input".into(),
                len: x.len(),
                min: self.n_fft,
            });
        }
        Ok((signal, n_frames))
    }

    fn work(&self) -> FrameWork {
        FrameWork {
            frame: vec![0f32; self.n_fft],
            bins: vec![Complex32::new(0.0, 0.0); self.n_freq()],
            scratch: self.fft.make_scratch_vec(),
        }
    }
}

/// The buffers of one frame's transform.
struct FrameWork {
    frame: Vec<f32>,
    bins: Vec<Complex32>,
    scratch: Vec<Complex32>,
}

impl FrameWork {
    /// The bins of frame `t` of the padded `signal`: windowed, then the real FFT.
    fn transform(&mut self, stft: &Stft, signal: &[f32], t: usize) -> Result<&[Complex32]> {
        let src = &signal[t * stft.hop..t * stft.hop + stft.n_fft];
        for ((d, &s), &w) in self.frame.iter_mut().zip(src).zip(&stft.window) {
            *d = s * w;
        }
        stft.fft
            .process_with_scratch(&mut self.frame, &mut self.bins, &mut self.scratch)
            .map_err(|e| invalid("stft", e.to_string()))?;
        Ok(&self.bins)
    }
}

/// A planned inverse STFT matching `torch.istft(..., center=True/False, length=None)`:
/// windowed overlap-add divided by the summed squared window.
#[derive(Clone)]
pub struct Istft {
    n_fft: usize,
    hop: usize,
    center: bool,
    window: Vec<f32>,
    ifft: Arc<dyn ComplexToReal<f32>>,
}

impl std::fmt::Debug for Istft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Istft")
            .field("n_fft", &self.n_fft)
            .field("hop", &self.hop)
            .field("center", &self.center)
            .finish()
    }
}

impl Istft {
    /// Plans the inverse of [`Stft::new`] with the same arguments.
    pub fn new(n_fft: usize, hop: usize, window: &[f32], center: bool) -> Result<Self> {
        if n_fft < 2 {
            return Err(invalid("n_fft", format!("{n_fft} must be at least 2")));
        }
        if hop == 0 || hop > n_fft {
            return Err(invalid("hop", format!("{hop} must be in 1..={n_fft}")));
        }
        let window = pad_window(window, n_fft)?;
        let ifft = RealFftPlanner::<f32>::new().plan_fft_inverse(n_fft);
        Ok(Self {
            n_fft,
            hop,
            center,
            window,
            ifft,
        })
    }

    /// Output length for `n_frames` frames.
    pub fn output_len(&self, n_frames: usize) -> usize {
        if n_frames == 0 {
            return 0;
        }
        let full = self.n_fft + self.hop * (n_frames - 1);
        if self.center {
            full - 2 * (self.n_fft / 2)
        } else {
            full
        }
    }

    /// Inverts `spec` (frame-major, `n_fft / 2 + 1` bins per frame). The imaginary parts of the
    /// DC and Nyquist bins are ignored, as `torch.fft.irfft` ignores them.
    pub fn process(&self, spec: &Spectrum) -> Result<Vec<f32>> {
        let n_freq = self.n_fft / 2 + 1;
        if spec.n_freq != n_freq {
            return Err(DspError::LengthMismatch {
                what: "istft bins per frame",
                expected: n_freq,
                got: spec.n_freq,
            });
        }
        if spec.n_frames == 0 || spec.data.len() != spec.n_frames * n_freq {
            return Err(invalid(
                "istft spectrum",
                "no frames or inconsistent length",
            ));
        }
        let full = self.n_fft + self.hop * (spec.n_frames - 1);
        let mut y = vec![0f32; full];
        let mut env = vec![0f32; full];
        let mut bins = vec![Complex32::new(0.0, 0.0); n_freq];
        let mut frame = vec![0f32; self.n_fft];
        let mut scratch = self.ifft.make_scratch_vec();
        let scale = 1.0 / self.n_fft as f32;
        for t in 0..spec.n_frames {
            bins.copy_from_slice(spec.frame(t));
            bins[0].im = 0.0;
            bins[n_freq - 1].im = 0.0;
            self.ifft
                .process_with_scratch(&mut bins, &mut frame, &mut scratch)
                .map_err(|e| invalid("istft", e.to_string()))?;
            let off = t * self.hop;
            for i in 0..self.n_fft {
                let w = self.window[i];
                y[off + i] += frame[i] * scale * w;
                env[off + i] += w * w;
            }
        }
        let (start, end) = if self.center {
            (self.n_fft / 2, full - self.n_fft / 2)
        } else {
            (0, full)
        };
        let mut out = Vec::with_capacity(end - start);
        for i in start..end {
            if env[i].abs() < 1e-11 {
                return Err(invalid(
                    "istft window",
                    "window overlap-add is zero somewhere (NOLA condition fails)",
                ));
            }
            out.push(y[i] / env[i]);
        }
        Ok(out)
    }
}
