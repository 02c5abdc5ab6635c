//! Errors of the test kit.
use std::path::PathBuf;

/// Anything that can go wrong while reading a fixture or running a case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A fixture file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A fixture's safetensors payload is malformed.
    #[error("malformed safetensors in {path}: {message}")]
    SafeTensors {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A fixture's JSON sidecar is malformed.
    #[error("malformed sidecar {path}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// A tensor the case needs is not in the fixture.
    #[error("fixture {case} has no tensor {name:?}")]
    MissingTensor {
        /// The case.
        case: String,
        /// The tensor name.
        name: String,
    },
    /// A tensor has a dtype the accessor cannot convert.
    #[error("tensor {name:?} of fixture {case} has dtype {dtype}, expected {expected}")]
    Dtype {
        /// The case.
        case: String,
        /// The tensor name.
        name: String,
        /// The dtype found.
        dtype: String,
        /// What was asked for.
        expected: &'static str,
    },
    /// A config field is missing or has the wrong type.
    #[error("fixture {case}: config field {field:?}: {message}")]
    Config {
        /// The case.
        case: String,
        /// The field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The code under test failed.
    #[error("{0}")]
    Case(String),
}

/// Result alias of the test kit.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Wraps any error of the code under test.
    pub fn case(e: impl std::fmt::Display) -> Self {
        Error::Case(e.to_string())
    }
}
