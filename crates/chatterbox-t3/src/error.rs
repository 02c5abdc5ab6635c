//! The crate's error type.

/// Everything that can go wrong in chatterbox-t3. Bad input is an error, never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum T3Error {
    /// A tensor operation failed (includes missing checkpoint keys as candle reports them).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A checkpoint tensor has a shape the configuration does not allow.
    #[error("checkpoint tensor {key}: expected shape {expected:?}, found {actual:?}")]
    ShapeMismatch {
        /// Full key name.
        key: String,
        /// Shape the config implies.
        expected: Vec<usize>,
        /// Shape in the file.
        actual: Vec<usize>,
    },
    /// A checkpoint lacks a tensor the configuration needs.
    #[error("checkpoint has no tensor {key} (is it a T3 checkpoint of this variant?)")]
    MissingWeight {
        /// Full key name.
        key: String,
    },
    /// A checkpoint lacks weights the model needs, or is of another T3 variant.
    #[error("checkpoint is not a {expected} T3: {reason}")]
    WrongVariant {
        /// The variant the caller asked for (or the only ones this crate knows).
        expected: &'static str,
        /// What is missing or unexpected.
        reason: String,
    },
    /// A quantized T3 file ([`crate::T3::load_quantized`]) that cannot be used: damaged,
    /// truncated, or not one [`crate::T3::write_quantized`] wrote.
    #[error("quantized T3 file: {0}")]
    QuantizedFile(String),
    /// A configuration value is out of range.
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    /// An input that is empty, mis-shaped or out of range.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// The input.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The text (with its start/stop tokens) does not fit the learned text position table.
    #[error("text of {len} tokens is longer than the text position table ({max} tokens incl. start/stop)")]
    TextTooLong {
        /// Tokens given (incl. start/stop).
        len: usize,
        /// Positions the checkpoint has.
        max: usize,
    },
    /// Generation would run past the model's position tables or the preallocated cache.
    #[error("sequence of {len} positions exceeds the limit of {max} ({what})")]
    SequenceTooLong {
        /// Which table or cache limits it.
        what: &'static str,
        /// Positions needed.
        len: usize,
        /// Positions available.
        max: usize,
    },
    /// A logits processor parameter is out of its valid range (same checks as transformers).
    #[error("invalid sampling option {name} = {value}: {reason}")]
    InvalidSampling {
        /// Option name (`top_p`, `min_p`, ...).
        name: &'static str,
        /// The value given.
        value: f64,
        /// The allowed range.
        reason: &'static str,
    },
    /// The model produced non-finite logits (NaN or all `-inf`), so no token can be drawn.
    #[error("no token can be sampled at step {step}: every processed logit is -inf or NaN")]
    NoValidToken {
        /// 0-based generation step.
        step: usize,
    },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, T3Error>;

pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> T3Error {
    T3Error::InvalidInput {
        what,
        reason: reason.into(),
    }
}
