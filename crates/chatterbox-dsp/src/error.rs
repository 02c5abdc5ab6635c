//! The crate's error type.
use std::path::PathBuf;

/// Everything that can go wrong in chatterbox-dsp. Bad input is always an error, never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DspError {
    /// A file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The container or codec is not one this crate decodes.
    #[error("{source_name}: unsupported audio format ({reason})")]
    UnsupportedFormat {
        /// File name or `<memory>`.
        source_name: String,
        /// What the decoder said.
        reason: String,
    },
    /// The stream is corrupt or could not be decoded.
    #[error("{source_name}: cannot decode audio ({reason})")]
    Decode {
        /// File name or `<memory>`.
        source_name: String,
        /// What the decoder said.
        reason: String,
    },
    /// The audio is longer than the decoder was allowed to decode
    /// ([`MAX_DECODED_SECONDS`](crate::audio::MAX_DECODED_SECONDS) unless the caller gave
    /// another limit). Nothing past the limit was decoded or allocated.
    #[error(
        "{source_name}: the audio is longer than the limit of {seconds_limit} s ({})",
        claimed_seconds.map_or_else(
            || "decoding stopped when it passed the limit".to_string(),
            |s| format!("its header says {s:.1} s"),
        )
    )]
    TooLong {
        /// File name or `<memory>`.
        source_name: String,
        /// The limit, in seconds.
        seconds_limit: f64,
        /// The length the file's header claims, in seconds, when the file was refused before
        /// decoding; `None` when decoding stopped as the audio passed the limit.
        claimed_seconds: Option<f64>,
    },
    /// A WAV file could not be written.
    #[error("{path}: cannot write WAV ({reason})")]
    Encode {
        /// The file.
        path: PathBuf,
        /// What the encoder said.
        reason: String,
    },
    /// A signal has no samples.
    #[error("{what}: audio is empty (0 samples)")]
    EmptyAudio {
        /// The signal (file name, argument).
        what: String,
    },
    /// A signal is shorter than the operation needs.
    #[error("{what}: {len} samples is too short, need at least {min}")]
    TooShort {
        /// The operation.
        what: String,
        /// Samples given.
        len: usize,
        /// Samples needed.
        min: usize,
    },
    /// A sample is NaN or infinite.
    #[error("{what}: sample {index} is not finite ({value})")]
    NonFinite {
        /// The signal.
        what: String,
        /// First offending sample.
        index: usize,
        /// Its value.
        value: f32,
    },
    /// A sample rate that cannot be used (0, or not the one an extractor is defined for).
    #[error("{what}: unsupported sample rate {got} Hz{}", expected.map(|e| format!(" (expected {e} Hz)")).unwrap_or_default())]
    UnsupportedSampleRate {
        /// Where it was given.
        what: String,
        /// The rate given.
        got: u32,
        /// The only rate allowed, when there is one.
        expected: Option<u32>,
    },
    /// A parameter out of range (FFT size 0, hop 0, window longer than the FFT, ...).
    #[error("invalid {name}: {reason}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// Why.
        reason: String,
    },
    /// Two buffers disagree in size.
    #[error("{what}: expected {expected} values, got {got}")]
    LengthMismatch {
        /// The buffer.
        what: &'static str,
        /// Values expected.
        expected: usize,
        /// Values given.
        got: usize,
    },
    /// The resampler could not be built or run.
    #[error("resampler: {0}")]
    Resampler(String),
    /// A speed (time-scale factor) outside [`MIN_SPEED`](crate::stretch::MIN_SPEED)..=
    /// [`MAX_SPEED`](crate::stretch::MAX_SPEED), or not finite.
    #[error(
        "speed {speed} is out of range: it must be a finite number from {} to {}",
        crate::stretch::MIN_SPEED,
        crate::stretch::MAX_SPEED
    )]
    SpeedOutOfRange {
        /// The speed given.
        speed: f32,
    },
    /// The time stretcher failed.
    #[error("time stretch: {0}")]
    Stretch(String),
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, DspError>;

/// Rejects empty and non-finite signals with an error naming `what`.
pub fn check_signal(what: &str, x: &[f32]) -> Result<()> {
    if x.is_empty() {
        return Err(DspError::EmptyAudio {
            what: what.to_string(),
        });
    }
    if let Some((index, &value)) = x.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(DspError::NonFinite {
            what: what.to_string(),
            index,
            value,
        });
    }
    Ok(())
}

pub(crate) fn invalid(name: &'static str, reason: impl Into<String>) -> DspError {
    DspError::InvalidParameter {
        name,
        reason: reason.into(),
    }
}
