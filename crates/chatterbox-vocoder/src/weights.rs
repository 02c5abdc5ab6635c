//! Checkpoint access: shape-checked tensors and weight-norm folding (torch
//! `nn.utils.parametrizations.weight_norm` with `dim=0`, as hifigan.py and f0_predictor.py use it).
use crate::{Result, VocoderError};
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

fn full_key(vb: &VarBuilder, name: &str) -> String {
    let prefix = vb.prefix();
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// `name` under `vb`, checked against `shape`. A builder without the key (a `VarMap` in tests
/// and benches) creates it with `init`; a file without it is a [`VocoderError::MissingWeight`].
pub(crate) fn get(
    vb: &VarBuilder,
    shape: impl Into<Shape>,
    name: &str,
    init: Init,
) -> Result<Tensor> {
    let shape = shape.into();
    if vb.contains_tensor(name) {
        let t = vb.get_unchecked(name)?;
        if t.dims() != shape.dims() {
            return Err(VocoderError::ShapeMismatch {
                key: full_key(vb, name),
                expected: shape.dims().to_vec(),
                actual: t.dims().to_vec(),
            });
        }
        Ok(t)
    } else {
        vb.get_with_hints(shape, name, init)
            .map_err(|_| VocoderError::MissingWeight {
                key: full_key(vb, name),
                tried: name.to_string(),
            })
    }
}

const PARAM_G: &str = "parametrizations.weight.original0";
const PARAM_V: &str = "parametrizations.weight.original1";

/// The effective weight of a weight-normed convolution, folded once: `g * v / ||v||` with the
/// norm over every dimension but the first. Accepts torch's parametrization keys
/// (`parametrizations.weight.original0/1`), the legacy `weight_g` / `weight_v`, and an already
/// folded `weight` (after `remove_weight_norm`).
pub(crate) fn weight_norm(vb: &VarBuilder, shape: impl Into<Shape>) -> Result<Tensor> {
    let shape = shape.into();
    let dims = shape.dims().to_vec();
    let mut g_shape = vec![1; dims.len()];
    g_shape[0] = dims[0];
    let (g_key, v_key) = if vb.contains_tensor(PARAM_G) {
        (PARAM_G, PARAM_V)
    } else if vb.contains_tensor("weight_g") {
        ("weight_g", "weight_v")
    } else if vb.contains_tensor("weight") || !vb.contains_tensor(PARAM_V) {
        // A plain weight; a VarMap creates it. A file with none of the forms ends here too.
        return get(vb, shape, "weight", candle_nn::init::DEFAULT_KAIMING_NORMAL).map_err(
            |e| match e {
                VocoderError::MissingWeight { key, .. } => VocoderError::MissingWeight {
                    key: key.trim_end_matches(".weight").to_string(),
                    tried: format!("{PARAM_G}/{PARAM_V}, weight_g/weight_v, weight"),
                },
                e => e,
            },
        );
    } else {
        (PARAM_G, PARAM_V)
    };
    let g = get(vb, g_shape, g_key, Init::Const(1.0))?;
    let v = get(vb, shape, v_key, Init::Const(0.0))?;
    let mut sq = v.sqr()?;
    for d in (1..dims.len()).rev() {
        sq = sq.sum_keepdim(d)?;
    }
    let scale = (g / sq.sqrt()?)?;
    Ok(v.broadcast_mul(&scale)?)
}

/// A builder backend that holds no tensor: it records the name and shape of every weight a
/// model asks for and hands back zeros, so building the model lists its state dict.
#[derive(Clone, Default)]
struct ShapeRecorder(Arc<Mutex<BTreeMap<String, Vec<usize>>>>);

impl SimpleBackend for ShapeRecorder {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        if let Ok(mut shapes) = self.0.lock() {
            shapes.insert(name.to_string(), s.dims().to_vec());
        }
        Tensor::zeros(s, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("{name}: the shape recorder holds no tensor")
    }

    fn contains_tensor(&self, _: &str) -> bool {
        false
    }
}

/// Every weight `build` reads and its shape, sorted by name, with weight-normed convolutions
/// in their plain (`weight`) form. `build` runs once on the CPU, with zeros for every weight.
pub(crate) fn record_weight_shapes(
    build: impl FnOnce(VarBuilder) -> Result<()>,
) -> Result<Vec<(String, Vec<usize>)>> {
    let recorder = ShapeRecorder::default();
    build(VarBuilder::from_backend(
        Box::new(recorder.clone()),
        DType::F32,
        Device::Cpu,
    ))?;
    let shapes = recorder.0.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(shapes.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};
    use std::collections::HashMap;

    fn vb(ts: Vec<(&str, Tensor)>) -> VarBuilder<'static> {
        let map: HashMap<String, Tensor> =
            ts.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        VarBuilder::from_tensors(map, DType::F32, &Device::Cpu)
    }

    #[test]
    fn folds_both_key_forms_and_plain_weights() -> Result<()> {
        let dev = Device::Cpu;
        let v = Tensor::new(&[[[3f32, 4.0]], [[1.0, 0.0]]], &dev)?; // (2, 1, 2)
        let g = Tensor::new(&[[[10f32]], [[-2.0]]], &dev)?;
        let want = vec![6f32, 8.0, -2.0, 0.0];
        for (gk, vk) in [(PARAM_G, PARAM_V), ("weight_g", "weight_v")] {
            let w = weight_norm(&vb(vec![(gk, g.clone()), (vk, v.clone())]), (2, 1, 2))?;
            assert_eq!(w.flatten_all()?.to_vec1::<f32>()?, want);
        }
        let w = weight_norm(&vb(vec![("weight", v.clone())]), (2, 1, 2))?;
        assert_eq!(w.flatten_all()?.to_vec1::<f32>()?, vec![3.0, 4.0, 1.0, 0.0]);
        Ok(())
    }

    #[test]
    fn missing_and_misshaped_weights_are_typed_errors() -> Result<()> {
        let dev = Device::Cpu;
        let v = Tensor::zeros((2, 1, 3), DType::F32, &dev)?;
        let g = Tensor::ones((2, 1, 1), DType::F32, &dev)?;
        let keys = vec![
            ("conv.parametrizations.weight.original0", g),
            ("conv.parametrizations.weight.original1", v),
        ];
        let err = weight_norm(&vb(keys).pp("conv"), (2, 1, 2));
        match err {
            Err(VocoderError::ShapeMismatch {
                key,
                expected,
                actual,
            }) => {
                assert_eq!(key, format!("conv.{PARAM_V}"));
                assert_eq!((expected, actual), (vec![2, 1, 2], vec![2, 1, 3]));
            }
            other => panic!("expected a shape mismatch, got {other:?}"),
        }
        match weight_norm(&vb(vec![]).pp("ups.0"), (2, 1, 2)) {
            Err(VocoderError::MissingWeight { key, .. }) => assert_eq!(key, "ups.0"),
            other => panic!("expected missing weights, got {other:?}"),
        }
        Ok(())
    }
}
