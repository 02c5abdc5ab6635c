//! Port of `EnTokenizer` from chatterbox/models/tokenizers/tokenizer.py (upstream 5de7a54).
use crate::error::{Result, TextError};
use crate::special_tokens::{
    check_vocabset_sot_eot, decode_graphemes, encode_ids, load_tokenizer, SPACE,
};
use std::path::{Path, PathBuf};
use tokenizers::{PaddingStrategy, PostProcessor, Tokenizer};

/// Longest padding a tokenizer file may ask for (`padding.strategy.Fixed`,
/// `pad_to_multiple_of`): 32 x T3's longest text (2048 tokens). Every encode allocates the
/// padded length: `Fixed(10^12)` asked for 4 TB.
const MAX_PADDED_TOKENS: usize = 1 << 16;

/// Token ids a tokenizer file may give (the released vocabularies have at most 50276 tokens):
/// `tokenizers` adds one to the largest id it has when it adds a token, which overflowed at
/// `u32::MAX`.
const MAX_TOKEN_ID: u64 = 1 << 31;

/// Checks what `tokenizers` (0.22) reads from a `tokenizer.json` without checking, before it
/// reads it: the JSON itself (a file cut short inside `decoder` panicked in its
/// `expect("Helper")`), ids above [`MAX_TOKEN_ID`], and merges of a BPE model whose second
/// token is shorter than its `continuing_subword_prefix` (`tokenizers` slices the prefix off
/// each one).
pub(crate) fn check_tokenizer_json(path: &Path) -> Result<()> {
    let invalid = |message: String| TextError::InvalidData {
        what: "tokenizer",
        path: path.to_path_buf(),
        message,
    };
    let Ok(text) = std::fs::read(path) else {
        return Ok(()); // `load_tokenizer` reports it
    };
    let doc: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| TextError::Tokenizer {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    let model = &doc["model"];
    let vocab = model["vocab"].as_object().into_iter().flatten();
    let added = doc["added_tokens"].as_array().into_iter().flatten();
    let ids = vocab
        .map(|(k, v)| (k.as_str(), v))
        .chain(added.map(|t| (t["content"].as_str().unwrap_or(""), &t["id"])));
    for (token, id) in ids {
        if id.as_u64().is_some_and(|id| id >= MAX_TOKEN_ID) {
            return Err(invalid(format!(
                "token {token:?} has id {id} (at most {MAX_TOKEN_ID})"
            )));
        }
    }
    let prefix = model["continuing_subword_prefix"].as_str().unwrap_or("");
    if model["type"] == "BPE" && !prefix.is_empty() {
        let merges = model["merges"].as_array().into_iter().flatten();
        for m in merges {
            // "a b" or ["a", "b"]
            let second = match m {
                serde_json::Value::String(s) => s.split_once(' ').map(|(_, b)| b),
                serde_json::Value::Array(a) => a.get(1).and_then(|b| b.as_str()),
                _ => None,
            };
            // (false past the end too)
            if second.is_some_and(|b| !b.is_char_boundary(prefix.len())) {
                return Err(invalid(format!(
                    "merge {m}: its second token is shorter than the continuing_subword_prefix \
                     {prefix:?}"
                )));
            }
        }
    }
    Ok(())
}

/// Refuses the padding and truncation settings of a tokenizer file on which `tokenizers`
/// (0.22) would allocate without bound or panic when encoding: padding beyond
/// [`MAX_PADDED_TOKENS`], a truncation `max_length` shorter than the special tokens the
/// post-processor adds (it subtracts them), a `stride` not below the remaining length (it
/// asserts). Every tokenizer loaded from a file goes through it.
pub(crate) fn check_padding_and_truncation(tokenizer: &Tokenizer, path: &Path) -> Result<()> {
    let invalid = |message: String| TextError::InvalidData {
        what: "tokenizer",
        path: path.to_path_buf(),
        message,
    };
    if let Some(p) = tokenizer.get_padding() {
        let fixed = match p.strategy {
            PaddingStrategy::Fixed(n) => n,
            PaddingStrategy::BatchLongest => 0,
        };
        let padded = fixed.max(p.pad_to_multiple_of.unwrap_or(0));
        if padded > MAX_PADDED_TOKENS {
            return Err(invalid(format!(
                "padding to {padded} tokens (at most {MAX_PADDED_TOKENS})"
            )));
        }
    }
    if let Some(t) = tokenizer.get_truncation() {
        let added = tokenizer
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false));
        let Some(max) = t.max_length.checked_sub(added) else {
            return Err(invalid(format!(
                "truncation max_length {} is shorter than the {added} special tokens added",
                t.max_length
            )));
        };
        if max > 0 && t.stride >= max {
            return Err(invalid(format!(
                "truncation stride {} must be less than max_length {max}",
                t.stride
            )));
        }
    }
    Ok(())
}

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
        check_tokenizer_json(&path)?;
        let tokenizer = load_tokenizer(&path)?;
        check_padding_and_truncation(&tokenizer, &path)?;
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
