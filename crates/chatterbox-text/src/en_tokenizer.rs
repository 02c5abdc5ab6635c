//! Port of `EnTokenizer` from chatterbox/models/tokenizers/tokenizer.py (upstream 5de7a54).
use crate::error::Result;
use crate::special_tokens::{
    check_vocabset_sot_eot, decode_graphemes, encode_ids, load_tokenizer, SPACE,
};
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
        let tokenizer = load_tokenizer(&path)?;
        let (sot, eot) = check_vocabset_sot_eot(&tokenizer, &path)?;
        Ok(Self {
            tokenizer,
            path,
            sot,
            eot,
        })
    }

    /// `encode`: every `' '` becomes `[SPACE]`, then the tokenizer runs. No `[START]`/`[STOP]`
    /// are added (T3 adds them; see [`EnTokenizer::sot`]).
    pub fn encode(&self, txt: &str) -> Result<Vec<u32>> {
        encode_ids(&self.tokenizer, &self.path, &txt.replace(' ', SPACE))
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
