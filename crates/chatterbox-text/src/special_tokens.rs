//! Special tokens of the grapheme tokenizers (chatterbox/models/tokenizers/tokenizer.py,
//! upstream 5de7a54) and the encode/decode helpers the grapheme tokenizers share.
use crate::error::{Result, TextError};
use std::path::Path;
use tokenizers::Tokenizer;

/// Start of text (`SOT`); T3 puts its id (255 in the released models) before the text ids.
pub const SOT: &str = "[START]";
/// End of text (`EOT`); id 0 in the released models.
pub const EOT: &str = "[STOP]";
/// Unknown grapheme.
pub const UNK: &str = "[UNK]";
/// What every `' '` is replaced with before tokenizing.
pub const SPACE: &str = "[SPACE]";
/// The reference's `SPECIAL_TOKENS` list.
pub const SPECIAL_TOKENS: [&str; 8] = [SOT, EOT, UNK, SPACE, "[PAD]", "[SEP]", "[CLS]", "[MASK]"];

/// The id of `token` (added tokens included, as Python's `get_vocab()`), or
/// [`TextError::MissingSpecialToken`].
pub(crate) fn require_token(tokenizer: &Tokenizer, path: &Path, token: &str) -> Result<u32> {
    tokenizer
        .token_to_id(token)
        .ok_or_else(|| TextError::MissingSpecialToken {
            path: path.to_path_buf(),
            token: token.to_string(),
        })
}

/// `check_vocabset_sot_eot`: both `[START]` and `[STOP]` must be in the vocabulary.
pub(crate) fn check_vocabset_sot_eot(tokenizer: &Tokenizer, path: &Path) -> Result<(u32, u32)> {
    Ok((
        require_token(tokenizer, path, SOT)?,
        require_token(tokenizer, path, EOT)?,
    ))
}

pub(crate) fn encode_ids(tokenizer: &Tokenizer, path: &Path, text: &str) -> Result<Vec<u32>> {
    // `encode_fast` skips the character offsets, which nothing here uses; ids are the same.
    tokenizer
        .encode_fast(text, true)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| TextError::Tokenizer {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// The grapheme tokenizers' `decode`: the library's decode without skipping special tokens,
/// then every `' '` removed, `[SPACE]` back to `' '`, `[STOP]` and `[UNK]` removed.
pub(crate) fn decode_graphemes(tokenizer: &Tokenizer, path: &Path, ids: &[u32]) -> Result<String> {
    let txt = tokenizer
        .decode(ids, false)
        .map_err(|e| TextError::Tokenizer {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    Ok(txt
        .replace(' ', "")
        .replace(SPACE, " ")
        .replace(EOT, "")
        .replace(UNK, ""))
}
