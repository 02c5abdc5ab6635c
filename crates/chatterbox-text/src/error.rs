//! The error type of chatterbox-text.
use std::path::PathBuf;

/// Everything that can go wrong between the user's string and T3's text token ids.
///
/// The `path` of a tokenizer or data file given in memory (`from_json`, `from_bytes`,
/// `from_tokenizer`) is `<in memory>`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TextError {
    /// A language id that is not one of the 23 of the multilingual model.
    #[error("unsupported language id {language:?}; supported: {supported}")]
    UnknownLanguage {
        /// The id as given.
        language: String,
        /// The supported ids, comma separated.
        supported: &'static str,
    },
    /// A tokenizer file lacks a token the model needs (`[START]`, `[STOP]`, `<|endoftext|>`...).
    #[error("tokenizer {path} has no {token:?} token")]
    MissingSpecialToken {
        /// The tokenizer file.
        path: PathBuf,
        /// The missing token.
        token: String,
    },
    /// The text holds nothing to speak once normalised (empty or whitespace only).
    #[error("text is empty after normalisation (input had {chars} characters, all whitespace)")]
    EmptyText {
        /// Number of characters of the input.
        chars: usize,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A tokenizer file the `tokenizers` library rejects, or a failure inside it.
    #[error("tokenizer {path}: {message}")]
    Tokenizer {
        /// The tokenizer file (or directory).
        path: PathBuf,
        /// What the library said.
        message: String,
    },
    /// A data file (Cangjie table, tokenizer config) with bad content.
    #[error("invalid {what} {path}: {message}")]
    InvalidData {
        /// Which kind of file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line where known.
        message: String,
    },
    /// A chunker configured with a character budget of zero.
    #[error("chunk budget must be at least one character")]
    ZeroBudget,
    /// A pronunciation lexicon file ([`crate::Lexicon`]) with a malformed line.
    #[error("lexicon {path}, line {line}: {message}")]
    Lexicon {
        /// The file (`<in memory>` for [`crate::Lexicon::parse`]).
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Pause tags or SSML that [`crate::parse_markup`] cannot read, or that ask for more
    /// silence than its bounds allow.
    #[error("markup at byte {offset}: {message}")]
    Markup {
        /// Byte offset in the text where the problem starts.
        offset: usize,
        /// What is wrong.
        message: String,
    },
}

/// `Result` with [`TextError`].
pub type Result<T> = std::result::Result<T, TextError>;

pub(crate) fn read_to_string(path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| TextError::Io {
        path: path.to_path_buf(),
        source,
    })
}
