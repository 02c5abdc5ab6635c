//! Port of `SineGen` from chatterbox/models/s3gen/hifigan.py (upstream 5de7a54).
use super::SineDraws;
use crate::Result;
use candle_core::{DType, Device, Tensor, D};
use std::sync::Once;

/// The harmonic sine source: for each harmonic `h = 1..=H` a sine of frequency `h * f0`, its
/// phase the running sum of `h * f0 / sr` (mod 1) plus a random initial phase (0 for the
/// fundamental); zeroed where unvoiced (`f0 <= voiced_threshold`), plus Gaussian noise of std
/// `noise_std` (voiced) or `sine_amp / 3` (unvoiced).
///
/// The reference's phase is `torch.cumsum` over every output sample of float32 increments. On
/// the CPU torch accumulates in double and rounds each sum to float32, and this reproduces that
/// exactly (in closed form, per frame: the upsampled F0 is constant over a frame). Backends
/// without f64 (Metal) reduce the phase mod 1 in f32 instead, which is accurate but not the
/// reference's rounding; a warning says so once.
#[derive(Debug, Clone)]
pub struct SineGen {
    sampling_rate: usize,
    harmonics: usize,
    sine_amp: f32,
    noise_std: f32,
    voiced_threshold: f32,
}

static F32_PHASE: Once = Once::new();

impl SineGen {
    /// `SineGen(samp_rate, harmonic_num, sine_amp, noise_std, voiced_threshold)`.
    pub fn new(
        sampling_rate: usize,
        harmonic_num: usize,
        sine_amp: f64,
        noise_std: f64,
        voiced_threshold: f64,
    ) -> Self {
        Self {
            sampling_rate,
            harmonics: harmonic_num + 1,
            sine_amp: sine_amp as f32,
            noise_std: noise_std as f32,
            voiced_threshold: voiced_threshold as f32,
        }
    }

    /// Sines including the fundamental (`harmonic_num + 1`).
    pub fn harmonics(&self) -> usize {
        self.harmonics
    }

    /// `f0`: `(B, T)` in Hz at frame rate; the reference first upsamples it by nearest neighbour
    /// to `upsample` samples per frame, which is implicit here. Returns the `(B, H, T * upsample)`
    /// sine waves (noise included).
    pub fn forward(&self, f0: &Tensor, upsample: usize, draws: &SineDraws) -> Result<Tensor> {
        let (b, t) = f0.dims2()?;
        let h = self.harmonics;
        let n = t * upsample;
        draws.check(b, h, n)?;
        #[cfg(feature = "cuda")]
        if super::cuda_sine::applies(f0, &draws.phase, &draws.noise) {
            let params = super::cuda_sine::SineParams {
                harmonics: h,
                upsample,
                sampling_rate: self.sampling_rate as f32,
                sine_amp: self.sine_amp,
                noise_std: self.noise_std,
                voiced_threshold: self.voiced_threshold,
            };
            return Ok(super::cuda_sine::sines(
                f0,
                &draws.phase,
                &draws.noise,
                params,
            )?);
        }
        let dev = f0.device();
        // F_mat = f0 * (i + 1) / sampling_rate, in f32 as the reference computes it.
        let mult: Vec<f32> = (1..=h).map(|i| i as f32).collect();
        let mult = Tensor::from_vec(mult, (1, h, 1), dev)?;
        let sr = Tensor::new(&[[[self.sampling_rate as f32]]], dev)?;
        let step = f0.unsqueeze(1)?.broadcast_mul(&mult)?.broadcast_div(&sr)?; // (B, H, T)
        let cycles = phase_cycles(&step, upsample)?; // (B, H, T, U), in [0, 1)
                                                     // theta = 2 pi * cycles; + initial phase (0 for the fundamental); sine_amp * sin.
        let phase = draws.phase.narrow(1, 1, h - 1)?;
        let phase = Tensor::cat(&[&Tensor::zeros((b, 1), DType::F32, dev)?, &phase], 1)?;
        let theta = cycles.affine(2.0 * std::f64::consts::PI, 0.0)?;
        let sines = theta
            .broadcast_add(&phase.reshape((b, h, 1, 1))?)?
            .sin()?
            .affine(self.sine_amp as f64, 0.0)?;
        // uv and the noise amplitude per frame: exactly the two float32 values torch computes.
        let uv = f0.gt(self.voiced_threshold as f64)?.to_dtype(DType::F32)?;
        let voiced_amp = self.noise_std;
        let unvoiced_amp = self.sine_amp / 3.0;
        let noise_amp = (uv.affine(voiced_amp as f64, 0.0)?
            + (1.0 - &uv)?.affine(unvoiced_amp as f64, 0.0)?)?;
        let uv = uv.reshape((b, 1, t, 1))?;
        let noise_amp = noise_amp.reshape((b, 1, t, 1))?;
        let noise = draws.noise.reshape((b, h, t, upsample))?;
        let out = (sines.broadcast_mul(&uv)? + noise.broadcast_mul(&noise_amp)?)?;
        Ok(out.reshape((b, h, n))?)
    }
}

/// `(cumsum(step upsampled) % 1)` as `(B, H, T, U)`: the running phase in cycles of each
/// harmonic at every sample, for per-frame increments `step` `(B, H, T)`.
fn phase_cycles(step: &Tensor, upsample: usize) -> Result<Tensor> {
    let dev = step.device();
    let exact = !dev.is_metal();
    let dtype = if exact {
        DType::F64
    } else {
        F32_PHASE.call_once(|| {
            tracing::warn!(
                "SineGen: this device has no f64; the phase is accumulated mod 1 in f32, not with \
                 the reference's float32 rounding of a double cumsum (differences ~1e-4 rad)"
            )
        });
        DType::F32
    };
    let step = step.to_dtype(dtype)?;
    // Phase at the start of each frame: exclusive prefix sum of `upsample * step` over frames.
    let per_frame = step.affine(upsample as f64, 0.0)?;
    let start = exclusive_cumsum(&per_frame, !exact)?;
    let r: Vec<f64> = (1..=upsample).map(|r| r as f64).collect();
    let r = Tensor::from_vec(r, (1, 1, 1, upsample), &Device::Cpu)?
        .to_dtype(dtype)?
        .to_device(dev)?;
    let within = step.unsqueeze(3)?.broadcast_mul(&r)?;
    let total = within.broadcast_add(&start.unsqueeze(3)?)?;
    // torch rounds each running sum to float32, then takes `% 1`.
    let total = total.to_dtype(DType::F32)?;
    Ok((&total - total.floor()?)?)
}

/// Exclusive prefix sum over the last dimension by log-step doubling (O(T log T) element
/// operations, any backend). With `wrap`, partial sums are reduced mod 1 at every step.
fn exclusive_cumsum(x: &Tensor, wrap: bool) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let t = *dims.last().unwrap_or(&0);
    let zeros = |len: usize| {
        let mut d = dims.clone();
        if let Some(last) = d.last_mut() {
            *last = len;
        }
        Tensor::zeros(d, x.dtype(), x.device())
    };
    let frac = |v: Tensor| -> Result<Tensor> { Ok(if wrap { (&v - v.floor()?)? } else { v }) };
    let mut acc = x.clone();
    let mut shift = 1;
    while shift < t {
        let shifted = Tensor::cat(
            &[&zeros(shift)?, &acc.narrow(D::Minus1, 0, t - shift)?],
            D::Minus1,
        )?;
        acc = frac((acc + shifted)?)?;
        shift *= 2;
    }
    if t == 0 {
        return Ok(acc);
    }
    Ok(Tensor::cat(
        &[&zeros(1)?, &acc.narrow(D::Minus1, 0, t - 1)?],
        D::Minus1,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_cumsum_matches_a_loop() -> Result<()> {
        let dev = Device::Cpu;
        for t in [1usize, 2, 5, 16, 37] {
            let v: Vec<f64> = (0..2 * t).map(|i| ((i * 37) % 11) as f64 * 0.25).collect();
            let x = Tensor::from_vec(v.clone(), (2, t), &dev)?;
            let got = exclusive_cumsum(&x, false)?.to_vec2::<f64>()?;
            for row in 0..2 {
                let mut acc = 0.0;
                for i in 0..t {
                    assert_eq!(got[row][i], acc);
                    acc += v[row * t + i];
                }
            }
        }
        Ok(())
    }

    /// The f64 path against a sequential double-precision cumsum rounded to f32 (torch's CPU
    /// `cumsum` of float32), and the f32 fallback close to it.
    #[test]
    fn phase_is_torchs_double_cumsum_rounded_to_f32() -> Result<()> {
        let dev = Device::Cpu;
        let (t, u) = (40, 480);
        let step: Vec<f32> = (0..t)
            .map(|i| ((i * 53) % 29) as f32 * 0.0037 + 1e-3)
            .collect();
        let st = Tensor::from_vec(step.clone(), (1, 1, t), &dev)?;
        let got = phase_cycles(&st, u)?.flatten_all()?.to_vec1::<f32>()?;
        let mut acc = 0f64;
        for (i, &g) in got.iter().enumerate() {
            acc += step[i / u] as f64;
            let c = acc as f32;
            assert_eq!(g, c - c.floor(), "sample {i}");
        }
        // The f32 fallback (Metal): exact mod-1 arithmetic, so within the reference's own
        // float32 rounding of the large running sum (here up to ~1000 cycles).
        let per_frame = st.affine(u as f64, 0.0)?;
        let start = exclusive_cumsum(&per_frame, true)?;
        let r = Tensor::arange(1f32, (u + 1) as f32, &dev)?.reshape((1, 1, 1, u))?;
        let total = st
            .unsqueeze(3)?
            .broadcast_mul(&r)?
            .broadcast_add(&start.unsqueeze(3)?)?;
        let f32_path = (&total - total.floor()?)?.flatten_all()?.to_vec1::<f32>()?;
        for (a, b) in f32_path.iter().zip(&got) {
            let d = (a - b).abs();
            assert!(d.min(1.0 - d) < 1e-4, "{a} vs {b}");
        }
        Ok(())
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    #[cfg(feature = "cuda")]
    fn cuda_kernels_match_the_candle_ops() -> Result<()> {
        use rand::SeedableRng;
        let cuda = chatterbox_cuda::open(0)?;
        let (b, t, u) = (2, 57, 480);
        let gen = SineGen::new(24000, 8, 0.1, 0.003, 10.0);
        // voiced and unvoiced frames, up to ~600 Hz
        let f0: Vec<f32> = (0..b * t)
            .map(|i| {
                if i % 7 < 2 {
                    0.0
                } else {
                    80.0 + ((i * 37) % 101) as f32 * 5.3
                }
            })
            .collect();
        let f0 = Tensor::from_vec(f0, (b, t), &Device::Cpu)?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let draws = SineDraws::sample(&mut rng, b, gen.harmonics(), t * u, &Device::Cpu)?;
        let want = gen.forward(&f0, u, &draws)?;
        let on_gpu = SineDraws::new(draws.phase.to_device(&cuda)?, draws.noise.to_device(&cuda)?);
        let got = gen.forward(&f0.to_device(&cuda)?, u, &on_gpu)?;
        assert_eq!(got.dims(), want.dims());
        // the same f64 phase and f32 operations; only sinf differs (CUDA's against the host's,
        // a few ulp of sine_amp = 0.1)
        let diff = (got.to_device(&Device::Cpu)? - &want)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert!(diff <= 5e-8, "max difference {diff}");
        // wrong draws are an error
        let short = SineDraws::new(on_gpu.phase.clone(), on_gpu.noise.narrow(2, 0, 10)?);
        assert!(gen.forward(&f0.to_device(&cuda)?, u, &short).is_err());
        Ok(())
    }
}
