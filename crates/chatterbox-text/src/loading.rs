//! Reading a `tokenizer.json` (`Tokenizer.from_file` in chatterbox/models/tokenizers/
//! tokenizer.py and, through transformers, in chatterbox/tts_turbo.py; upstream 5de7a54) from a
//! file, from memory or from a `tokenizers::Tokenizer` the caller built, with the checks every
//! tokenizer of this crate runs on what it is given.
use crate::error::{Result, TextError};
use std::path::{Path, PathBuf};
use tokenizers::{PaddingStrategy, PostProcessor, Tokenizer};

/// What errors name as the "path" of a tokenizer or data file given in memory.
pub(crate) const IN_MEMORY: &str = "<in memory>";

/// The path errors name for data given in memory.
pub(crate) fn in_memory() -> PathBuf {
    PathBuf::from(IN_MEMORY)
}

/// Longest padding a tokenizer file may ask for (`padding.strategy.Fixed`,
/// `pad_to_multiple_of`): 32 x T3's longest text (2048 tokens). Every encode allocates the
/// padded length: `Fixed(10^12)` asked for 4 TB.
const MAX_PADDED_TOKENS: usize = 1 << 16;

/// Token ids a tokenizer file may give (the released vocabularies have at most 50276 tokens):
/// `tokenizers` adds one to the largest id it has when it adds a token, which overflowed at
/// `u32::MAX`.
const MAX_TOKEN_ID: u64 = 1 << 31;

/// Reads, checks and parses the `tokenizer.json` at `path`.
pub(crate) fn tokenizer_from_file(path: &Path) -> Result<Tokenizer> {
    if !path.is_file() {
        return Err(TextError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        });
    }
    let json = std::fs::read(path).map_err(|source| TextError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    tokenizer_from_bytes(&json, path)
}

/// Checks and parses `tokenizer.json` content; `path` only names it in errors.
pub(crate) fn tokenizer_from_bytes(json: &[u8], path: &Path) -> Result<Tokenizer> {
    check_tokenizer_json(json, path)?;
    let tokenizer = Tokenizer::from_bytes(json).map_err(|e| TextError::Tokenizer {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    check_padding_and_truncation(&tokenizer, path)?;
    Ok(tokenizer)
}

/// Checks a tokenizer the caller built: its ids (see [`MAX_TOKEN_ID`]) and its padding and
/// truncation settings.
pub(crate) fn checked_tokenizer(tokenizer: Tokenizer) -> Result<Tokenizer> {
    let path = in_memory();
    if let Some((token, id)) = tokenizer
        .get_vocab(true)
        .into_iter()
        .find(|(_, id)| u64::from(*id) >= MAX_TOKEN_ID)
    {
        return Err(TextError::InvalidData {
            what: "tokenizer",
            path,
            message: format!("token {token:?} has id {id} (at most {MAX_TOKEN_ID})"),
        });
    }
    check_padding_and_truncation(&tokenizer, &path)?;
    Ok(tokenizer)
}

/// Checks what `tokenizers` (0.22) reads from a `tokenizer.json` without checking, before it
/// reads it: the JSON itself (a file cut short inside `decoder` panicked in its
/// `expect("Helper")`), ids above [`MAX_TOKEN_ID`], and merges of a BPE model whose second
/// token is shorter than its `continuing_subword_prefix` (`tokenizers` slices the prefix off
/// each one).
fn check_tokenizer_json(json: &[u8], path: &Path) -> Result<()> {
    let invalid = |message: String| TextError::InvalidData {
        what: "tokenizer",
        path: path.to_path_buf(),
        message,
    };
    let doc: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| TextError::Tokenizer {
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

/// Refuses the padding and truncation settings of a tokenizer on which `tokenizers` (0.22)
/// would allocate without bound or panic when encoding: padding beyond [`MAX_PADDED_TOKENS`],
/// a truncation `max_length` shorter than the special tokens the post-processor adds (it
/// subtracts them), a `stride` not below the remaining length (it asserts). Every tokenizer
/// goes through it.
fn check_padding_and_truncation(tokenizer: &Tokenizer, path: &Path) -> Result<()> {
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
