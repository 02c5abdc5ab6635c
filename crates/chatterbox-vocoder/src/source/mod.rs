//! Port of `SourceModuleHnNSF` from chatterbox/models/s3gen/hifigan.py (upstream 5de7a54): the
//! neural-source-filter excitation.
#[cfg(feature = "cuda")]
pub(crate) mod cuda_sine;
mod draws;
mod sine_gen;

pub use draws::SineDraws;
pub use sine_gen::SineGen;

use crate::weights::get;
use crate::Result;
use candle_core::Tensor;
use candle_nn::{Init, VarBuilder};

/// Harmonic sine source merged into one excitation: `tanh(Linear(H -> 1)(SineGen(f0)))`.
///
/// The reference also draws a separate noise branch (`randn_like(uv) * sine_amp / 3`) that
/// `HiFTGenerator.inference` discards; it is not drawn here.
#[derive(Debug, Clone)]
pub struct SourceModuleHnNSF {
    l_sin_gen: SineGen,
    /// `(1, H)`.
    weight: Tensor,
    /// `(1, 1, 1)`.
    bias: Tensor,
}

impl SourceModuleHnNSF {
    /// `SourceModuleHnNSF(sampling_rate, upsample_scale, harmonic_num, sine_amp, add_noise_std,
    /// voiced_threshod)`; loads `l_linear`.
    pub fn new(
        sampling_rate: usize,
        harmonic_num: usize,
        sine_amp: f64,
        add_noise_std: f64,
        voiced_threshold: f64,
        vb: VarBuilder,
    ) -> Result<Self> {
        let l_sin_gen = SineGen::new(
            sampling_rate,
            harmonic_num,
            sine_amp,
            add_noise_std,
            voiced_threshold,
        );
        let h = l_sin_gen.harmonics();
        let vl = vb.pp("l_linear");
        let bound = 1.0 / (h as f64).sqrt();
        let init = Init::Uniform {
            lo: -bound,
            up: bound,
        };
        let weight = get(&vl, (1, h), "weight", init)?;
        let bias = get(&vl, 1, "bias", init)?.reshape((1, 1, 1))?;
        Ok(Self {
            l_sin_gen,
            weight,
            bias,
        })
    }

    /// The sine generator.
    pub fn sine_gen(&self) -> &SineGen {
        &self.l_sin_gen
    }

    /// Frame-rate `f0` `(B, T)` to the `(B, 1, T * upsample)` excitation.
    pub fn forward(&self, f0: &Tensor, upsample: usize, draws: &SineDraws) -> Result<Tensor> {
        let sines = self.l_sin_gen.forward(f0, upsample, draws)?;
        let merged = self
            .weight
            .broadcast_matmul(&sines)?
            .broadcast_add(&self.bias)?;
        Ok(merged.tanh()?)
    }
}
