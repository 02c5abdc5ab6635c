#![doc = include_str!("../README.md")]

mod admission;
mod app;
mod auth;
mod capacity;
mod captioned;
mod config;
mod encoder;
mod engine;
mod error;
mod flac;
mod format;
mod info;
mod job;
mod listen;
mod metrics;
mod model;
#[cfg(feature = "mp3")]
mod mp3;
mod opus;
mod pipeline_model;
mod queue_wait;
mod refusal;
mod request;
mod server;
mod speech;
mod sse;
mod voices;
mod voices_api;
mod worker;

pub use capacity::round_budget;
pub use config::{ServerConfig, MAX_INPUT_CHARS, OPENAI_MODELS, OPENAI_VOICES};
pub use encoder::{encode_file, encoder, EncodeError, Encoder};
pub use engine::{DeviceModels, Loader, MemoryProbe};
pub use error::{ApiError, ServerError};
pub use format::{AudioFormat, StreamFormat};
pub use model::{
    BatchItem, ChunkIter, ModelError, ModelId, NoBuiltinVoice, RequestBatch, SpeechChunk,
    SpeechModel, SAMPLE_RATE,
};
pub use pipeline_model::{PipelineModel, CHUNK_GRID};
pub use request::{Overrides, SpeechRequest, OPTION_RANGES};
pub use server::{serve, shutdown_signal, Server};
pub use voices::{valid_voice_name, VoiceLibrary};
