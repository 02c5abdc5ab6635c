//! `generate`'s keywords (a dict from the Python side) onto the pipeline's options, starting
//! from the model's defaults. A keyword that is absent or `None` keeps the default; an unknown
//! one is a `ValueError` (a misspelt option never passes silently).
use crate::error::{Error, Result};
use chatterbox_pipeline::GenerateOptions;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The keywords understood, each with what it sets.
pub const KEYWORDS: [&str; 13] = [
    "exaggeration",
    "cfg_weight",
    "temperature",
    "repetition_penalty",
    "min_p",
    "top_p",
    "top_k",
    "language_id",
    "seed",
    "max_new_tokens",
    "n_cfm_timesteps",
    "greedy",
    "speed",
];

fn value<'py>(d: &Bound<'py, PyDict>, key: &str) -> Result<Option<Bound<'py, PyAny>>> {
    Ok(d.get_item(key)
        .map_err(Error::Python)?
        .filter(|v| !v.is_none()))
}

fn bad(key: &str, e: PyErr) -> Error {
    Error::Invalid(format!("{key}: {e}"))
}

fn float(d: &Bound<'_, PyDict>, key: &str) -> Result<Option<f32>> {
    value(d, key)?
        .map(|v| {
            v.extract::<f64>()
                .map(|x| x as f32)
                .map_err(|e| bad(key, e))
        })
        .transpose()
}

fn count(d: &Bound<'_, PyDict>, key: &str) -> Result<Option<usize>> {
    value(d, key)?
        .map(|v| v.extract::<usize>().map_err(|e| bad(key, e)))
        .transpose()
}

/// `defaults` with the keywords of `d` applied.
pub fn generate_options(mut o: GenerateOptions, d: &Bound<'_, PyDict>) -> Result<GenerateOptions> {
    for key in d.keys() {
        let name: String = key.extract().map_err(Error::Python)?;
        if !KEYWORDS.contains(&name.as_str()) {
            return Err(Error::Invalid(format!(
                "unknown generation option {name:?}; expected one of {}",
                KEYWORDS.join(", ")
            )));
        }
    }
    if let Some(x) = float(d, "exaggeration")? {
        o.exaggeration = x;
    }
    if let Some(x) = float(d, "cfg_weight")? {
        o.cfg_weight = x;
    }
    if let Some(x) = float(d, "temperature")? {
        o.temperature = x;
    }
    if let Some(x) = float(d, "repetition_penalty")? {
        o.repetition_penalty = x;
    }
    if let Some(x) = float(d, "min_p")? {
        o.min_p = x;
    }
    if let Some(x) = float(d, "top_p")? {
        o.top_p = x;
    }
    if let Some(x) = count(d, "top_k")? {
        o.top_k = x;
    }
    if let Some(x) = count(d, "max_new_tokens")? {
        o.max_new_tokens = x;
    }
    if let Some(x) = count(d, "n_cfm_timesteps")? {
        o.n_cfm_timesteps = Some(x);
    }
    if let Some(x) = float(d, "speed")? {
        o.speed = x;
    }
    if let Some(v) = value(d, "greedy")? {
        o.greedy = v.is_truthy().map_err(Error::Python)?;
    }
    if let Some(v) = value(d, "seed")? {
        o.seed = Some(v.extract::<u64>().map_err(|e| bad("seed", e))?);
    }
    if let Some(v) = value(d, "language_id")? {
        let lang: String = v.extract().map_err(|e| bad("language_id", e))?;
        if !lang.is_empty() {
            o.language = Some(lang.to_lowercase());
        }
    }
    o.validate()?;
    Ok(o)
}
