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

/// A mutable reference draws what it points at (so a stream can own or borrow its draws).
impl<D: Draws + ?Sized> Draws for &mut D {
    fn cfm_noise(&mut self, shape: (usize, usize, usize), device: &Device) -> Result<Tensor> {
        (**self).cfm_noise(shape, device)
    }

    fn noised_mels(&mut self, shape: (usize, usize, usize), device: &Device) -> Result<Tensor> {
        (**self).noised_mels(shape, device)
    }

    fn sine(
        &mut self,
        batch: usize,
        harmonics: usize,
        samples: usize,
        device: &Device,
    ) -> Result<SineDraws> {
        (**self).sine(batch, harmonics, samples, device)
    }
}

/// Draws from seeded host generators: the same seed gives the same audio on every device.
///
/// The CFM noise has a generator of its own and is drawn frame by frame (the 80 values of frame
/// 0, then of frame 1, ...), so noise drawn in pieces along the frame axis, as streaming draws
/// it, equals the noise drawn whole: a streamed and a non-streamed generation with one seed
/// start from the same noise, whatever the chunk schedule.
#[derive(Debug)]
pub struct SeededDraws {
    /// The CFM noise.
    cfm: StdRng,
    /// Meanflow's `noised_mels` and HiFT's sine draws.
    rng: StdRng,
}

impl SeededDraws {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            // Two independent streams from one seed (the second seed is `seed` through a
            // fixed odd multiplier and offset, so no small seed maps onto another's stream).
            cfm: StdRng::seed_from_u64(seed),
            rng: StdRng::seed_from_u64(
                seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(0x2545_F491_4F6C_DD1D),
            ),
        }
    }

    /// `n` standard normals (Box-Muller: two from two uniforms, the odd last one dropped).
    fn normals(rng: &mut StdRng, n: usize) -> Vec<f32> {
        let mut v = Vec::with_capacity(n + 1);
        while v.len() < n {
            let u1 = 1.0 - rng.random::<f64>();
            let u2 = rng.random::<f64>();
            let r = (-2.0 * u1.ln()).sqrt();
            let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
            v.push((r * c) as f32);
            v.push((r * s) as f32);
        }
        v.truncate(n);
        v
    }
}

impl Draws for SeededDraws {
    fn cfm_noise(&mut self, shape: (usize, usize, usize), device: &Device) -> Result<Tensor> {
        let (b, c, t) = shape;
        // Frame-major per batch row (`(b, t, c)`), an even count per frame so that no normal
        // pair straddles two frames; then transposed to `(b, c, t)`.
        let mut v = Vec::with_capacity(b * c * t);
        for _ in 0..b * t {
            let mut frame = Self::normals(&mut self.cfm, c + c % 2);
            frame.truncate(c);
            v.extend(frame);
        }
        Ok(Tensor::from_vec(v, (b, t, c), device)?
            .transpose(1, 2)?
            .contiguous()?)
    }

    fn noised_mels(&mut self, shape: (usize, usize, usize), device: &Device) -> Result<Tensor> {
        let v = Self::normals(&mut self.rng, shape.0 * shape.1 * shape.2);
        Ok(Tensor::from_vec(v, shape, device)?)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Streaming draws the CFM noise in pieces along the frame axis: the pieces must join into
    /// the noise drawn whole, and the other draws must not move it.
    #[test]
    fn cfm_noise_in_pieces_equals_the_whole() -> Result<()> {
        let dev = Device::Cpu;
        let whole = SeededDraws::new(7).cfm_noise((1, 5, 9), &dev)?;
        let mut d = SeededDraws::new(7);
        let a = d.cfm_noise((1, 5, 2), &dev)?;
        d.sine(1, 3, 480, &dev)?;
        d.noised_mels((1, 5, 4), &dev)?;
        let b = d.cfm_noise((1, 5, 7), &dev)?;
        let joined = Tensor::cat(&[&a, &b], 2)?;
        assert_eq!(joined.to_vec3::<f32>()?, whole.to_vec3::<f32>()?);
        let v = whole.flatten_all()?.to_vec1::<f32>()?;
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        assert!(mean.abs() < 0.6, "mean {mean}");
        assert!(v.windows(2).all(|w| w[0] != w[1]), "values repeat");
        let other = SeededDraws::new(8).cfm_noise((1, 5, 9), &dev)?;
        assert_ne!(other.to_vec3::<f32>()?, whole.to_vec3::<f32>()?);
        Ok(())
    }
}
