//! Port of `FSQCodebook` / `FSQVectorQuantization` in s3tokenizer/model_v2.py: finite scalar
//! quantisation of an 8-dim projection, 3 levels per dimension, 3^8 = 6561 codes.
use super::weights;
use crate::linear::Linear;
use crate::Result;
use candle_core::{DType, Module, Tensor, D};
use candle_nn::VarBuilder;

/// Dimensions of the projection (`Linear(dim, 8)`).
pub const FSQ_DIM: usize = 8;
/// Levels per dimension.
pub const FSQ_LEVEL: usize = 3;
/// Codes: `FSQ_LEVEL ^ FSQ_DIM`.
pub const CODEBOOK_SIZE: usize = 6561;
/// The reference's `0.9990000128746033` (the f32 nearest 0.999).
const SHRINK: f64 = 0.999_000_012_874_603_3;

/// The FSQ quantiser (`quantizer` in the checkpoint, `quantizer._codebook.project_down`).
///
/// <https://github.com/xingchensong/S3Tokenizer/blob/main/s3tokenizer/model_v2.py>
/// `FSQVectorQuantization`, `FSQCodebook`
#[derive(Debug, Clone)]
pub struct FSQVectorQuantization {
    project_down: Linear,
    /// `(8,)`: `3^i`.
    powers: Tensor,
}

impl FSQVectorQuantization {
    /// Loads `_codebook.project_down` under `vb` (the `quantizer` prefix).
    pub fn new(dim: usize, vb: VarBuilder) -> Result<Self> {
        let project_down =
            weights::linear(dim, FSQ_DIM, true, vb.pp("_codebook").pp("project_down"))?;
        let powers: Vec<f32> = (0..FSQ_DIM)
            .map(|i| FSQ_LEVEL.pow(i as u32) as f32)
            .collect();
        let powers = Tensor::from_vec(powers, FSQ_DIM, vb.device())?;
        Ok(Self {
            project_down,
            powers,
        })
    }

    /// `project_down(x)` in f32: the pre-quantisation projection `(batch, frames, 8)` of encoder
    /// states `(batch, frames, dim)`.
    pub fn project(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.project_down.forward(x)?.to_dtype(DType::F32)?)
    }

    /// `encode`: the codes `(batch, frames)` (u32, `< 6561`) of encoder states
    /// `(batch, frames, dim)`: digit `i` is `round(tanh(h_i) * 0.999) + 1`, the code
    /// `sum_i digit_i * 3^i`.
    pub fn encode(&self, x: &Tensor) -> Result<Tensor> {
        let h = (self.project(x)?.tanh()? * SHRINK)?;
        // |h| < 1, so torch.round (half to even) is -1 below -0.5, +1 above 0.5, 0 otherwise
        // (ties included); comparisons keep that exact on every backend.
        let digit =
            ((h.gt(0.5)?.to_dtype(DType::F32)? - h.lt(-0.5)?.to_dtype(DType::F32)?)? + 1.0)?;
        // small integers: the weighted sum is exact in f32 (no matmul, which TF32 could round)
        let code = digit.broadcast_mul(&self.powers)?.sum(D::Minus1)?;
        Ok(code.to_dtype(DType::U32)?)
    }
}
