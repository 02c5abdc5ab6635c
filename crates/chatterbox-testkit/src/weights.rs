//! Tiny models' weights for the crates' public-API tests (`tests/reuse.rs`): a state_dict of
//! deterministic pseudo-random values under every key a model's builder reads, so a test can
//! build the model from a plain `HashMap<String, Tensor>` as another project would.
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use std::collections::HashMap;

/// A uniform value in `[-1, 1)` for element `i` of tensor `k` (splitmix64).
pub fn uniform(k: usize, i: usize) -> f32 {
    let mut x = (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_add(1);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// `n` N(0, `std`) values for tensor `k` (Box-Muller on [`uniform`]): the same on every run,
/// for tests whose bounds were measured on fixed values (`Tensor::randn` on the CPU cannot be
/// seeded).
pub fn normals(k: usize, std: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let a = (1.0 - uniform(k, 2 * i)) / 2.0; // (0, 1]
            let b = uniform(k, 2 * i + 1) * std::f32::consts::PI;
            std * (-2.0 * a.ln()).sqrt() * b.cos()
        })
        .collect()
}

/// A state_dict holding every tensor `build` reads, with the shapes it asks for (recorded on a
/// `VarMap`) and deterministic pseudo-random values: matrices and kernels of unit-variance
/// outputs (`sqrt(3 / fan_in)` uniform), 1-D gains near 1, small biases and means, positive
/// running variances.
pub fn state_dict<T, E: std::fmt::Display>(
    build: impl Fn(VarBuilder) -> std::result::Result<T, E>,
) -> Result<HashMap<String, Tensor>> {
    let shapes = VarMap::new();
    build(VarBuilder::from_varmap(&shapes, DType::F32, &Device::Cpu)).map_err(Error::case)?;
    let vars = shapes
        .data()
        .lock()
        .map_err(|_| Error::case("the VarMap's lock is poisoned"))?;
    let mut keys: Vec<&String> = vars.keys().collect();
    keys.sort();
    let mut out = HashMap::new();
    for (k, key) in keys.into_iter().enumerate() {
        let dims = vars[key].dims().to_vec();
        let n: usize = dims.iter().product();
        let fan_in = dims.iter().skip(1).product::<usize>().max(1) as f32;
        let one_d = dims.len() == 1;
        let values: Vec<f32> = (0..n)
            .map(|i| {
                let u = uniform(k, i);
                if key.ends_with("running_var") {
                    1.0 + 0.5 * u
                } else if one_d && key.ends_with("weight") {
                    1.0 + 0.2 * u
                } else if one_d {
                    0.1 * u
                } else {
                    u * (3.0 / fan_in).sqrt()
                }
            })
            .collect();
        let tensor = Tensor::from_vec(values, dims, &Device::Cpu).map_err(Error::case)?;
        out.insert(key.clone(), tensor);
    }
    Ok(out)
}
