//! [`SpeechModel`] for the pipeline's models (English, multilingual, Turbo, Nano): the
//! built-in voice is kept aside so a request's library voice never outlives the request.
use crate::model::{ChunkIter, ModelError, ModelId, NoBuiltinVoice, SpeechModel};
use chatterbox_dsp::Audio;
use chatterbox_pipeline::{
    ChatterboxMultilingualTts, ChatterboxTts, ChatterboxTurboTts, Conditionals, Device,
    GenerateOptions, Variant,
};
use std::path::Path;

/// One of the pipeline's models.
#[derive(Debug)]
enum Inner {
    English(ChatterboxTts),
    Multilingual(ChatterboxMultilingualTts),
    Turbo(ChatterboxTurboTts),
}

/// Calls `$body` with `$m` bound to the model inside `$inner`, whatever its type.
macro_rules! with_model {
    ($inner:expr, $m:ident => $body:expr) => {
        match $inner {
            Inner::English($m) => $body,
            Inner::Multilingual($m) => $body,
            Inner::Turbo($m) => $body,
        }
    };
}

/// A pipeline model served by a worker, with its built-in voice (`conds.pt`) kept aside.
#[derive(Debug)]
pub struct PipelineModel {
    inner: Inner,
    builtin: Option<Conditionals>,
    device: Device,
    /// Whether the model's current voice is the one asked for (false after restoring a
    /// built-in voice that the checkpoint does not have).
    voice_set: bool,
}

impl PipelineModel {
    fn new(inner: Inner) -> Self {
        let (builtin, device) =
            with_model!(&inner, m => (m.conditionals().cloned(), m.t3().device().clone()));
        let voice_set = builtin.is_some();
        Self {
            inner,
            builtin,
            device,
            voice_set,
        }
    }
}

impl From<ChatterboxTts> for PipelineModel {
    fn from(m: ChatterboxTts) -> Self {
        Self::new(Inner::English(m))
    }
}

impl From<ChatterboxMultilingualTts> for PipelineModel {
    fn from(m: ChatterboxMultilingualTts) -> Self {
        Self::new(Inner::Multilingual(m))
    }
}

impl From<ChatterboxTurboTts> for PipelineModel {
    fn from(m: ChatterboxTurboTts) -> Self {
        Self::new(Inner::Turbo(m))
    }
}

impl SpeechModel for PipelineModel {
    fn id(&self) -> ModelId {
        match with_model!(&self.inner, m => m.variant()) {
            Variant::English => ModelId::English,
            Variant::Multilingual => ModelId::Multilingual,
            Variant::Turbo => ModelId::Turbo,
            Variant::Nano => ModelId::Nano,
        }
    }

    fn default_options(&self) -> GenerateOptions {
        with_model!(&self.inner, m => m.default_options())
    }

    fn use_voice(&mut self, path: Option<&Path>) -> Result<(), ModelError> {
        let conds = match path {
            Some(p) => Some(Conditionals::load(p, &self.device)?),
            None => self.builtin.clone(),
        };
        // Without a built-in voice the model keeps the last one; `voice_set` makes streams
        // refuse it instead of speaking in a previous request's voice.
        self.voice_set = conds.is_some();
        if let Some(c) = conds {
            with_model!(&mut self.inner, m => m.set_conditionals(c));
        }
        Ok(())
    }

    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Result<(), ModelError> {
        with_model!(&mut self.inner, m => {
            let previous = m.conditionals().cloned();
            let result = m.prepare_conditionals_from_audio(audio, 0.5);
            let saved = match (&result, m.conditionals()) {
                (Ok(()), Some(c)) => c.save(path).map_err(ModelError::from),
                (Err(_), _) | (Ok(()), None) => Ok(()),
            };
            let restored = previous.is_some();
            if let Some(c) = previous {
                m.set_conditionals(c);
            }
            self.voice_set &= restored;
            result?;
            saved
        })
    }

    fn stream<'a>(
        &'a self,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<ChunkIter<'a>, ModelError> {
        if !self.voice_set {
            return Err(Box::new(NoBuiltinVoice(self.id())));
        }
        with_model!(&self.inner, m => {
            let s = m.stream(text, opts)?;
            Ok(Box::new(s.map(|c| c.map(|c| c.samples).map_err(ModelError::from))))
        })
    }
}
