//! The crate's error type.

/// Everything that can go wrong in chatterbox-vocoder. Bad input is an error, never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VocoderError {
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
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
    #[error("checkpoint has no weights for {key} (looked for {tried})")]
    MissingWeight {
        /// The parameter (full key without the weight-norm suffix).
        key: String,
        /// The names that were looked for.
        tried: String,
    },
    /// The configuration is inconsistent.
    #[error("invalid vocoder config: {0}")]
    InvalidConfig(String),
    /// An input that is empty, mis-shaped or not finite.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// The input.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, VocoderError>;

pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> VocoderError {
    VocoderError::InvalidInput {
        what,
        reason: reason.into(),
    }
}
