//! The crate's error type.

/// Everything that can go wrong in chatterbox-s3gen. Bad input is an error, never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum S3GenError {
    /// A tensor operation failed (includes missing or mis-shaped checkpoint keys as candle
    /// reports them).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// Feature extraction failed.
    #[error(transparent)]
    Dsp(#[from] chatterbox_dsp::DspError),
    /// The speaker encoder (CAMPPlus, chatterbox-speaker) failed in
    /// [`RefEncoder`](crate::RefEncoder).
    #[error(transparent)]
    Speaker(Box<chatterbox_speaker::SpeakerError>),
    /// A checkpoint tensor has the wrong shape.
    #[error("checkpoint tensor {key}: expected shape {expected:?}, found {actual:?}")]
    ShapeMismatch {
        /// Full key name.
        key: String,
        /// Shape the config implies.
        expected: Vec<usize>,
        /// Shape in the file.
        actual: Vec<usize>,
    },
    /// A checkpoint lacks weights the model needs.
    #[error("checkpoint has no {what} weights (looked for {key:?})")]
    MissingWeights {
        /// Which part of the model.
        what: &'static str,
        /// A key that was looked for, with the `VarBuilder`'s prefix
        /// (`flow.input_embedding.weight`).
        key: String,
    },
    /// Audio at a sample rate the model is not defined for.
    #[error("{what}: audio must be {expected} Hz, got {got} Hz")]
    UnsupportedSampleRate {
        /// The input.
        what: &'static str,
        /// The rate given.
        got: u32,
        /// The rate required.
        expected: u32,
    },
    /// A clip that is digital silence (every sample is 0): its voice cannot be embedded.
    #[error("{what}: audio is silent (all {len} samples are 0)")]
    SilentAudio {
        /// The input.
        what: &'static str,
        /// Its length in samples.
        len: usize,
    },
    /// An input that is empty, mis-shaped or out of range.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// The input.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, S3GenError>;

impl From<chatterbox_speaker::SpeakerError> for S3GenError {
    fn from(e: chatterbox_speaker::SpeakerError) -> Self {
        Self::Speaker(Box::new(e))
    }
}
