//! The random draws of `SineGen` (chatterbox/models/s3gen/hifigan.py, upstream 5de7a54): the
//! initial phase of each harmonic and the additive Gaussian noise.
use crate::{Result, VocoderError};
use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, RngExt, SeedableRng};
use rayon::prelude::*;
use std::f32::consts::PI;

/// Noise values per independently seeded generator.
const NOISE_CHUNK: usize = 1 << 16;

/// Fills `out` with standard normal values, Box-Muller on pairs of uniforms in (0, 1] (the
/// second value of the last pair is dropped when `out` is odd).
fn box_muller(rng: &mut StdRng, out: &mut [f32]) {
    for pair in out.chunks_mut(2) {
        let u1 = 1.0 - rng.random::<f64>();
        let u2 = rng.random::<f64>();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
        pair[0] = (r * c) as f32;
        if let Some(v) = pair.get_mut(1) {
            *v = (r * s) as f32;
        }
    }
}

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
    /// uniform in `[-pi, pi)`, noise standard normal (Box-Muller, in chunks of 65536 values
    /// from generators seeded from `rng` in order, filled in parallel).
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
        // One generator per chunk, seeded from `rng` in order: the chunks fill in parallel
        // (Box-Muller in f64 is ~16 ns a value on the 2-core dev box: 28 ms for the 1.7 M
        // values of 8 s of audio on one thread, 14-16 ms on two) and the values depend on the
        // seed only, not on the thread count.
        let seeds: Vec<u64> = (0..n.div_ceil(NOISE_CHUNK))
            .map(|_| rng.random::<u64>())
            .collect();
        let mut noise = vec![0f32; n];
        noise
            .par_chunks_mut(NOISE_CHUNK)
            .zip(seeds.par_iter())
            .for_each(|(chunk, &seed)| box_muller(&mut StdRng::seed_from_u64(seed), chunk));
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
    fn host_draws_do_not_depend_on_the_thread_count() -> Result<()> {
        // more than two chunks, and an odd last one
        let n = 2 * NOISE_CHUNK + 4_321;
        let draw = |threads| -> Result<Vec<f32>> {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a thread pool");
            pool.install(|| {
                let mut rng = rand::rngs::StdRng::seed_from_u64(3);
                SineDraws::sample(&mut rng, 1, 1, n, &Device::Cpu)?
                    .noise
                    .flatten_all()?
                    .to_vec1::<f32>()
                    .map_err(Into::into)
            })
        };
        let one = draw(1)?;
        assert_eq!(one, draw(3)?);
        // every value drawn (no zeros left from the buffer) and the chunks differ
        assert!(one.iter().all(|&v| v != 0.0 && v.is_finite()));
        assert_ne!(one[..100], one[NOISE_CHUNK..NOISE_CHUNK + 100]);
        Ok(())
    }

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
