//! The state every handler shares ([`App`]): configuration, engine, voice library, metrics,
//! the draining flag; and how a request's `model` and `voice` resolve.
use crate::config::{ServerConfig, OPENAI_MODELS, OPENAI_VOICES};
use crate::engine::Engine;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::model::ModelId;
use crate::refusal::RefusalLog;
use crate::voices::{valid_voice_name, VoiceLibrary};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A request's id, given by the outermost middleware (in the request's extensions, the
/// `x-request-id` response header and every log line of the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestId(pub u64);

/// Shared server state.
#[derive(Debug)]
pub(crate) struct App {
    pub config: ServerConfig,
    pub engine: Engine,
    pub voices: Option<VoiceLibrary>,
    pub metrics: Metrics,
    /// Warns about refused requests, at most once a second per reason.
    pub refusals: RefusalLog,
    /// Set at shutdown: new requests get 503 while in-flight ones finish.
    pub draining: AtomicBool,
    next_id: AtomicU64,
}

impl App {
    pub(crate) fn new(config: ServerConfig, engine: Engine, voices: Option<VoiceLibrary>) -> Self {
        Self {
            config,
            engine,
            voices,
            metrics: Metrics::default(),
            refusals: RefusalLog::default(),
            draining: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        }
    }

    /// A fresh request id.
    pub(crate) fn request_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The served model a request's `model` names: an API name, a configured alias or one of
    /// OpenAI's names (the first loaded model unless configured).
    pub(crate) fn resolve_model(&self, name: &str) -> Result<ModelId, ApiError> {
        let loaded = self.engine.models();
        if loaded.is_empty() {
            return Err(ApiError::loading());
        }
        let not_found = || {
            ApiError::not_found(
                Some("model"),
                "model_not_found",
                format!(
                    "model {name:?} is not served here; available: {}",
                    loaded
                        .iter()
                        .map(|m| m.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        };
        let id = if let Some(m) = ModelId::from_name(name) {
            m
        } else if let Some(m) = self.config.model_aliases.get(name) {
            if loaded.contains(m) {
                *m
            } else {
                loaded[0]
            }
        } else if OPENAI_MODELS.contains(&name) {
            loaded[0]
        } else {
            return Err(not_found());
        };
        if loaded.contains(&id) {
            Ok(id)
        } else {
            Err(not_found())
        }
    }

    /// The voice file a request's `voice` names for `model`: `None` for the built-in voice
    /// (no voice, `default`, or an OpenAI voice name not mapped to a library voice).
    pub(crate) fn resolve_voice(
        &self,
        voice: Option<&str>,
        model: ModelId,
    ) -> Result<Option<PathBuf>, ApiError> {
        let Some(given) = voice else { return Ok(None) };
        let name = match self.config.voice_aliases.get(given) {
            Some(n) => n.as_str(),
            None if given == "default" || OPENAI_VOICES.contains(&given) => return Ok(None),
            None => given,
        };
        let missing = |why: &str| {
            ApiError::not_found(
                Some("voice"),
                "voice_not_found",
                format!("voice {given:?} not found{why}"),
            )
        };
        if !valid_voice_name(name) {
            return Err(missing(""));
        }
        let Some(lib) = &self.voices else {
            return Err(missing(" (the server has no voice library)"));
        };
        let path = lib.path(name, model);
        if path.is_file() {
            Ok(Some(path))
        } else {
            Err(missing(&format!(" for model {model}")))
        }
    }
}
