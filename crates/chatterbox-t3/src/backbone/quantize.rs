//! Quantizing a loaded backbone's projections in place ([`Backbone::quantize`]).
use super::Backbone;
use crate::weight_format::WeightFormat;
use crate::Result;
use rayon::prelude::*;

/// What [`Backbone::quantize`] (and [`T3::quantize`](crate::T3::quantize)) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantizeReport {
    /// The format asked for.
    pub format: WeightFormat,
    /// Projections now stored in `format`.
    pub quantized: usize,
    /// Projections left in the model's dtype (input width not a multiple of the format's
    /// block, or the exact format).
    pub kept: usize,
    /// Bytes of the projections' weights before.
    pub bytes_before: usize,
    /// Bytes of the projections' weights after.
    pub bytes_after: usize,
}

impl Backbone {
    /// Stores every attention and MLP projection in `format` (see [`WeightFormat`]); norms,
    /// biases and position tables are unchanged. [`WeightFormat::F32`] changes nothing. The
    /// layers are quantized in parallel (rayon), each replacing its full-precision weight as it
    /// is done. Quantized projections run on the CPU only: on another device this is an error
    /// (and nothing is changed) unless the format is exact.
    pub fn quantize(&mut self, format: WeightFormat) -> Result<QuantizeReport> {
        let mut linears = match self {
            Self::Llama(m) => m.linears_mut(),
            Self::Gpt2(m) => m.linears_mut(),
        };
        let bytes_before = linears.iter().map(|l| l.weight_bytes()).sum();
        if !format.is_exact() {
            // quantize into new layers first, so an error leaves the model as it was
            let done: Vec<_> = linears
                .par_iter()
                .map(|l| l.quantized(format))
                .collect::<Result<_>>()?;
            for (l, q) in linears.iter_mut().zip(done) {
                **l = q;
            }
        }
        let quantized = linears
            .iter()
            .filter(|l| !format.is_exact() && l.format() == format)
            .count();
        Ok(QuantizeReport {
            format,
            quantized,
            kept: linears.len() - quantized,
            bytes_before,
            bytes_after: linears.iter().map(|l| l.weight_bytes()).sum(),
        })
    }

    /// The format of the projections: the quantized one if any projection is quantized, else
    /// [`WeightFormat::F32`].
    pub fn weight_format(&self) -> WeightFormat {
        // narrow layers may keep their tensors (Turbo's tiny test model quantizes only its
        // MLP outputs), so look past the first
        self.named_projections("")
            .iter()
            .find_map(|p| p.linear.quantized_weight().map(|q| q.format()))
            .unwrap_or_default()
    }
}
