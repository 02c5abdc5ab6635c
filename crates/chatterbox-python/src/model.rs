//! The text-to-speech models behind `ChatterboxTTS`, `ChatterboxMultilingualTTS` and
//! `ChatterboxTurboTTS` (`chatterbox_rs/tts.py`, `mtl_tts.py`, `tts_turbo.py` hold the
//! reference's signatures and call this).
//!
//! The model sits behind an `Arc`: a call takes its own reference for as long as it runs (on
//! its worker thread), so several Python threads generate at once, and changing the voice
//! (`prepare_conditionals`) replaces the model's voice copy-on-write without waiting for them
//! (generations already running keep the voice they started with).
use crate::device::DeviceSpec;
use crate::error::{Error, Result};
use crate::options::generate_options;
use crate::stream::ChunkIter;
use crate::worker::{self, Cancel};
use chatterbox_pipeline::{
    BatchOptions, BatchOutput, ChatterboxMultilingualTts, ChatterboxTts, ChatterboxTurboTts,
    Conditionals, GenerateOptions, MultilingualT3, PipelineError, SpeechStream, Variant,
    Watermarker, S3GEN_SR,
};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

/// One of the three text-to-speech models.
#[derive(Debug, Clone)]
pub enum Tts {
    /// `ChatterboxTTS`.
    English(ChatterboxTts),
    /// `ChatterboxMultilingualTTS`.
    Multilingual(ChatterboxMultilingualTts),
    /// `ChatterboxTurboTTS` (Turbo or Nano).
    Turbo(ChatterboxTurboTts),
}

/// `$body` with `$m` bound to whichever model `$tts` holds.
macro_rules! each {
    ($tts:expr, $m:ident => $body:expr) => {
        match $tts {
            Tts::English($m) => $body,
            Tts::Multilingual($m) => $body,
            Tts::Turbo($m) => $body,
        }
    };
}

impl Tts {
    /// Loads `variant` from `dir` onto `device`.
    fn load(
        variant: Variant,
        dir: &std::path::Path,
        mtl: &MultilingualT3,
        device: &candle_core::Device,
        dtype: candle_core::DType,
    ) -> Result<Self> {
        Ok(match variant {
            Variant::English => Self::English(ChatterboxTts::from_dir(dir, device, dtype)?),
            Variant::Multilingual => Self::Multilingual(
                ChatterboxMultilingualTts::from_dir_with_model(dir, mtl, device, dtype)?,
            ),
            Variant::Turbo | Variant::Nano => Self::Turbo(ChatterboxTurboTts::from_dir(
                dir,
                variant == Variant::Nano,
                device,
                dtype,
            )?),
        })
    }

    /// The generation defaults of the model.
    pub fn default_options(&self) -> GenerateOptions {
        each!(self, m => m.default_options())
    }

    /// The current voice.
    pub fn conditionals(&self) -> Option<&Conditionals> {
        each!(self, m => m.conditionals())
    }

    /// The model's `stream`.
    pub fn stream(
        &self,
        text: &str,
        opts: &GenerateOptions,
    ) -> chatterbox_pipeline::Result<SpeechStream<'_>> {
        each!(self, m => m.stream(text, opts))
    }

    /// `generate` as the pipeline's (its `generate_stream` collected), stopping at the next
    /// speech token, flow or vocoder call once `cancel` is set. No watermark: the caller
    /// applies it to the whole.
    fn generate(&self, text: &str, opts: &GenerateOptions, cancel: &Cancel) -> Result<Vec<f32>> {
        let mut wav = Vec::new();
        let opts = &cancel.options(opts);
        each!(self, m => m.generate_stream(text, opts, &mut |_| {}, &mut |piece| {
            cancel.check()?;
            wav.extend_from_slice(piece);
            Ok(())
        }))?;
        Ok(wav)
    }

    /// Every text through one batch (continuous batching), in order; stops at the next decode
    /// step once `cancel` is set.
    fn generate_many(
        &self,
        texts: &[String],
        opts: &GenerateOptions,
        cancel: &Cancel,
    ) -> Result<Vec<Vec<f32>>> {
        let conds = self
            .conditionals()
            .cloned()
            .ok_or(PipelineError::NoConditionals)?;
        let slots = texts.len().clamp(1, chatterbox_pipeline::CHUNKS_PER_CALL);
        // each slot's cache holds the default positions, or what a smaller model has
        let limit = each!(self, m => m.t3().backbone().max_positions());
        let defaults = BatchOptions::default();
        let positions = defaults.positions.min(limit);
        let batch_opts = defaults.with_slots(slots).with_positions(positions);
        let mut batch = each!(self, m => m.batch(batch_opts.clone()))?;
        let mut audio: HashMap<u64, Vec<f32>> = HashMap::new();
        let mut ids = Vec::with_capacity(texts.len());
        for text in texts {
            let id = batch.add(&conds, text, opts)?;
            audio.insert(id, Vec::new());
            ids.push(id);
        }
        while !batch.is_empty() {
            cancel.check()?;
            for (id, out) in batch.step() {
                match out {
                    BatchOutput::Chunk(c) => {
                        if let Some(a) = audio.get_mut(&id) {
                            a.extend_from_slice(&c.samples);
                        }
                    }
                    BatchOutput::Failed(e) => return Err(e.into()),
                    _ => {}
                }
            }
        }
        Ok(ids
            .iter()
            .map(|id| audio.remove(id).unwrap_or_default())
            .collect())
    }

    /// The voice of a decoded clip, as `prepare_conditionals` analyses it.
    fn conditionals_from_audio(
        &self,
        audio: &chatterbox_pipeline::Audio,
        exaggeration: f32,
    ) -> Result<Conditionals> {
        Ok(each!(self, m => m.conditionals_from_audio(audio, exaggeration))?)
    }

    fn set_conditionals(&mut self, conds: Conditionals) {
        each!(self, m => m.set_conditionals(conds))
    }
}

/// Parses a variant name (`english`, `multilingual`, `turbo`, `nano`).
fn variant(name: &str) -> Result<Variant> {
    Variant::parse(name).map_err(|e| Error::Invalid(e.to_string()))
}

/// A loaded text-to-speech model (the native side of the three Python classes).
#[pyclass(module = "chatterbox_rs._native", name = "TtsModel", frozen)]
pub struct PyTts {
    model: Mutex<Arc<Tts>>,
    watermark: Option<Arc<dyn Watermarker>>,
    variant: Variant,
    device: String,
}

impl PyTts {
    /// The current model (a reference for one call).
    fn current(&self) -> Arc<Tts> {
        Arc::clone(&self.model.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Changes the model copy-on-write (calls in flight keep the model they took).
    fn update(&self, f: impl FnOnce(&mut Tts)) {
        let mut guard = self.model.lock().unwrap_or_else(PoisonError::into_inner);
        f(Arc::make_mut(&mut guard));
    }

    fn options(&self, model: &Tts, opts: &Bound<'_, PyDict>) -> Result<GenerateOptions> {
        generate_options(model.default_options(), opts)
    }

    fn watermarked(&self, mut wav: Vec<f32>) -> Result<Vec<f32>> {
        if let Some(w) = &self.watermark {
            w.apply(&mut wav, S3GEN_SR)?;
        }
        Ok(wav)
    }
}

#[pymethods]
impl PyTts {
    /// Loads a model: `variant` (`english`, `multilingual`, `turbo`, `nano`) from `ckpt_dir`,
    /// or from the Hugging Face hub (cache) when it is `None`.
    #[staticmethod]
    #[pyo3(signature = (variant, ckpt_dir, device, dtype=None, t3_model=None, watermark=true))]
    fn load(
        py: Python<'_>,
        variant: &str,
        ckpt_dir: Option<PathBuf>,
        device: &str,
        dtype: Option<String>,
        t3_model: Option<String>,
        watermark: bool,
    ) -> PyResult<Self> {
        let v = self::variant(variant)?;
        let spec = DeviceSpec::resolve(device)?;
        let requested_dtype = dtype;
        let mtl = match t3_model.as_deref() {
            None => MultilingualT3::V2,
            Some(name) => MultilingualT3::parse(name).map_err(|e| Error::Invalid(e.to_string()))?,
        };
        let hub_mtl = mtl.clone();
        let loaded = load_on(
            py,
            spec,
            requested_dtype,
            ckpt_dir,
            move || crate::hub::tts_checkpoint(v, &hub_mtl),
            watermark,
            move |dir, device, dt| Tts::load(v, dir, &mtl, device, dt),
        )?;
        Ok(Self {
            model: Mutex::new(Arc::new(loaded.model)),
            watermark: loaded.watermark,
            variant: v,
            device: loaded.device,
        })
    }

    /// Makes the clip at `wav_fpath` the voice of the following generations.
    #[pyo3(signature = (wav_fpath, exaggeration=0.5, norm_loudness=true))]
    fn prepare_conditionals(
        &self,
        py: Python<'_>,
        wav_fpath: PathBuf,
        exaggeration: f32,
        norm_loudness: bool,
    ) -> PyResult<()> {
        if matches!(self.variant, Variant::Turbo | Variant::Nano) {
            self.update(|m| {
                if let Tts::Turbo(t) = m {
                    t.set_norm_loudness(norm_loudness);
                }
            });
        }
        let model = self.current();
        let conds = worker::run(py, "chatterbox-voice", move |_| {
            let audio = chatterbox_dsp::audio::load(&wav_fpath)
                .map_err(|e| Error::Pipeline(PipelineError::Dsp(e)))?;
            model.conditionals_from_audio(&audio, exaggeration)
        })?;
        self.update(|m| m.set_conditionals(conds));
        Ok(())
    }

    /// Whether the model has a voice (built-in or prepared).
    fn has_conditionals(&self) -> bool {
        self.current().conditionals().is_some()
    }

    /// Speech for `text`: 24 kHz float32 samples. `opts`: `generate`'s keywords.
    fn generate<'py>(
        &self,
        py: Python<'py>,
        text: String,
        opts: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let model = self.current();
        let o = self.options(&model, opts)?;
        let wav = worker::run(py, "chatterbox-generate", move |cancel| {
            model.generate(&text, &o, cancel)
        })?;
        Ok(PyArray1::from_vec(py, self.watermarked(wav)?))
    }

    /// `text` streamed token by token: an iterator of NumPy chunks.
    fn stream(&self, text: String, opts: &Bound<'_, PyDict>) -> PyResult<ChunkIter> {
        let model = self.current();
        let o = self.options(&model, opts)?;
        Ok(ChunkIter::start(model, self.watermark.clone(), text, o)?)
    }

    /// Every text of `texts` spoken through one batch: a list of arrays, in order.
    fn generate_many<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        opts: &Bound<'py, PyDict>,
    ) -> PyResult<Vec<Bound<'py, PyArray1<f32>>>> {
        let model = self.current();
        let o = self.options(&model, opts)?;
        let wavs = worker::run(py, "chatterbox-batch", move |cancel| {
            model.generate_many(&texts, &o, cancel)
        })?;
        wavs.into_iter()
            .map(|w| Ok(PyArray1::from_vec(py, self.watermarked(w)?)))
            .collect()
    }

    /// The model variant's name.
    #[getter]
    fn variant(&self) -> &'static str {
        self.variant.name()
    }

    /// Where the model runs (`cpu`, `cuda:0`, `metal:0`).
    #[getter]
    fn device(&self) -> String {
        self.device.clone()
    }

    /// Whether outputs carry the Perth watermark.
    #[getter]
    fn watermarked_output(&self) -> bool {
        self.watermark.is_some()
    }
}

/// Loads a model on a worker thread (`chatterbox-load`): opens the device `spec`, takes the
/// dtype `dtype` (the device's default when `None`) and the checkpoint folder `ckpt_dir` (else
/// the one `hub` finds in the hub's cache), builds the model with `build`, and the Perth
/// watermarker unless `watermark` is off.
pub(crate) fn load_on<M: Send + 'static>(
    py: Python<'_>,
    spec: DeviceSpec,
    dtype: Option<String>,
    ckpt_dir: Option<PathBuf>,
    hub: impl FnOnce() -> Result<PathBuf> + Send + 'static,
    watermark: bool,
    build: impl FnOnce(&std::path::Path, &candle_core::Device, candle_core::DType) -> Result<M>
        + Send
        + 'static,
) -> Result<Loaded<M>> {
    worker::run(py, "chatterbox-load", move |_| {
        let device = spec.open()?;
        let dt = crate::device::dtype(dtype.as_deref(), &device)?;
        let dir = match ckpt_dir {
            Some(d) => d,
            None => hub()?,
        };
        let model = build(&dir, &device, dt)?;
        let watermark = crate::watermark::perth(&device, watermark)?;
        Ok(Loaded {
            model,
            watermark,
            device: describe(&device),
        })
    })
}

/// What [`load_on`] loaded.
pub(crate) struct Loaded<M> {
    pub model: M,
    /// The Perth watermarker (`None`: outputs unmarked).
    pub watermark: Option<Arc<dyn Watermarker>>,
    /// The device's name ([`describe`]).
    pub device: String,
}

/// A short name of a device (`cpu`, `cuda:0`, `metal:0`).
pub fn describe(device: &candle_core::Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}
