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
pub type ChunkIter<'a> = Box<dyn Iterator<Item = Result<SpeechChunk, ModelError>> + 'a>;

/// A piece of a text's audio, as a [`ChunkIter`] hands it out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpeechChunk {
    /// 24 kHz mono samples that are final.
    pub samples: Vec<f32>,
    /// Whether the speech of a sentence that ends in this chunk was cut at `max_new_tokens`
    /// (the model never drew its stop token: see `chatterbox_pipeline::Truncation`). The
    /// server tells the client (`X-Chatterbox-Truncated`, or the SSE `done` event).
    pub truncated: bool,
    /// The timings of the sentences whose speech ended with this chunk (see
    /// `chatterbox_pipeline::AudioChunk::captions`); empty from models that give none.
    pub captions: Vec<chatterbox_pipeline::SentenceTiming>,
}

impl From<Vec<f32>> for SpeechChunk {
    /// Samples of speech that was not cut.
    fn from(samples: Vec<f32>) -> Self {
        Self {
            samples,
            truncated: false,
            captions: Vec::new(),
        }
    }
}

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
    /// The current voice is left as it was. The server calls it with the clip it keeps (mono,
    /// 24 kHz), at upload and when a voice is first used by a model loaded later.
    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Result<(), ModelError>;

    /// Speaks `text` in the current voice: the audio as an iterator of chunks.
    fn stream<'a>(
        &'a self,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<ChunkIter<'a>, ModelError>;

    /// Requests the model speaks at once: its batch's size, 1 without batching. A worker
    /// holding the model admits this many requests beyond the queue.
    fn slots(&self) -> usize {
        1
    }

    /// A batch that speaks several requests at once ([`RequestBatch`]), or `None` when the
    /// model speaks one request at a time (the default).
    fn batch(&self) -> Option<Result<Box<dyn RequestBatch + '_>, ModelError>> {
        None
    }
}

/// What a [`RequestBatch::step`] hands on for one request.
#[derive(Debug)]
pub enum BatchItem {
    /// 24 kHz samples that are final; `last` on the request's last chunk (it has left the
    /// batch).
    Audio {
        /// The samples.
        samples: Vec<f32>,
        /// Whether the request is complete.
        last: bool,
        /// Whether a sentence that ends in these samples was cut at `max_new_tokens` (as
        /// `SpeechChunk::truncated`).
        truncated: bool,
    },
    /// The request failed and has left the batch.
    Failed(ModelError),
    /// The timings of sentences whose speech ended in the request's next
    /// [`BatchItem::Audio`] (handed on before it).
    Timings(Vec<chatterbox_pipeline::SentenceTiming>),
}

/// Requests spoken together by one model (continuous batching): added at any step, each in
/// its own voice, advanced together by [`RequestBatch::step`]. The server's view of a batch,
/// for any [`SpeechModel`]; the pipeline's models give theirs through
/// `chatterbox_pipeline::SpeechBatch`.
pub trait RequestBatch {
    /// Whether another request can be added now.
    fn has_room(&self) -> bool;

    /// Requests in the batch.
    fn len(&self) -> usize;

    /// Whether the batch is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `text` in the voice saved at `voice` (`None`: the built-in voice); bad input is
    /// an error here. Returns the request's id in the batch.
    fn add(
        &mut self,
        voice: Option<&Path>,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<u64, ModelError>;

    /// One round for every request: hands `emit` the audio each made, as soon as it is made
    /// (a client gets its chunk before the round's later work), and failures.
    fn step(&mut self, emit: &mut dyn FnMut(u64, BatchItem));

    /// Drops a request (its client went away or its deadline passed).
    fn cancel(&mut self, id: u64);

    /// Says whether request `id` is played as it arrives (`live`, the default) or kept whole
    /// (a file, with no listener waiting for its next chunk), for a batch that orders its work
    /// by the listeners' deadlines. The default ignores it.
    fn set_live(&mut self, id: u64, live: bool) {
        let _ = (id, live);
    }

    /// Where the batch's time went so far (logged when a batch empties), if it knows.
    fn timings(&self) -> Option<chatterbox_pipeline::BatchTimings> {
        None
    }

    /// Tells the batch the load the worker expects once the requests it holds (seated and
    /// queued) are all in: that many `streams`, at a mean `round`. A batch that paces its
    /// streams' chunks plans the streams it starts now on it
    /// (`SpeechBatch::set_expected_round`, `set_expected_streams`). The default ignores it.
    fn expect_load(&mut self, round: Option<std::time::Duration>, streams: usize) {
        let _ = (round, streams);
    }

    /// Analyses a reference clip and saves the voice to `path`, as
    /// [`SpeechModel::save_voice`] does, while the batch holds the model: the worker calls it
    /// between rounds, so a voice upload (or a voice's first use by this model) does not wait
    /// for the batch to empty. The requests in the batch are left as they were. `None` (the
    /// default) when the batch cannot: the worker then stops admitting requests, lets the
    /// batch drain and analyses with the model itself.
    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Option<Result<(), ModelError>> {
        let _ = (audio, path);
        None
    }
}
