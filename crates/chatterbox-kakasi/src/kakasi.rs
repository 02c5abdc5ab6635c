//! Port of `Kakasi.convert` from pykakasi 2.3.0's pykakasi/kakasi.py, restricted to the `orig`
//! and `hira` fields that chatterbox reads.
//!
//! pykakasi's quirks are kept on purpose, because the reference output has them: the character
//! after an unknown kanji is dropped; supplementary-plane characters (emoji included) and
//! U+F000..U+FFFD are dropped; a segment flushed before a character of no known class is emitted
//! again at the next flush; half-width `ｰ` after a kanji reads as `゜`.
//
// SPDX-License-Identifier: GPL-3.0-or-later
// Derived from pykakasi, Copyright 2011-2021 Hiroshi Miura <miurahr@linux.com>.
use crate::dict::KakasiDict;
use crate::error::Result;
use crate::kanji::JConv;
use crate::scripts::{a2_region, h2_region, k2_region, k2h, sym2_region};
use chatterbox_text::{KanjiReader, Segment};
use std::path::Path;
use std::sync::Arc;

/// A kanji → hiragana converter over a [`KakasiDict`]: pykakasi's `kakasi()`. Cloning is cheap
/// (the dictionary is shared).
#[derive(Debug, Clone)]
pub struct Kakasi {
    dict: Arc<KakasiDict>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Kanji,
    Kana,
    Hiragana,
    Symbol,
    Alpha,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    NoBufOutAndOutputCurrentAndNext,
    BufOutAndSkipCurrent,
    PutAndNext,
    BufOutAndNext,
    DoNothing,
}

// pykakasi/properties.py `Ch`: end marks and long-vowel symbols.
const ENDMARK: &[char] = &[
    ')', ']', '!', ',', '.', ',', '\u{3001}', '\u{3002}', '\u{ff1f}', '\u{ff10}', '\u{ff1e}',
    '\u{ff1c}',
];
const LONG_SYMBOLS: &[char] = &['\u{30FC}', '\u{2015}', '\u{2212}', '\u{FF70}'];

/// Private-use and supplementary planes, which `Kakasi.convert` drops.
fn is_pua(c: u32) -> bool {
    (0xF000..=0xFFFD).contains(&c) || (0x10000..=0x10FFFD).contains(&c)
}

impl Kakasi {
    /// A converter over `dict`.
    pub fn new(dict: KakasiDict) -> Self {
        Self {
            dict: Arc::new(dict),
        }
    }

    /// A converter over a dictionary exported by `scripts/export_pykakasi_dict.py`
    /// ([`KakasiDict::from_file`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        KakasiDict::from_file(path).map(Self::new)
    }

    /// The dictionary.
    pub fn dict(&self) -> &KakasiDict {
        &self.dict
    }

    /// `Kakasi.convert(text)`, keeping `orig` and `hira` of each segment.
    pub fn convert(&self, text: &str) -> Vec<Segment> {
        let jconv = JConv::new(&self.dict);
        let text: Vec<char> = text.chars().collect();
        let seg = |orig: &[char], kana: &[char]| Segment {
            orig: orig.iter().collect(),
            hira: k2h(kana),
        };
        if text.is_empty() {
            return vec![seg(&[], &[])];
        }
        let mut original_text: Vec<char> = Vec::new();
        let mut kana_text: Vec<char> = Vec::new();
        let mut result = Vec::new();
        let mut i = 0;
        let mut prev_type = Type::Kanji;
        while i < text.len() {
            let c = text[i];
            let code = c as u32;
            let action;
            if ENDMARK.contains(&c) {
                prev_type = Type::Symbol;
                action = Action::BufOutAndNext;
            } else if LONG_SYMBOLS.contains(&c) {
                action = Action::PutAndNext;
            } else if k2_region(code) {
                action = if prev_type == Type::Kana {
                    Action::PutAndNext
                } else {
                    Action::BufOutAndNext
                };
                prev_type = Type::Kana;
            } else if h2_region(code) {
                action = if prev_type == Type::Hiragana {
                    Action::PutAndNext
                } else {
                    Action::BufOutAndNext
                };
                prev_type = Type::Hiragana;
            } else if a2_region(code) {
                action = if prev_type == Type::Alpha {
                    Action::PutAndNext
                } else {
                    Action::BufOutAndNext
                };
                prev_type = Type::Alpha;
            } else if sym2_region(code) {
                action = if prev_type != Type::Symbol {
                    Action::BufOutAndNext
                } else {
                    Action::NoBufOutAndOutputCurrentAndNext
                };
                prev_type = Type::Symbol;
            } else if jconv.is_region(c) {
                if !original_text.is_empty() {
                    result.push(seg(&original_text, &kana_text));
                }
                let (t, ln) = jconv.convert(&text[i..], &original_text);
                prev_type = Type::Kanji;
                if ln > 0 {
                    let end = (i + ln).min(text.len());
                    original_text = text[i..end].to_vec();
                    kana_text = t.chars().collect();
                    i += ln;
                    action = Action::DoNothing;
                } else {
                    original_text = vec![c];
                    kana_text.clear();
                    i += 1;
                    action = Action::BufOutAndSkipCurrent;
                }
            } else if is_pua(code) {
                prev_type = Type::Symbol;
                if !original_text.is_empty() {
                    result.push(seg(&original_text, &kana_text));
                }
                i += 1;
                action = Action::DoNothing;
            } else {
                if !original_text.is_empty() {
                    result.push(seg(&original_text, &kana_text));
                }
                result.push(seg(&[c], &[]));
                i += 1;
                action = Action::DoNothing;
            }

            match action {
                Action::BufOutAndNext => {
                    if !original_text.is_empty() {
                        result.push(seg(&original_text, &kana_text));
                    }
                    original_text = vec![text[i]];
                    kana_text = vec![text[i]];
                    i += 1;
                }
                Action::PutAndNext => {
                    original_text.push(text[i]);
                    kana_text.push(text[i]);
                    i += 1;
                }
                Action::NoBufOutAndOutputCurrentAndNext => {
                    if !original_text.is_empty() {
                        result.push(seg(&original_text, &kana_text));
                    }
                    result.push(seg(&[text[i]], &[text[i]]));
                    original_text.clear();
                    kana_text.clear();
                    i += 1;
                }
                Action::BufOutAndSkipCurrent => {
                    if !original_text.is_empty() {
                        result.push(seg(&original_text, &kana_text));
                    }
                    original_text.clear();
                    kana_text.clear();
                    // pykakasi skips the character after an unknown kanji as well.
                    i += 1;
                }
                Action::DoNothing => {}
            }
        }
        if !original_text.is_empty() {
            result.push(seg(&original_text, &kana_text));
        }
        result
    }
}

impl KanjiReader for Kakasi {
    fn convert(&self, text: &str) -> Vec<Segment> {
        Kakasi::convert(self, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kakasi() -> Kakasi {
        let dict = KakasiDict::parse(
            "I\tfe00\t\nK\t日本\tにっぽん\nK\t日本語\tにほんご\nK\t橋\tはし\nK\t渡る\tわたる\n\
             K\t漢字\tかんじ\n",
        )
        .unwrap();
        Kakasi::new(dict)
    }

    fn pairs(k: &Kakasi, s: &str) -> Vec<(String, String)> {
        k.convert(s).into_iter().map(|s| (s.orig, s.hira)).collect()
    }

    fn p(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    #[test]
    fn matches_pykakasi_segmentation_and_quirks() {
        let k = kakasi();
        // Recorded with pykakasi 2.3.0 (its full dictionary gives the same for these words).
        assert_eq!(
            pairs(&k, "日本\u{300}です"),
            vec![
                p("日本", "にっぽん"),
                p("\u{300}", ""),
                p("日本", "にっぽん"),
                p("です", "です")
            ]
        );
        assert_eq!(
            pairs(&k, "かな\u{1F600}です"),
            vec![p("かな", "かな"), p("かな", "かな"), p("です", "です")]
        );
        assert_eq!(
            pairs(&k, "橋を渡る"),
            vec![p("橋", "はし"), p("を", "を"), p("渡る", "わたる")]
        );
        assert_eq!(pairs(&k, "日本語ー"), vec![p("日本語ー", "にほんごー")]);
        assert_eq!(pairs(&k, "漢\u{fe00}字"), vec![p("漢\u{fe00}字", "かんじ")]);
        assert_eq!(pairs(&k, "𠀋x"), vec![p("x", "x")]);
        assert_eq!(
            pairs(&k, "テスト。"),
            vec![p("テスト", "てすと"), p("。", "。")]
        );
        // unknown kanji: dropped reading, next character skipped
        assert_eq!(pairs(&k, "丼xy"), vec![p("丼", ""), p("y", "y")]);
        assert_eq!(pairs(&k, ""), vec![p("", "")]);
    }

    #[test]
    fn context_readings() {
        let dict = KakasiDict::parse("C\t色\tしょく\tそん\nK\t色\tいろ\n").unwrap();
        let k = Kakasi::new(dict);
        assert_eq!(
            pairs(&k, "そん色"),
            vec![p("そん", "そん"), p("色", "しょく")]
        );
        assert_eq!(pairs(&k, "あ色"), vec![p("あ", "あ"), p("色", "いろ")]);
    }
}
