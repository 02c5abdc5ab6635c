//! The error type of chatterbox-kakasi.
use std::path::PathBuf;

/// Everything that can go wrong loading pykakasi's dictionary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KakasiError {
    /// The dictionary file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A malformed record in dictionary text given to [`KakasiDict::parse`](crate::KakasiDict::parse).
    #[error("invalid kakasi dictionary record at line {line}: {message}")]
    InvalidRecord {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A dictionary file with a malformed record, or without any word.
    #[error("invalid kakasi dictionary {path}: line {line}: {message}")]
    InvalidDictionary {
        /// The file.
        path: PathBuf,
        /// 1-based line number (0: the file as a whole).
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// `Result` with [`KakasiError`].
pub type Result<T> = std::result::Result<T, KakasiError>;
