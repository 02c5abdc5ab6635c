//! Port of `EnTokenizer` from chatterbox/models/tokenizers/tokenizer.py (upstream 5de7a54).
use crate::error::Result;
use crate::loading::{checked_tokenizer, in_memory, tokenizer_from_bytes, tokenizer_from_file};
use crate::special_tokens::{check_vocabset_sot_eot, decode_graphemes, encode_ids, SPACE};
use std::path::{Path, PathBuf};
use tokenizers::Tokenizer;

/// The English model's grapheme tokenizer (`tokenizer.json` of the checkpoint).
// https://github.com/resemble-ai/chatterbox/blob/5de7a54/src/chatterbox/models/tokenizers/tokenizer.py#L20
#[derive(Clone)]
pub struct EnTokenizer {
    tokenizer: Tokenizer,
    path: PathBuf,
    sot: u32,
    eot: u32,
}

impl std::fmt::Debug for EnTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnTokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl EnTokenizer {
    /// Loads `tokenizer.json`; fails with
    /// [`TextError::MissingSpecialToken`](crate::TextError::MissingSpecialToken) if `[START]` or
    /// `[STOP]` is absent (the reference asserts).
    pub fn from_file(vocab_file_path: impl AsRef<Path>) -> Result<Self> {
        let path = vocab_file_path.as_ref().to_path_buf();
        Self::build(tokenizer_from_file(&path)?, path)
    }

    /// Builds the tokenizer from the content of a `tokenizer.json`, with the same checks as
    /// [`EnTokenizer::from_file`].
    pub fn from_json(json: &str) -> Result<Self> {
        Self::from_bytes(json.as_bytes())
    }

    /// [`EnTokenizer::from_json`] over raw bytes (an embedded or downloaded file).
    pub fn from_bytes(json: &[u8]) -> Result<Self> {
        let path = in_memory();
        Self::build(tokenizer_from_bytes(json, &path)?, path)
    }

    /// Wraps a `tokenizers` tokenizer (it must have `[START]` and `[STOP]`).
    pub fn from_tokenizer(tokenizer: Tokenizer) -> Result<Self> {
        Self::build(checked_tokenizer(tokenizer)?, in_memory())
    }

    fn build(tokenizer: Tokenizer, path: PathBuf) -> Result<Self> {
        let (sot, eot) = check_vocabset_sot_eot(&tokenizer, &path)?;
        Ok(Self {
            tokenizer,
            path,
            sot,
            eot,
        })
    }

    /// The string `encode` hands to the tokenizer: every `' '` replaced with `[SPACE]`. Needs
    /// no vocabulary. `generate` runs `punc_norm` first
    /// ([`TextFrontend::prepare`](crate::TextFrontend::prepare) shows both steps).
    pub fn prepare(txt: &str) -> String {
        txt.replace(' ', SPACE)
    }

    /// `encode`: every `' '` becomes `[SPACE]` ([`EnTokenizer::prepare`]), then the tokenizer
    /// runs. No `[START]`/`[STOP]`
    /// are added (T3 adds them; see [`EnTokenizer::sot`]).
    pub fn encode(&self, txt: &str) -> Result<Vec<u32>> {
        encode_ids(&self.tokenizer, &self.path, &Self::prepare(txt))
    }

    /// `decode`: ids back to text (`[SPACE]` to `' '`; `[STOP]` and `[UNK]` dropped).
    pub fn decode(&self, seq: &[u32]) -> Result<String> {
        decode_graphemes(&self.tokenizer, &self.path, seq)
    }

    /// Id of `[START]`.
    pub fn sot(&self) -> u32 {
        self.sot
    }

    /// Id of `[STOP]`.
    pub fn eot(&self) -> u32 {
        self.eot
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.tokenizer
    }
}
