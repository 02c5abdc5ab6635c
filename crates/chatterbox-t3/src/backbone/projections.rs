//! The backbone's projections by name: what a quantized checkpoint stores for each one (the
//! layer as the model holds it: q/k/v and gate/up fused, the query scale folded in) and the
//! stored layers a load takes in place of the full-precision tensors ([`Preloaded`]).
use super::Linear;
use crate::{Result, T3Error};
use candle_nn::VarBuilder;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

/// One projection of a loaded backbone.
#[derive(Debug)]
pub(crate) struct NamedProjection<'a> {
    /// Its name under the backbone's prefix (`layers.0.self_attn.qkv_proj`, `h.3.attn.c_attn`).
    pub(crate) name: String,
    /// The checkpoint tensors it is built from, under the same prefix: a quantized checkpoint
    /// stores the projection in their place.
    pub(crate) sources: Vec<String>,
    /// The layer.
    pub(crate) linear: &'a Linear,
}

impl<'a> NamedProjection<'a> {
    /// `prefix.name`, built from `prefix.source` for each of `sources`.
    pub(crate) fn new(prefix: &str, name: &str, sources: &[&str], linear: &'a Linear) -> Self {
        Self {
            name: format!("{prefix}.{name}"),
            sources: sources.iter().map(|s| format!("{prefix}.{s}")).collect(),
            linear,
        }
    }
}

/// Layers read from a quantized checkpoint, by full name (`tfmr.layers.0.self_attn.qkv_proj`),
/// which the layers' constructors take instead of loading their tensors.
#[derive(Debug, Default)]
pub(crate) struct Preloaded {
    layers: HashMap<String, Linear>,
    taken: RefCell<BTreeSet<String>>,
}

impl Preloaded {
    /// The layers, by full name.
    pub(crate) fn new(layers: HashMap<String, Linear>) -> Self {
        Self {
            layers,
            taken: RefCell::default(),
        }
    }

    /// The stored layer `name` under `vb`'s prefix, checked to be `[out, in]`; `None` when the
    /// checkpoint holds it as tensors (full precision, or a width the format's blocks do not
    /// fit).
    pub(crate) fn take(
        &self,
        vb: &VarBuilder,
        name: &str,
        out: usize,
        inp: usize,
    ) -> Result<Option<Linear>> {
        let key = format!("{}.{name}", vb.prefix());
        let Some(layer) = self.layers.get(&key) else {
            return Ok(None);
        };
        let (o, i) = layer.dims();
        if (o, i) != (out, inp) {
            return Err(T3Error::ShapeMismatch {
                key: format!("{key}.weight"),
                expected: vec![out, inp],
                actual: vec![o, i],
            });
        }
        self.taken.borrow_mut().insert(key);
        Ok(Some(layer.clone()))
    }

    /// The stored layers no constructor took (a checkpoint of another shape), sorted.
    pub(crate) fn untaken(&self) -> Vec<String> {
        let taken = self.taken.borrow();
        let mut v: Vec<String> = self
            .layers
            .keys()
            .filter(|k| !taken.contains(*k))
            .cloned()
            .collect();
        v.sort();
        v
    }
}
