//! The work a device worker does for a request ([`Job`]) and what it sends back ([`Event`]),
//! with the admission slot a job holds until it is finished or dropped ([`Slot`]).
use crate::admission::Slot;
use crate::error::ApiError;
use crate::request::Overrides;
use chatterbox_dsp::Audio;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// What a speech job sends to its request, in order: audio, then `Done` or one `Error`.
#[derive(Debug)]
pub(crate) enum Event {
    /// 24 kHz samples that are final.
    Audio(Vec<f32>),
    /// The timings of sentences whose speech ends in the next `Audio` (sent before it).
    Timings(Vec<chatterbox_pipeline::SentenceTiming>),
    /// The generation failed or timed out; nothing follows.
    Error(ApiError),
    /// The audio is complete.
    Done {
        /// Whether the speech of some sentence was cut at `max_new_tokens` (the model never
        /// drew its stop token for it).
        truncated: bool,
    },
}

/// Speak a text.
#[derive(Debug)]
pub(crate) struct SpeechJob {
    /// Request id, for logs.
    pub id: u64,
    /// The text.
    pub text: String,
    /// The request's generation fields.
    pub overrides: Overrides,
    /// The server's cap on `max_new_tokens`.
    pub max_new_tokens: Option<usize>,
    /// The pronunciation lexicon the request named.
    pub lexicon: Option<Arc<chatterbox_pipeline::Lexicon>>,
    /// The voice file, `None` for the built-in voice.
    pub voice: Option<PathBuf>,
    /// When the request times out.
    pub deadline: Instant,
    /// Whether it asked for timestamps (SSE `timestamps` or the captioned answer): its words
    /// are then timed from T3's alignment heads where the model has them
    /// (`GenerateOptions::word_alignment`; one request at a time on the CPU only: a batch and
    /// a CUDA device estimate them, see `PipelineModel::stream`).
    pub word_timings: bool,
    /// Whether its audio is played as it arrives (a stream or SSE), so that it must keep
    /// pace with its listener; `false` for a whole file.
    pub live: bool,
    /// Where the audio goes; closed when the client has gone (the job stops then).
    pub tx: mpsc::UnboundedSender<Event>,
}

/// Analyse a reference clip and save the voice.
#[derive(Debug)]
pub(crate) struct VoiceJob {
    /// The decoded clip.
    pub audio: Arc<Audio>,
    /// Where to save the voice.
    pub path: PathBuf,
    /// The outcome.
    pub reply: oneshot::Sender<Result<(), ApiError>>,
}

/// A job for the worker of one model.
#[derive(Debug)]
pub(crate) enum Work {
    /// See [`SpeechJob`].
    Speech(SpeechJob),
    /// See [`VoiceJob`].
    Voice(VoiceJob),
}

/// A job and its admission slot (released when the job is dropped, done or not).
#[derive(Debug)]
pub(crate) struct Job {
    /// The work.
    pub work: Work,
    /// Held until the job is finished or dropped.
    pub _slot: Slot,
}
