//! Padding masks. Port of chatterbox/models/s3gen/utils/mask.py (`make_pad_mask`,
//! `add_optional_chunk_mask` without chunking) and decoder.py `mask_to_bias` (upstream 5de7a54).
//!
//! Lengths live on the host, so a batch without padding builds no mask tensors at all: applying
//! an all-ones mask is an exact no-op (`x * 1`, `+ 0`, `-inf` never hit), so skipping it changes
//! no number.

use candle_core::{DType, Device, Result, Tensor};

/// Valid lengths of a padded batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lengths {
    lengths: Vec<usize>,
    max_len: usize,
}

impl Lengths {
    /// `lengths[b]` valid frames of `max_len` (every length must be in `1..=max_len`).
    pub(crate) fn new(lengths: Vec<usize>, max_len: usize) -> Self {
        Self { lengths, max_len }
    }

    /// Every row full.
    pub(crate) fn full(batch: usize, max_len: usize) -> Self {
        Self::new(vec![max_len; batch], max_len)
    }

    /// Whether some row is shorter than `max_len`.
    pub(crate) fn has_padding(&self) -> bool {
        self.lengths.iter().any(|&l| l < self.max_len)
    }

    /// Every length multiplied by `factor` (an upsampling layer).
    pub(crate) fn scaled(&self, factor: usize) -> Self {
        Self::new(
            self.lengths.iter().map(|l| l * factor).collect(),
            self.max_len * factor,
        )
    }

    fn flags(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.lengths.len() * self.max_len);
        for &l in &self.lengths {
            v.extend((0..self.max_len).map(|t| u8::from(t < l)));
        }
        v
    }

    /// `~make_pad_mask(lengths)`: 1 for valid frames, `(batch, 1, max_len)` u8.
    pub(crate) fn non_pad_mask(&self, device: &Device) -> Result<Tensor> {
        Tensor::from_vec(self.flags(), (self.lengths.len(), 1, self.max_len), device)
    }

    /// An additive attention bias over keys, `(batch, 1, 1, max_len)`: 0 for valid keys,
    /// `masked` for padded ones; `None` without padding.
    pub(crate) fn key_bias(
        &self,
        masked: f32,
        dtype: DType,
        device: &Device,
    ) -> Result<Option<Tensor>> {
        if !self.has_padding() {
            return Ok(None);
        }
        let v: Vec<f32> = self
            .flags()
            .into_iter()
            .map(|f| if f == 1 { 0.0 } else { masked })
            .collect();
        Ok(Some(
            Tensor::from_vec(v, (self.lengths.len(), 1, 1, self.max_len), device)?
                .to_dtype(dtype)?,
        ))
    }
}

/// The estimator's masks built from a float `(batch, 1, T)` mask tensor as the reference takes
/// it: the multiplier `(batch, T, 1)` and `mask_to_bias(add_optional_chunk_mask(mask.bool()))`
/// as an additive `(batch, 1, 1, T)` bias of 0 / -1e10 (a row with no valid frame attends
/// everywhere, as `add_optional_chunk_mask` forces it). No host synchronisation.
pub(crate) fn masks_from_tensor(mask: &Tensor, dtype: DType) -> Result<(Tensor, Tensor)> {
    let (b, _, t) = mask.dims3()?;
    let mul = mask.to_dtype(dtype)?.reshape((b, t, 1))?;
    // f32 arithmetic only (no integer reductions, which not every backend has)
    let valid = mask.to_dtype(DType::F32)?.ne(0.0)?.to_dtype(DType::F32)?; // 1 / 0
    let row_empty = valid.max_keepdim(2)?.affine(-1.0, 1.0)?; // 1 where a row has no valid frame
    let keep = valid.broadcast_maximum(&row_empty)?;
    let bias = keep
        .affine(1.0e10, -1.0e10)? // 0 kept, -1e10 masked
        .to_dtype(dtype)?
        .reshape((b, 1, 1, t))?;
    Ok((mul, bias))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_from_mask_tensor() -> Result<()> {
        let mask = Tensor::new(&[[[1f32, 1.0, 0.0]], [[0.0, 0.0, 0.0]]], &Device::Cpu)?;
        let (mul, bias) = masks_from_tensor(&mask, DType::F32)?;
        assert_eq!(mul.dims(), &[2, 3, 1]);
        let bias = bias.flatten_all()?.to_vec1::<f32>()?;
        // a row with no valid frame attends everywhere (add_optional_chunk_mask)
        assert_eq!(bias, vec![0.0, 0.0, -1.0e10, 0.0, 0.0, 0.0]);
        Ok(())
    }

    #[test]
    fn lengths_build_masks() -> Result<()> {
        let l = Lengths::new(vec![3, 1], 3);
        assert!(l.has_padding() && !Lengths::full(2, 3).has_padding());
        let m = l
            .non_pad_mask(&Device::Cpu)?
            .flatten_all()?
            .to_vec1::<u8>()?;
        assert_eq!(m, vec![1, 1, 1, 1, 0, 0]);
        let b = l.key_bias(f32::NEG_INFINITY, DType::F32, &Device::Cpu)?;
        let b = b.map(|b| b.flatten_all()?.to_vec1::<f32>()).transpose()?;
        assert_eq!(
            b,
            Some(vec![
                0.0,
                0.0,
                0.0,
                0.0,
                f32::NEG_INFINITY,
                f32::NEG_INFINITY
            ])
        );
        assert_eq!(l.scaled(2).non_pad_mask(&Device::Cpu)?.dims(), &[2, 1, 6]);
        Ok(())
    }
}
