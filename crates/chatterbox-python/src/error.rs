//! Rust errors as Python exceptions. Every error keeps the Rust message; its class says what
//! kind of mistake it is: `FileNotFoundError` for a missing checkpoint, voice or audio file,
//! `ValueError` for input that cannot be used (an option out of range, an unknown language,
//! empty text, an audio file that does not decode, an unknown device string), `OSError` for
//! other file and download failures, and `RuntimeError` for everything else (a device that
//! this build cannot open, a model that fails while running).
use chatterbox_pipeline::PipelineError;
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::PyErr;

/// The package's error: a pipeline error, or one of the package's own.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pipeline failed.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// A file the call needs is not there.
    #[error("{0}")]
    NotFound(String),
    /// An argument that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// A device or build limitation, or an internal failure.
    #[error("{0}")]
    Runtime(String),
    /// The caller pressed Ctrl-C (or another signal handler raised): the Python exception
    /// is passed through unchanged.
    #[error("interrupted")]
    Python(PyErr),
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// The Python exception class that fits a pipeline error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `FileNotFoundError`.
    NotFound,
    /// `ValueError`.
    Value,
    /// `OSError`.
    Os,
    /// `RuntimeError`.
    Runtime,
}

fn io_kind(e: &std::io::Error) -> Kind {
    if e.kind() == std::io::ErrorKind::NotFound {
        Kind::NotFound
    } else {
        Kind::Os
    }
}

/// Which exception a pipeline error becomes (looking through `Checkpoint`'s cause).
pub fn kind(e: &PipelineError) -> Kind {
    use chatterbox_dsp::DspError;
    use chatterbox_text::TextError;
    match e {
        PipelineError::MissingFile { .. } | PipelineError::WatermarkWeights { .. } => {
            Kind::NotFound
        }
        PipelineError::Io { source, .. } => io_kind(source),
        PipelineError::Checkpoint { source, .. } => match kind(source) {
            Kind::NotFound => Kind::NotFound,
            _ => Kind::Runtime,
        },
        PipelineError::Hub { .. } => Kind::Os,
        PipelineError::InvalidInput { .. }
        | PipelineError::ReferenceTooShort { .. }
        | PipelineError::SilentAudio { .. }
        | PipelineError::InvalidConditionals { .. } => Kind::Value,
        PipelineError::Dsp(d) => match d {
            DspError::Io { source, .. } => io_kind(source),
            DspError::Encode { .. } | DspError::Resampler(_) => Kind::Runtime,
            _ => Kind::Value,
        },
        PipelineError::Text(t) => match t {
            TextError::UnknownLanguage { .. } | TextError::EmptyText { .. } => Kind::Value,
            TextError::Io { source, .. } => io_kind(source),
            _ => Kind::Runtime,
        },
        _ => Kind::Runtime,
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        let msg = e.to_string();
        match e {
            Error::Python(err) => err,
            Error::NotFound(_) => PyFileNotFoundError::new_err(msg),
            Error::Invalid(_) => PyValueError::new_err(msg),
            Error::Runtime(_) => PyRuntimeError::new_err(msg),
            Error::Pipeline(p) => match kind(&p) {
                Kind::NotFound => PyFileNotFoundError::new_err(msg),
                Kind::Value => PyValueError::new_err(msg),
                Kind::Os => PyOSError::new_err(msg),
                Kind::Runtime => PyRuntimeError::new_err(msg),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_values_and_the_rest_get_their_classes() {
        let missing = PipelineError::MissingFile {
            dir: "/x".into(),
            file: "ve.safetensors".into(),
            what: "VoiceEncoder weights",
            variant: "english",
        };
        assert_eq!(kind(&missing), Kind::NotFound);
        let wrapped = PipelineError::Checkpoint {
            path: "/x/t3.safetensors".into(),
            source: Box::new(PipelineError::Safetensors("bad header".into())),
        };
        assert_eq!(kind(&wrapped), Kind::Runtime);
        let lang = PipelineError::Text(chatterbox_text::TextError::UnknownLanguage {
            language: "xx".into(),
            supported: "en",
        });
        assert_eq!(kind(&lang), Kind::Value);
        assert_eq!(kind(&PipelineError::NoConditionals), Kind::Runtime);
        let io = PipelineError::Io {
            path: "/x".into(),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, "no"),
        };
        assert_eq!(kind(&io), Kind::Os);
    }
}
