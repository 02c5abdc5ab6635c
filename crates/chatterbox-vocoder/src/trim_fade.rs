//! S3Gen's output fade-in (`trim_fade` in chatterbox/models/s3gen/s3gen.py, upstream 5de7a54).
use crate::error::invalid;
use crate::Result;
use candle_core::{Device, Tensor};

/// "Silence out a few ms and fade audio in to reduce artifacts": `S3Token2Wav` multiplies the
/// first 40 ms of every vocoder output by 20 ms of zeros and then a 20 ms raised-cosine ramp
/// `(cos(linspace(pi, 0, n)) + 1) / 2`, with `n = sample_rate / 50`.
#[derive(Debug, Clone)]
pub struct TrimFade {
    /// `(2 n,)`.
    fade: Tensor,
}

impl TrimFade {
    /// The highest rate [`TrimFade::new`] takes (the highest rate audio formats use): a rate
    /// beyond it is a mistake, and its fade would be a needlessly large allocation.
    pub const MAX_SAMPLE_RATE: usize = 768_000;

    /// The fade for `sample_rate` in Hz as a `u32`, the type the other chatterbox crates use
    /// (S3Gen: 24 000 Hz, 480 + 480 samples). Same as [`TrimFade::new`].
    pub fn from_sample_rate(sample_rate: u32, device: &Device) -> Result<Self> {
        let rate = usize::try_from(sample_rate).map_err(|_| {
            invalid(
                "sample rate",
                format!("{sample_rate} Hz does not fit usize"),
            )
        })?;
        Self::new(rate, device)
    }

    /// The fade for `sample_rate` (S3Gen: 24 000 Hz, 480 + 480 samples), given as
    /// [`HiFTConfig::sampling_rate`](crate::HiFTConfig::sampling_rate) holds it.
    pub fn new(sample_rate: usize, device: &Device) -> Result<Self> {
        let n = sample_rate / 50;
        if n < 2 {
            return Err(invalid(
                "sample rate",
                format!("{sample_rate} Hz is too low for a 20 ms fade"),
            ));
        }
        if sample_rate > Self::MAX_SAMPLE_RATE {
            return Err(invalid(
                "sample rate",
                format!(
                    "{sample_rate} Hz is above the {} Hz of any audio format",
                    Self::MAX_SAMPLE_RATE
                ),
            ));
        }
        let mut fade = vec![0f32; 2 * n];
        for (i, v) in fade[n..].iter_mut().enumerate() {
            let x = std::f64::consts::PI * (1.0 - i as f64 / (n - 1) as f64);
            *v = ((x.cos() + 1.0) / 2.0) as f32;
        }
        Ok(Self {
            fade: Tensor::from_vec(fade, 2 * n, device)?,
        })
    }

    /// Length of the faded prefix in samples.
    pub fn len(&self) -> usize {
        self.fade.dim(0).unwrap_or(0)
    }

    /// Whether the fade is empty (never, for a valid sample rate).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies the fade to a `(B, N)` waveform (`wav[:, :2n] *= fade`; a shorter waveform gets
    /// the fade's first `N` samples).
    pub fn forward(&self, wav: &Tensor) -> Result<Tensor> {
        let (_, n) = wav.dims2()?;
        let m = n.min(self.len());
        if m == 0 {
            return Ok(wav.clone());
        }
        let head = wav
            .narrow(1, 0, m)?
            .broadcast_mul(&self.fade.narrow(0, 0, m)?.unsqueeze(0)?)?;
        if m == n {
            return Ok(head);
        }
        Ok(Tensor::cat(&[&head, &wav.narrow(1, m, n - m)?], 1)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_then_raised_cosine() -> Result<()> {
        let dev = Device::Cpu;
        let tf = TrimFade::new(24_000, &dev)?;
        assert_eq!(tf.len(), 960);
        let wav = Tensor::ones((1, 1000), candle_core::DType::F32, &dev)?;
        let out = tf.forward(&wav)?.squeeze(0)?.to_vec1::<f32>()?;
        assert!(out[..480].iter().all(|&v| v == 0.0));
        assert_eq!(out[480], 0.0);
        approx::assert_abs_diff_eq!(out[720], 0.5, epsilon = 5e-3);
        assert_eq!(out[959], 1.0);
        assert!(out[960..].iter().all(|&v| v == 1.0));
        assert!(out[480..960].windows(2).all(|w| w[0] <= w[1]));
        // Shorter than the fade: only the silent part applies.
        let short = tf.forward(&Tensor::ones((2, 100), candle_core::DType::F32, &dev)?)?;
        assert_eq!(short.dims(), [2, 100]);
        assert_eq!(short.sum_all()?.to_scalar::<f32>()?, 0.0);
        Ok(())
    }

    #[test]
    fn rates_outside_audio_are_errors() -> Result<()> {
        let dev = Device::Cpu;
        assert_eq!(
            TrimFade::new(TrimFade::MAX_SAMPLE_RATE, &dev)?.len(),
            30_720
        );
        for rate in [0, 99, TrimFade::MAX_SAMPLE_RATE + 1, usize::MAX] {
            let e = TrimFade::new(rate, &dev).unwrap_err().to_string();
            assert!(
                e.contains("sample rate") && e.contains(&rate.to_string()),
                "{e}"
            );
        }
        assert!(TrimFade::from_sample_rate(u32::MAX, &dev).is_err());
        Ok(())
    }
}
