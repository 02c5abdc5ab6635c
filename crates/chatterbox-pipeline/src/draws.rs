//! The random draws of S3Gen as inputs: the CFM solver's initial noise (`torch.randn_like(mu)`),
//! meanflow's `noised_mels` (`torch.randn` in `S3Token2Wav.flow_inference`) and HiFT's
//! `SineGen` phases and noise. A seeded generator supplies them in normal use; tests and parity
//! checks supply recorded ones.
use crate::Result;
use candle_core::{Device, Tensor};
use chatterbox_vocoder::SineDraws;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Where S3Gen's random tensors come from.
pub trait Draws {
    /// The CFM solver's initial noise, standard normal, `shape = (batch, 80, frames)`.
    fn cfm_noise(&mut self, shape: (usize, usize, usize), device: &Device) -> Result<Tensor>;
    /// Meanflow's `noised_mels` (the noise of the new frames), standard normal.
    fn noised_mels(&mut self, shape: (usize, usize, usize), device: &Device) -> Result<Tensor>;
    /// `SineGen`'s initial phases and additive noise for `samples` output samples.
    fn sine(
        &mut self,
        batch: usize,
        harmonics: usize,
        samples: usize,
        device: &Device,
    ) -> Result<SineDraws>;
}

/// Draws from a seeded host generator: the same seed gives the same audio on every device.
#[derive(Debug)]
pub struct SeededDraws {
    rng: StdRng,
}

impl SeededDraws {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
        }
    }

    fn normal(&mut self, shape: (usize, usize, usize), device: &Device) -> Result<Tensor> {
        let n = shape.0 * shape.1 * shape.2;
        let mut v = Vec::with_capacity(n + 1);
        while v.len() < n {
            // Box-Muller: two standard normals from two uniforms.
            let u1 = 1.0 - self.rng.random::<f64>();
            let u2 = self.rng.random::<f64>();
            let r = (-2.0 * u1.ln()).sqrt();
            let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
            v.push((r * c) as f32);
            v.push((r * s) as f32);
        }
        v.truncate(n);
        Ok(Tensor::from_vec(v, shape, device)?)
    }
}

impl Draws for SeededDraws {
    fn cfm_noise(&mut self, shape: (usize, usize, usize), device: &Device) -> Result<Tensor> {
        self.normal(shape, device)
    }

    fn noised_mels(&mut self, shape: (usize, usize, usize), device: &Device) -> Result<Tensor> {
        self.normal(shape, device)
    }

    fn sine(
        &mut self,
        batch: usize,
        harmonics: usize,
        samples: usize,
        device: &Device,
    ) -> Result<SineDraws> {
        Ok(SineDraws::sample(
            &mut self.rng,
            batch,
            harmonics,
            samples,
            device,
        )?)
    }
}
