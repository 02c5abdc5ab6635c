//! What the server needs of a loaded model: a [`SpeechModel`] streams 24 kHz audio chunk by
//! chunk in a chosen voice, and analyses reference clips into voice files. The pipeline's
//! models implement it through [`PipelineModel`](crate::PipelineModel); tests plug in fakes.
use chatterbox_dsp::Audio;
use chatterbox_pipeline::GenerateOptions;
use std::fmt;
use std::path::Path;

/// Sample rate of every model's output (S3Gen's 24 kHz).
pub const SAMPLE_RATE: u32 = 24_000;

/// An error of a model, boxed so fakes and the pipeline share one trait. A
/// [`chatterbox_pipeline::PipelineError`] inside is inspected to tell bad input (400) from
/// failures (500).
pub type ModelError = Box<dyn std::error::Error + Send + Sync>;

/// The audio of one text: chunks of 24 kHz mono samples as they become final. Dropping it
/// stops the generation.
pub type ChunkIter<'a> = Box<dyn Iterator<Item = Result<Vec<f32>, ModelError>> + 'a>;

/// A request for the built-in voice of a checkpoint that ships none (no `conds.pt`).
#[derive(Debug, thiserror::Error)]
#[error("model {0} has no built-in voice: pass a voice from the library (POST /v1/voices)")]
pub struct NoBuiltinVoice(pub ModelId);

/// The model names of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelId {
    /// `chatterbox`: the English model.
    English,
    /// `chatterbox-multilingual`: 23 languages.
    Multilingual,
    /// `chatterbox-turbo`.
    Turbo,
    /// `chatterbox-nano`.
    Nano,
}

impl ModelId {
    /// Every model, in the order `/v1/models` lists them.
    pub const ALL: [ModelId; 4] = [Self::English, Self::Multilingual, Self::Turbo, Self::Nano];

    /// The API name.
    pub fn name(self) -> &'static str {
        match self {
            Self::English => "chatterbox",
            Self::Multilingual => "chatterbox-multilingual",
            Self::Turbo => "chatterbox-turbo",
            Self::Nano => "chatterbox-nano",
        }
    }

    /// The model of an API name (not the OpenAI aliases; see
    /// [`ServerConfig::model_aliases`](crate::ServerConfig::model_aliases)).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl fmt::Display for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A loaded model that streams audio, owned by one device worker (calls come from that
/// worker's thread only, one at a time).
pub trait SpeechModel: Send {
    /// Which model this is.
    fn id(&self) -> ModelId;

    /// The model's generation defaults; the request's fields are applied on top.
    fn default_options(&self) -> GenerateOptions;

    /// Makes the voice saved at `path` (by [`SpeechModel::save_voice`]) the voice of the
    /// following streams; `None` restores the built-in voice.
    fn use_voice(&mut self, path: Option<&Path>) -> Result<(), ModelError>;

    /// Analyses a reference clip (any sample rate) and saves the voice to `path` atomically.
    /// The current voice is left as it was.
    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Result<(), ModelError>;

    /// Speaks `text` in the current voice: the audio as an iterator of chunks.
    fn stream<'a>(
        &'a self,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<ChunkIter<'a>, ModelError>;
}
