#![doc = include_str!("../README.md")]

mod cancel;
mod captions;
mod checkpoint;
mod conditionals;
mod config;
mod crossfade;
mod draws;
mod dtype;
mod error;
#[cfg(feature = "hub")]
mod hub;
#[cfg(feature = "hub")]
pub use hub::{download_checkpoint, download_vc_checkpoint};
mod kernels;
mod memory;
mod options;
#[cfg(feature = "hub")]
mod perth_download;
mod plan;
mod progress;
mod quantize_checkpoint;
mod s3gen;
mod stream_synth;
mod torch_file;
mod tts;
mod vc;
mod vc_chunks;
mod voice;
mod watermark;

pub use cancel::Cancel;
pub use captions::{SentenceTiming, WordTiming};
pub use checkpoint::{CheckpointFiles, MultilingualT3, Variant, CONDS_FILE};
pub use conditionals::Conditionals;
pub use config::{ChatterboxConfig, S3GenConfig, CONFIG_FILE};
pub use draws::{Draws, SeededDraws};
pub use dtype::{fast_dtype, fast_dtype_for};
pub use error::{PipelineError, Result};
pub use memory::{device_memory, resident_memory_bytes, DeviceMemory};
pub use options::{GenerateOptions, CROSSFADE_MS};
pub use progress::Progress;
pub use quantize_checkpoint::{partial_folder, write_quantized_checkpoint, QuantizedCheckpoint};
pub use s3gen::{
    S3Gen, S3GenOptions, S3GenRef, DEC_COND_LEN, S3GEN_SIL, S3GEN_SR, S3_SR, SAMPLES_PER_TOKEN,
};
pub use stream_synth::{
    vocode_batch, FlowJob, StreamChunk, StreamSchedule, StreamingSynth, StreamingVocoder, VocodeJob,
};
pub use tts::{
    drop_invalid_tokens, AudioChunk, BatchOutput, BatchTimings, ChatterboxMultilingualTts,
    ChatterboxTts, ChatterboxTurboTts, ChunkOutput, Pace, SpeechBatch, SpeechReport, SpeechStream,
    StreamId, Truncation, CHUNKS_PER_CALL, FIRST_AUDIO_BUDGET, MIN_REF_SECS, SPEECH_EOS,
    SPEECH_SOS, SPEECH_VOCAB_SIZE, TURBO_MIN_REF_SECS, TURBO_TARGET_LUFS,
};
pub use vc::{ChatterboxVc, VcOptions};
pub use vc_chunks::VcProgress;
pub use voice::{integrated_loudness, norm_loudness, VoiceClip};
pub use watermark::{
    find_perth_checkpoint, perth_cache_path, perth_watermarker, StreamWatermarker, Watermarker,
    STREAM_CONTEXT_S,
};

// Re-exported so callers need not depend on the component crates for common types.
pub use candle_core::{DType, Device};
pub use chatterbox_dsp::Audio;
pub use chatterbox_t3::{BatchOptions, QuantizeReport, Sampling, WeightFormat};
pub use chatterbox_text::Lexicon;
