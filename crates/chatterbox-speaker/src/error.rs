//! The crate's error type.
use std::path::PathBuf;

/// Everything that can go wrong in chatterbox-speaker. Bad input (audio or checkpoint) is an
/// error naming the problem, never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpeakerError {
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// Feature extraction failed (this includes empty audio and NaN/infinite samples, which
    /// chatterbox-dsp reports with the index of the first bad sample).
    #[error(transparent)]
    Dsp(#[from] chatterbox_dsp::DspError),
    /// A checkpoint file could not be opened or parsed.
    #[error("{path}: cannot load checkpoint ({source})")]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What candle reported.
        source: candle_core::Error,
    },
    /// A checkpoint lacks a tensor the model needs.
    #[error("checkpoint has no tensor {key:?}")]
    MissingWeight {
        /// Full key name.
        key: String,
    },
    /// A checkpoint tensor has the wrong shape.
    #[error("checkpoint tensor {key:?}: expected shape {expected:?}, found {actual:?}")]
    ShapeMismatch {
        /// Full key name.
        key: String,
        /// Shape the configuration implies.
        expected: Vec<usize>,
        /// Shape in the checkpoint.
        actual: Vec<usize>,
    },
    /// A configuration value the port does not support.
    #[error("unsupported configuration {field}: {reason}")]
    UnsupportedConfig {
        /// The field (Python name).
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// Audio at a sample rate the model is not defined for.
    #[error("{what}: audio must be {expected} Hz, got {got} Hz (resample it first, e.g. with chatterbox_dsp::resample)")]
    UnsupportedSampleRate {
        /// The input.
        what: String,
        /// The rate given.
        got: u32,
        /// The rate required.
        expected: u32,
    },
    /// A clip that is digital silence (every sample is 0): the reference would return an
    /// embedding that does not depend on the input at all.
    #[error("{what}: audio is silent (all {len} samples are 0)")]
    SilentAudio {
        /// The input.
        what: String,
        /// Its length in samples.
        len: usize,
    },
    /// A clip shorter than the model can embed.
    #[error("{what}: {len} samples is too short, need at least {min}")]
    TooShort {
        /// The input.
        what: String,
        /// Samples given.
        len: usize,
        /// Samples needed.
        min: usize,
    },
    /// An input tensor or list that is empty, mis-shaped or out of range.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// The input.
        what: String,
        /// Why.
        reason: String,
    },
    /// An embedding came out as the zero vector (every projected unit was cut by the final
    /// ReLU), so it cannot be L2-normalised; the reference would return NaN.
    #[error("embedding {index} is the zero vector and cannot be normalised")]
    DegenerateEmbedding {
        /// Which utterance (or partial).
        index: usize,
    },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, SpeakerError>;

pub(crate) fn invalid(what: impl Into<String>, reason: impl Into<String>) -> SpeakerError {
    SpeakerError::InvalidInput {
        what: what.into(),
        reason: reason.into(),
    }
}
