//! Port of `ChineseCangjieConverter` from chatterbox/models/tokenizers/tokenizer.py
//! (upstream 5de7a54).
use super::ChineseSegmenter;
use crate::error::{read_to_string, Result, TextError};
use crate::loading::in_memory;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use unicode_general_category::{get_general_category, GeneralCategory};

/// File name of the Cangjie table in the multilingual checkpoint directory.
pub const CANGJIE_FILE: &str = "Cangjie5_TC.json";

/// The glyph → Cangjie code table (`word2cj`, `cj2word`) of `Cangjie5_TC.json`: a JSON list of
/// `"glyph\tcode[\t...]"` strings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CangjieTable {
    word2cj: HashMap<String, String>,
    cj2word: HashMap<String, Vec<String>>,
}

impl CangjieTable {
    /// Reads `Cangjie5_TC.json`.
    ///
    /// Unlike the reference, which logs a warning and keeps whatever it had read, a malformed
    /// file is an error ([`TextError::InvalidData`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::parse(&read_to_string(path)?, path)
    }

    /// Builds the table from the content of `Cangjie5_TC.json` (a JSON list of
    /// `"glyph\tcode..."` strings); a malformed list is [`TextError::InvalidData`].
    pub fn from_json(json: &str) -> Result<Self> {
        Self::parse(json, &in_memory())
    }

    fn parse(json: &str, path: &Path) -> Result<Self> {
        let invalid = |message: String| TextError::InvalidData {
            what: "Cangjie table",
            path: path.to_path_buf(),
            message,
        };
        let entries: Vec<String> =
            serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
        Self::from_entries(entries.iter().map(String::as_str))
            .map_err(|i| invalid(format!("entry {i} has no tab-separated code")))
    }

    /// Builds the table from `"glyph\tcode..."` entries, in order; `Err(index)` names the first
    /// entry without a code.
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = &'a str>,
    ) -> std::result::Result<Self, usize> {
        let mut table = Self::default();
        for (i, entry) in entries.into_iter().enumerate() {
            let mut parts = entry.split('\t');
            let (Some(word), Some(code)) = (parts.next(), parts.next()) else {
                return Err(i);
            };
            table.word2cj.insert(word.to_string(), code.to_string());
            table
                .cj2word
                .entry(code.to_string())
                .or_default()
                .push(word.to_string());
        }
        Ok(table)
    }

    /// Number of glyphs.
    pub fn len(&self) -> usize {
        self.word2cj.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.word2cj.is_empty()
    }

    /// `_cangjie_encode`: the code of `glyph`, with the glyph's position among the glyphs that
    /// share the code appended when it is not the first (`"abc1"`).
    pub fn encode(&self, glyph: &str) -> Option<String> {
        let code = self.word2cj.get(glyph)?;
        let index = self
            .cj2word
            .get(code)
            .and_then(|words| words.iter().position(|w| w == glyph))
            .unwrap_or(0);
        Some(if index > 0 {
            format!("{code}{index}")
        } else {
            code.clone()
        })
    }
}

/// Converts Chinese characters to Cangjie tokens: optional word segmentation (joined with
/// `' '`), then every character of category `Lo` found in the table becomes `[cj_c]` per code
/// character followed by `[cj_.]`.
// https://github.com/resemble-ai/chatterbox/blob/5de7a54/src/chatterbox/models/tokenizers/tokenizer.py#L160
#[derive(Clone, Default)]
pub struct ChineseCangjieConverter {
    table: CangjieTable,
    segmenter: Option<Arc<dyn ChineseSegmenter>>,
}

impl std::fmt::Debug for ChineseCangjieConverter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChineseCangjieConverter")
            .field("glyphs", &self.table.len())
            .field("segmenter", &self.segmenter.is_some())
            .finish()
    }
}

impl ChineseCangjieConverter {
    /// A converter over `table`, without segmenter.
    pub fn new(table: CangjieTable) -> Self {
        Self {
            table,
            segmenter: None,
        }
    }

    /// Sets (or removes) the word segmenter.
    pub fn with_segmenter(mut self, segmenter: Option<Arc<dyn ChineseSegmenter>>) -> Self {
        self.segmenter = segmenter;
        self
    }

    /// Replaces the table, keeping the segmenter.
    pub fn with_table(mut self, table: CangjieTable) -> Self {
        self.table = table;
        self
    }

    /// The table.
    pub fn table(&self) -> &CangjieTable {
        &self.table
    }

    /// Whether a segmenter is set.
    pub fn has_segmenter(&self) -> bool {
        self.segmenter.is_some()
    }

    /// `__call__`.
    pub fn convert(&self, text: &str) -> String {
        let segmented;
        let full_text = match &self.segmenter {
            Some(s) => {
                segmented = s.cut(text).join(" ");
                segmented.as_str()
            }
            None => text,
        };
        let mut out = String::with_capacity(full_text.len() * 2);
        let mut buf = [0u8; 4];
        for t in full_text.chars() {
            if get_general_category(t) == GeneralCategory::OtherLetter {
                if let Some(code) = self.table.encode(t.encode_utf8(&mut buf)) {
                    for c in code.chars() {
                        out.push_str("[cj_");
                        out.push(c);
                        out.push(']');
                    }
                    out.push_str("[cj_.]");
                    continue;
                }
            }
            out.push(t);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_with_collision_index_and_category_check() {
        let table =
            CangjieTable::from_entries(["你\tonf", "好\tvnd\textra", "妳\tonf", "。\tzz"]).unwrap();
        let conv = ChineseCangjieConverter::new(table);
        assert_eq!(
            conv.convert("你妳好x。"),
            "[cj_o][cj_n][cj_f][cj_.][cj_o][cj_n][cj_f][cj_1][cj_.][cj_v][cj_n][cj_d][cj_.]x。"
        );
        let seg = conv.with_segmenter(Some(Arc::new(|t: &str| {
            t.chars().map(String::from).collect::<Vec<_>>()
        })));
        assert_eq!(seg.convert("ab"), "a b");
        assert_eq!(CangjieTable::from_entries(["x"]), Err(0));
    }
}
