//! Checked checkpoint access: a missing key or a tensor of the wrong shape is a typed error
//! naming the full key, instead of candle's generic message.
use crate::{Result, SpeakerError};
use candle_core::Tensor;
use candle_nn::VarBuilder;

fn full_key(vb: &VarBuilder, name: &str) -> String {
    let prefix = vb.prefix();
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The tensor `name` under `vb`, which must have exactly `shape`. Converted to the
/// VarBuilder's dtype and device. Works with every candle backend (file backends and
/// shape-driven ones such as `VarMap`).
pub(crate) fn tensor(vb: &VarBuilder, name: &str, shape: &[usize]) -> Result<Tensor> {
    let err = match vb.get(shape, name) {
        Ok(t) => return Ok(t),
        Err(err) => err,
    };
    if !vb.contains_tensor(name) {
        return Err(SpeakerError::MissingWeight {
            key: full_key(vb, name),
        });
    }
    match vb.get_unchecked(name) {
        Ok(t) if t.dims() != shape => Err(SpeakerError::ShapeMismatch {
            key: full_key(vb, name),
            expected: shape.to_vec(),
            actual: t.dims().to_vec(),
        }),
        _ => Err(err.into()),
    }
}
