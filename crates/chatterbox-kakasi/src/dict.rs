//! The dictionaries of pykakasi 2.3.0 (`kanwadict4.db`, `itaijidict4.db`, loaded by `Kanwa`
//! and `Itaiji` in pykakasi/kanji.py) in a plain text form.
//!
//! pykakasi ships them as Python pickles (GPL-3.0-or-later, from KAKASI's dictionary); this crate
//! does not embed them. Export them once with `scripts/export_pykakasi_dict.py` (in this crate)
//! and load the file with [`KakasiDict::from_file`]. Format, one record per line, fields
//! separated by TAB:
//!
//! ```text
//! # comment
//! I  <hex code point>  <replacement, empty to delete>     itaiji (variant kanji) mapping
//! K  <word>  <reading>                                     kanwa entry without context
//! C  <word>  <reading>  <context>...                       kanwa entry valid after a context
//! ```
//!
//! Entries of one word keep the pickle's order: the first whose context matches wins.
//
// SPDX-License-Identifier: GPL-3.0-or-later
use crate::error::{KakasiError, Result};
use std::collections::HashMap;
use std::path::Path;

/// One reading of a dictionary word: `(yomi, con)` in pykakasi.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reading {
    pub(crate) yomi: String,
    /// `None`: always valid; `Some(list)`: valid when the preceding text equals one of them.
    pub(crate) context: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Word {
    pub(crate) key: Vec<char>,
    pub(crate) readings: Vec<Reading>,
}

/// pykakasi's kanji dictionary (`Kanwa`) and variant table (`Itaiji`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KakasiDict {
    /// First character → words starting with it.
    pub(crate) kanwa: HashMap<char, Vec<Word>>,
    /// Variant character → replacement (`None`: deleted, e.g. variation selectors).
    pub(crate) itaiji: HashMap<char, Option<String>>,
}

impl KakasiDict {
    /// Reads a dictionary exported by `scripts/export_pykakasi_dict.py`. A file without any
    /// word is an error (it cannot be pykakasi's dictionary).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| KakasiError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let invalid = |line, message| KakasiError::InvalidDictionary {
            path: path.to_path_buf(),
            line,
            message,
        };
        let dict = Self::parse(&text).map_err(|err| match err {
            KakasiError::InvalidRecord { line, message } => invalid(line, message),
            other => other,
        })?;
        if dict.is_empty() {
            return Err(invalid(0, "no kanwa (K or C) record".into()));
        }
        Ok(dict)
    }

    /// Parses the text form; [`KakasiError::InvalidRecord`] on a malformed record.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |line: usize, message: String| KakasiError::InvalidRecord { line, message };
        let mut dict = Self::default();
        // Index of each word within its first character's list.
        let mut index: HashMap<String, (char, usize)> = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let lineno = n + 1;
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            match fields.as_slice() {
                ["I", code, replacement] => {
                    let c = u32::from_str_radix(code, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or_else(|| bad(lineno, format!("bad code point {code:?}")))?;
                    let r = (!replacement.is_empty()).then(|| replacement.to_string());
                    dict.itaiji.insert(c, r);
                }
                [kind @ ("K" | "C"), word, yomi, rest @ ..] => {
                    let context = match *kind {
                        "K" if rest.is_empty() => None,
                        "C" => Some(rest.iter().map(|s| s.to_string()).collect()),
                        _ => return Err(bad(lineno, "K record with a context".into())),
                    };
                    let Some(first) = word.chars().next() else {
                        return Err(bad(lineno, "empty word".into()));
                    };
                    let reading = Reading {
                        yomi: yomi.to_string(),
                        context,
                    };
                    let words = dict.kanwa.entry(first).or_default();
                    match index.get(*word) {
                        Some(&(_, i)) => words[i].readings.push(reading),
                        None => {
                            index.insert(word.to_string(), (first, words.len()));
                            words.push(Word {
                                key: word.chars().collect(),
                                readings: vec![reading],
                            });
                        }
                    }
                }
                _ => return Err(bad(lineno, format!("unrecognised record {line:?}"))),
            }
        }
        Ok(dict)
    }

    /// Number of dictionary words.
    pub fn len(&self) -> usize {
        self.kanwa.values().map(Vec::len).sum()
    }

    /// Whether the dictionary has no word.
    pub fn is_empty(&self) -> bool {
        self.kanwa.is_empty()
    }
}
