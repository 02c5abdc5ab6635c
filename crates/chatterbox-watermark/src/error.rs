//! The crate's error type.
use std::path::PathBuf;

/// Everything that can go wrong in chatterbox-watermark. Bad input (empty, non-finite or too
/// short signals, unusable sample rates) and bad checkpoints are errors, never panics.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatermarkError {
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// STFT or resampling failed (chatterbox-dsp).
    #[error(transparent)]
    Dsp(#[from] chatterbox_dsp::DspError),
    /// The checkpoint file does not exist.
    #[error(
        "Perth checkpoint {path} not found: pass the path of perth_net_250000.pth.tar (in the \
         resemble-perth 1.0.1 wheel at {}) or of a converted .safetensors",
        crate::PERTH_CHECKPOINT_IN_WHEEL
    )]
    CheckpointNotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The checkpoint could not be read as a torch zip checkpoint or safetensors file.
    #[error("cannot read Perth checkpoint {path}: {reason}")]
    CorruptCheckpoint {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The checkpoint lacks a weight the network needs.
    #[error("Perth checkpoint has no tensor {key}")]
    MissingWeight {
        /// Full key name.
        key: String,
    },
    /// A checkpoint tensor has the wrong shape.
    #[error("Perth checkpoint tensor {key}: expected shape {expected:?}, found {actual:?}")]
    ShapeMismatch {
        /// Full key name.
        key: String,
        /// Shape the config implies.
        expected: Vec<usize>,
        /// Shape in the file.
        actual: Vec<usize>,
    },
    /// The configuration is inconsistent or asks for something not implemented.
    #[error("invalid Perth config: {0}")]
    InvalidConfig(String),
    /// The signal has no samples.
    #[error("{what}: audio is empty (0 samples)")]
    EmptySignal {
        /// The operation.
        what: &'static str,
    },
    /// A sample is NaN or infinite.
    #[error("{what}: sample {index} is not finite ({value})")]
    NonFinite {
        /// The operation.
        what: &'static str,
        /// First offending sample.
        index: usize,
        /// Its value.
        value: f32,
    },
    /// The signal is shorter than the STFT needs.
    #[error("{what}: {len} samples at {sample_rate} Hz is too short, need at least {min}")]
    SignalTooShort {
        /// The operation.
        what: &'static str,
        /// Samples given.
        len: usize,
        /// Their rate.
        sample_rate: u32,
        /// Samples needed at that rate.
        min: usize,
    },
    /// A tensor or spectrogram argument of the wrong shape.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// The argument.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// A sample rate outside the supported range.
    #[error("unsupported sample rate {got} Hz (supported: {min}..={max} Hz)")]
    UnsupportedSampleRate {
        /// The rate given.
        got: u32,
        /// Lowest supported rate.
        min: u32,
        /// Highest supported rate.
        max: u32,
    },
    /// No frame of the signal is loud enough to carry a watermark (silence): the detector's
    /// masked mean is 0 / 0, for which the reference returns NaN.
    #[error(
        "no frame of the signal is loud enough to carry a watermark (silent audio): nothing \
         to detect"
    )]
    NothingToDetect,
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, WatermarkError>;
