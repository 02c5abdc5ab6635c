//! Checked access to checkpoint tensors: a missing key or a wrong shape is a typed error naming
//! the full key, not a panic or a bare candle error.
use crate::checkpoint::full_key;
use crate::linear::Linear;
use crate::{Result, S3GenError};
use candle_core::Tensor;
use candle_nn::{LayerNorm, VarBuilder};

/// The tensor `name` under `vb`, which must have `shape`. Works with file backends and with
/// shape-driven ones (`VarMap`, which creates the tensor).
pub(crate) fn tensor(vb: &VarBuilder, name: &str, shape: &[usize]) -> Result<Tensor> {
    let err = match vb.get(shape, name) {
        Ok(t) => return Ok(t),
        Err(err) => err,
    };
    if !vb.contains_tensor(name) {
        return Err(S3GenError::MissingWeights {
            what: "speech tokenizer",
            key: full_key(vb, name),
        });
    }
    match vb.get_unchecked(name) {
        Ok(t) if t.dims() != shape => Err(S3GenError::ShapeMismatch {
            key: full_key(vb, name),
            expected: shape.to_vec(),
            actual: t.dims().to_vec(),
        }),
        _ => Err(err.into()),
    }
}

/// `nn.Linear(d_in, d_out, bias)`: `weight` is `(d_out, d_in)`.
pub(crate) fn linear(d_in: usize, d_out: usize, bias: bool, vb: VarBuilder) -> Result<Linear> {
    let w = tensor(&vb, "weight", &[d_out, d_in])?;
    let b = if bias {
        Some(tensor(&vb, "bias", &[d_out])?)
    } else {
        None
    };
    Ok(Linear::from_weights(w, b)?)
}

/// `nn.LayerNorm(d, eps)` with weight and bias.
pub(crate) fn layer_norm(d: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    let w = tensor(&vb, "weight", &[d])?;
    let b = tensor(&vb, "bias", &[d])?;
    Ok(LayerNorm::new(w, b, eps))
}
