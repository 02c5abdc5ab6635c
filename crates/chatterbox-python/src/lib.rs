//! `chatterbox_rs._native`: the Rust side of the `chatterbox_rs` Python package, a drop-in for
//! Resemble AI's `chatterbox-tts` on the chatterbox-rs pipeline. The Python modules
//! (`python/chatterbox_rs/`) carry the reference's classes, signatures and defaults and turn
//! the samples into torch tensors; this module loads the models, runs them off the GIL and
//! turns Rust errors into Python exceptions (see `error`).
//!
//! Beyond the reference: `stream` (NumPy chunks as they are made), `generate_many`
//! (continuous batching), `seed` and `max_new_tokens` keywords, and Ctrl-C that interrupts a
//! waiting call at once (see `worker`).

pub mod device;
pub mod error;
pub mod hub;
pub mod model;
pub mod options;
pub mod stream;
pub mod vc;
pub mod watermark;
pub mod worker;

use pyo3::prelude::*;

/// `get_supported_languages()`: `(id, name)` pairs of the multilingual model, in id order.
#[pyfunction]
fn supported_languages() -> Vec<(&'static str, &'static str)> {
    chatterbox_pipeline::ChatterboxMultilingualTts::supported_languages()
}

/// The GPU backends compiled into this build (`"cuda"`, `"metal"`).
#[pyfunction]
fn gpu_backends() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "cuda") {
        v.push("cuda");
    }
    if cfg!(feature = "metal") {
        v.push("metal");
    }
    v
}

/// `norm_loudness(wav, sr, target_lufs)` of Turbo: `wav` scaled to `target_lufs` (ITU-R BS.1770
/// integrated loudness, the `ebur128` crate in place of pyloudnorm); unchanged when the gain is
/// not finite (silence), as the reference.
#[pyfunction]
fn norm_loudness<'py>(
    py: Python<'py>,
    wav: numpy::PyReadonlyArray1<'py, f32>,
    sr: u32,
    target_lufs: f64,
) -> PyResult<Bound<'py, numpy::PyArray1<f32>>> {
    let mut samples = wav.as_slice()?.to_vec();
    chatterbox_pipeline::norm_loudness(&mut samples, sr, target_lufs)
        .map_err(error::Error::from)?;
    Ok(numpy::PyArray1::from_vec(py, samples))
}

/// The `chatterbox` command (speak, vc, serve, watermark) with `argv` (the program name
/// first), run without the GIL; returns its exit status. The command handles Ctrl-C itself
/// (speak and vc keep the audio finished so far; serve stops gracefully).
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> u8 {
    let code = py.detach(|| chatterbox_cli::run(argv));
    (0..=u8::MAX)
        .find(|&n| std::process::ExitCode::from(n) == code)
        .unwrap_or(1)
}

/// The native module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<model::PyTts>()?;
    m.add_class::<vc::PyVc>()?;
    m.add_class::<stream::ChunkIter>()?;
    m.add_function(wrap_pyfunction!(supported_languages, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_backends, m)?)?;
    m.add_function(wrap_pyfunction!(norm_loudness, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add("SAMPLE_RATE", chatterbox_pipeline::S3GEN_SR)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
