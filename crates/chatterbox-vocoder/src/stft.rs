//! HiFT's short STFT and iSTFT (`HiFTGenerator._stft` / `_istft` in chatterbox/models/s3gen/
//! hifigan.py, upstream 5de7a54) as convolutions on the device: a strided `conv1d` with a
//! windowed DFT basis, and a `conv_transpose1d` with the windowed inverse basis (overlap-add)
//! divided by the overlap-added squared window, as `torch.istft` does.
use crate::conv::conv_transpose1d_unpadded;
use crate::Result;
use candle_core::{DType, Device, IndexOp, Tensor};
use std::f64::consts::PI;

/// `torch.stft(x, n_fft, hop, n_fft, window=hann(n_fft, periodic), center=True,
/// pad_mode="reflect")` for a real signal, with the real parts of the `n_fft / 2 + 1` bins
/// stacked above the imaginary parts (HiFT's `s_stft`).
#[derive(Debug, Clone)]
pub(crate) struct SourceStft {
    /// `(2 * bins, 1, n_fft)`: `w[n] cos(2 pi k n / N)` then `-w[n] sin(2 pi k n / N)`.
    basis: Tensor,
    n_fft: usize,
    hop: usize,
}

/// `torch.istft(complex(mag cos(phase), mag sin(phase)), n_fft, hop, n_fft, window=hann,
/// center=True)`.
#[derive(Debug, Clone)]
pub(crate) struct InverseStft {
    /// `(2 * bins, 1, n_fft)`: `w[n] c_k cos(2 pi k n / N) / N` then `-w[n] c_k sin(..) / N`,
    /// with `c_k = 1` at DC and Nyquist (whose imaginary parts a C2R transform ignores), else 2.
    basis: Tensor,
    /// `(1, 1, n_fft)`: the squared window.
    window_sq: Tensor,
    n_fft: usize,
    hop: usize,
}

fn window(n_fft: usize) -> Vec<f64> {
    // scipy get_window("hann", n_fft, fftbins=True) as float32, as HiFT stores it.
    chatterbox_dsp::window::hann(n_fft, true)
        .into_iter()
        .map(f64::from)
        .collect()
}

impl SourceStft {
    pub fn new(n_fft: usize, hop: usize, device: &Device) -> Result<Self> {
        let w = window(n_fft);
        let bins = n_fft / 2 + 1;
        let mut basis = vec![0f32; 2 * bins * n_fft];
        for k in 0..bins {
            for n in 0..n_fft {
                let a = 2.0 * PI * ((k * n) % n_fft) as f64 / n_fft as f64;
                basis[k * n_fft + n] = (w[n] * a.cos()) as f32;
                basis[(bins + k) * n_fft + n] = (-w[n] * a.sin()) as f32;
            }
        }
        Ok(Self {
            basis: Tensor::from_vec(basis, (2 * bins, 1, n_fft), device)?,
            n_fft,
            hop,
        })
    }

    /// `(B, N)` signal to `(B, 2 * bins, N / hop + 1)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = reflect_pad(x, self.n_fft / 2)?.unsqueeze(1)?;
        #[cfg(feature = "cuda")]
        if crate::cuda::applies(&x) {
            // channels-first im2col and one GEMM, no transpose after it
            return Ok(crate::cuda::conv1d(&x, &self.basis, 0, self.hop, 1)?);
        }
        Ok(x.conv1d(&self.basis, 0, self.hop, 1, 1)?)
    }
}

/// Reflect-pads the last dimension of `x` by `pad` on both sides (`torch.nn.functional.pad`
/// `mode="reflect"`: the edge sample is not repeated). Needs more than `pad` samples.
fn reflect_pad(x: &Tensor, pad: usize) -> Result<Tensor> {
    let n = x.dim(candle_core::D::Minus1)?;
    let dev = x.device();
    let left: Vec<u32> = (1..=pad as u32).rev().collect();
    let right: Vec<u32> = (0..pad as u32).map(|i| (n as u32) - 2 - i).collect();
    let last = x.rank() - 1;
    let l = x.index_select(&Tensor::new(left.as_slice(), dev)?, last)?;
    let r = x.index_select(&Tensor::new(right.as_slice(), dev)?, last)?;
    Ok(Tensor::cat(&[&l, x, &r], last)?)
}

impl InverseStft {
    pub fn new(n_fft: usize, hop: usize, device: &Device) -> Result<Self> {
        let w = window(n_fft);
        let bins = n_fft / 2 + 1;
        let mut basis = vec![0f32; 2 * bins * n_fft];
        for k in 0..bins {
            let edge = k == 0 || 2 * k == n_fft;
            let c = if edge { 1.0 } else { 2.0 } / n_fft as f64;
            for n in 0..n_fft {
                let a = 2.0 * PI * ((k * n) % n_fft) as f64 / n_fft as f64;
                basis[k * n_fft + n] = (w[n] * c * a.cos()) as f32;
                if !edge {
                    basis[(bins + k) * n_fft + n] = (-w[n] * c * a.sin()) as f32;
                }
            }
        }
        let window_sq: Vec<f32> = w.iter().map(|&v| (v as f32) * (v as f32)).collect();
        Ok(Self {
            basis: Tensor::from_vec(basis, (2 * bins, 1, n_fft), device)?,
            window_sq: Tensor::from_vec(window_sq, (1, 1, n_fft), device)?,
            n_fft,
            hop,
        })
    }

    /// `(B, 2 * bins, F)` real parts above imaginary parts to `(B, hop * (F - 1))` samples.
    pub fn forward(&self, spec: &Tensor) -> Result<Tensor> {
        let frames = spec.dim(2)?;
        let len = self.hop * (frames - 1);
        let y = conv_transpose1d_unpadded(spec, &self.basis, self.hop)?;
        let ones = Tensor::ones((1, 1, frames), DType::F32, spec.device())?;
        let envelope = conv_transpose1d_unpadded(&ones, &self.window_sq, self.hop)?;
        let start = self.n_fft / 2;
        let y = y.narrow(2, start, len)?;
        let envelope = envelope.narrow(2, start, len)?;
        Ok(y.broadcast_div(&envelope)?.i((.., 0, ..))?)
    }
}

#[cfg(test)]
// Reference loops index several arrays at once: clearer as index loops.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;
    use chatterbox_dsp::{Complex32, Istft, Spectrum, Stft};

    fn signal(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 * 0.37).sin() + 0.3 * (i as f32 * 1.91).cos()) * 0.4)
            .collect()
    }

    #[test]
    fn stft_matches_chatterbox_dsp() -> Result<()> {
        let dev = Device::Cpu;
        let x = signal(203);
        let got = SourceStft::new(16, 4, &dev)?
            .forward(&Tensor::new(x.as_slice(), &dev)?.unsqueeze(0)?)?;
        let want = Stft::new(16, 4, &chatterbox_dsp::window::hann(16, true), true)
            .and_then(|s| s.process(&x))
            .map_err(|e| crate::VocoderError::InvalidConfig(e.to_string()))?;
        let got = got.squeeze(0)?.to_vec2::<f32>()?;
        assert_eq!((got.len(), got[0].len()), (18, want.n_frames));
        for t in 0..want.n_frames {
            for (k, c) in want.frame(t).iter().enumerate() {
                assert_abs_diff_eq!(got[k][t], c.re, epsilon = 1e-5);
                assert_abs_diff_eq!(got[9 + k][t], c.im, epsilon = 1e-5);
            }
        }
        Ok(())
    }

    #[test]
    fn istft_matches_chatterbox_dsp() -> Result<()> {
        let dev = Device::Cpu;
        let frames = 31;
        let spec: Vec<f32> = (0..18 * frames)
            .map(|i| ((i * 7919) % 113) as f32 / 50.0 - 1.1)
            .collect();
        let got = InverseStft::new(16, 4, &dev)?
            .forward(&Tensor::from_vec(spec.clone(), (1, 18, frames), &dev)?)?
            .squeeze(0)?
            .to_vec1::<f32>()?;
        let mut data = vec![Complex32::new(0.0, 0.0); 9 * frames];
        for t in 0..frames {
            for k in 0..9 {
                data[t * 9 + k] = Complex32::new(spec[k * frames + t], spec[(9 + k) * frames + t]);
            }
        }
        let want = Istft::new(16, 4, &chatterbox_dsp::window::hann(16, true), true)
            .and_then(|i| {
                i.process(&Spectrum {
                    n_freq: 9,
                    n_frames: frames,
                    data,
                })
            })
            .map_err(|e| crate::VocoderError::InvalidConfig(e.to_string()))?;
        assert_eq!(got.len(), want.len());
        assert_abs_diff_eq!(got.as_slice(), want.as_slice(), epsilon = 1e-5);
        Ok(())
    }
}
