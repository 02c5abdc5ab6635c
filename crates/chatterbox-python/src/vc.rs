//! The voice-conversion model behind `ChatterboxVC` (`chatterbox_rs/vc.py` holds the
//! reference's signatures and calls this). As with the text-to-speech models, the model sits
//! behind an `Arc` and `set_target_voice` replaces it copy-on-write.
use crate::device::DeviceSpec;
use crate::error::{Error, Result};
use crate::model::load_on;
use crate::worker;
use chatterbox_pipeline::{ChatterboxVc, PipelineError, VcOptions, Watermarker, S3GEN_SR};
use numpy::PyArray1;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

/// A loaded voice-conversion model.
#[pyclass(module = "chatterbox_rs._native", name = "VcModel", frozen)]
pub struct PyVc {
    model: Mutex<Arc<ChatterboxVc>>,
    watermark: Option<Arc<dyn Watermarker>>,
    device: String,
}

impl PyVc {
    fn current(&self) -> Arc<ChatterboxVc> {
        Arc::clone(&self.model.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

fn load_audio(path: &std::path::Path) -> Result<chatterbox_pipeline::Audio> {
    chatterbox_dsp::audio::load(path).map_err(|e| Error::Pipeline(PipelineError::Dsp(e)))
}

#[pymethods]
impl PyVc {
    /// Loads `s3gen.safetensors` (and the built-in target voice `conds.pt`) from `ckpt_dir`,
    /// or from the Hugging Face hub (cache) when it is `None`.
    #[staticmethod]
    #[pyo3(signature = (ckpt_dir, device, dtype=None, watermark=true))]
    fn load(
        py: Python<'_>,
        ckpt_dir: Option<PathBuf>,
        device: &str,
        dtype: Option<String>,
        watermark: bool,
    ) -> PyResult<Self> {
        let spec = DeviceSpec::resolve(device)?;
        let loaded = load_on(
            py,
            spec,
            dtype,
            ckpt_dir,
            crate::hub::vc_checkpoint,
            watermark,
            |dir, device, dt| Ok(ChatterboxVc::from_dir(dir, device, dt)?),
        )?;
        Ok(Self {
            model: Mutex::new(Arc::new(loaded.model)),
            watermark: loaded.watermark,
            device: loaded.device,
        })
    }

    /// Makes the first 10 s of the clip at `wav_fpath` the target voice.
    fn set_target_voice(&self, py: Python<'_>, wav_fpath: PathBuf) -> PyResult<()> {
        let mut model = (*self.current()).clone();
        let model = worker::run(py, "chatterbox-voice", move |_| {
            model.set_target_voice(&load_audio(&wav_fpath)?)?;
            Ok(model)
        })?;
        *self.model.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(model);
        Ok(())
    }

    /// Whether there is a target voice (built-in or set).
    fn has_target(&self) -> bool {
        self.current().target().is_some()
    }

    /// `audio` (a file) re-spoken in the target voice: 24 kHz float32 samples.
    #[pyo3(signature = (audio, seed=None, n_cfm_timesteps=None))]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        audio: PathBuf,
        seed: Option<u64>,
        n_cfm_timesteps: Option<usize>,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let model = self.current();
        let mut opts = VcOptions::default().with_seed(seed.unwrap_or_else(random_seed));
        opts.n_cfm_timesteps = n_cfm_timesteps;
        let mut wav = worker::run(py, "chatterbox-vc", move |cancel| {
            let source = load_audio(&audio)?;
            let mut wav = Vec::new();
            model.generate_stream(&source, &opts, &mut |_| {}, &mut |piece| {
                cancel.check()?;
                wav.extend_from_slice(piece);
                Ok(())
            })?;
            Ok(wav)
        })?;
        if let Some(w) = &self.watermark {
            w.apply(&mut wav, S3GEN_SR).map_err(Error::from)?;
        }
        Ok(PyArray1::from_vec(py, wav))
    }

    /// Where the model runs.
    #[getter]
    fn device(&self) -> String {
        self.device.clone()
    }
}

/// A fresh seed (the reference's conversion is unseeded).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
