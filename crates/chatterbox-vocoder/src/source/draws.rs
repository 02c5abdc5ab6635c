//! The random draws of `SineGen` (chatterbox/models/s3gen/hifigan.py, upstream 5de7a54): the
//! initial phase of each harmonic and the additive Gaussian noise.
use crate::{Result, VocoderError};
use candle_core::{Device, Tensor};
use rand::{Rng, RngExt};
use std::f32::consts::PI;

/// What `SineGen.forward` draws at random, as inputs: the reference draws
/// `Uniform(-pi, pi).sample((B, H, 1))` (then zeroes the fundamental's phase) and
/// `torch.randn_like(sine_waves)`, with `H = nb_harmonics + 1`.
#[derive(Debug, Clone)]
pub struct SineDraws {
    /// `(B, H)` initial phases in radians; column 0 (the fundamental) is ignored: the
    /// reference sets it to 0.
    pub phase: Tensor,
    /// `(B, H, N)` standard normal noise, one value per harmonic and output sample.
    pub noise: Tensor,
}

impl SineDraws {
    /// Wraps recorded or externally drawn tensors.
    pub fn new(phase: Tensor, noise: Tensor) -> Self {
        Self { phase, noise }
    }

    /// Draws from a seedable host generator (deterministic for a seed on every device): phases
    /// uniform in `[-pi, pi)`, noise standard normal (Box-Muller).
    pub fn sample<R: Rng + ?Sized>(
        rng: &mut R,
        batch: usize,
        harmonics: usize,
        samples: usize,
        device: &Device,
    ) -> Result<Self> {
        let phase: Vec<f32> = (0..batch * harmonics)
            .map(|_| -PI + rng.random::<f32>() * (2.0 * PI))
            .collect();
        let n = batch * harmonics * samples;
        let mut noise = Vec::with_capacity(n + 1);
        while noise.len() < n {
            // Box-Muller on two uniforms in (0, 1].
            let u1 = 1.0 - rng.random::<f64>();
            let u2 = rng.random::<f64>();
            let r = (-2.0 * u1.ln()).sqrt();
            let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
            noise.push((r * c) as f32);
            noise.push((r * s) as f32);
        }
        noise.truncate(n);
        Ok(Self {
            phase: Tensor::from_vec(phase, (batch, harmonics), device)?,
            noise: Tensor::from_vec(noise, (batch, harmonics, samples), device)?,
        })
    }

    /// Draws with the device's own generator (`Tensor::rand` / `Tensor::randn`; seed it with
    /// `Device::set_seed` where the backend supports that). No host-to-device copy of the noise,
    /// which is what a GPU wants.
    pub fn sample_on_device(
        batch: usize,
        harmonics: usize,
        samples: usize,
        device: &Device,
    ) -> Result<Self> {
        Ok(Self {
            phase: Tensor::rand(-PI, PI, (batch, harmonics), device)?,
            noise: Tensor::randn(0f32, 1.0, (batch, harmonics, samples), device)?,
        })
    }

    pub(crate) fn check(&self, batch: usize, harmonics: usize, samples: usize) -> Result<()> {
        let ok = self.phase.dims() == [batch, harmonics]
            && self.noise.dims() == [batch, harmonics, samples];
        if ok {
            Ok(())
        } else {
            Err(VocoderError::InvalidInput {
                what: "sine draws",
                reason: format!(
                    "expected phase ({batch}, {harmonics}) and noise ({batch}, {harmonics}, {samples}), got {:?} and {:?}",
                    self.phase.dims(),
                    self.noise.dims()
                ),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn host_draws_are_seeded_and_distributed_as_asked() -> Result<()> {
        let dev = Device::Cpu;
        let draw = |seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            SineDraws::sample(&mut rng, 1, 9, 20_001, &dev)
        };
        let (a, b, c) = (draw(7)?, draw(7)?, draw(8)?);
        let flat = |t: &Tensor| t.flatten_all().and_then(|t| t.to_vec1::<f32>());
        assert_eq!(flat(&a.noise)?, flat(&b.noise)?);
        assert_eq!(flat(&a.phase)?, flat(&b.phase)?);
        assert_ne!(flat(&a.noise)?, flat(&c.noise)?);
        let noise = flat(&a.noise)?;
        let n = noise.len() as f64;
        let mean = noise.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = noise
            .iter()
            .map(|&x| (x as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
            "mean {mean} var {var}"
        );
        assert!(flat(&a.phase)?.iter().all(|p| (-PI..PI).contains(p)));
        Ok(())
    }
}
