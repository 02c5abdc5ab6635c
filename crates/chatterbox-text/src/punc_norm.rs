//! Port of `punc_norm` from chatterbox/tts.py, mtl_tts.py and tts_turbo.py (upstream 5de7a54).
//!
//! The three reference functions share their shape and differ in the replacement table and the
//! set of sentence enders, so one function takes the [`Variant`].
use crate::error::{Result, TextError};
use crate::pystr::{capitalise_first, collapse_whitespace, is_py_space};

/// Which model's text normalisation to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `ChatterboxTTS` (chatterbox/tts.py).
    English,
    /// `ChatterboxMultilingualTTS` (chatterbox/mtl_tts.py): adds CJK sentence enders.
    Multilingual,
    /// `ChatterboxTurboTTS` and Nano (chatterbox/tts_turbo.py): keeps `...`, ` - ` and `;`.
    Turbo,
}

/// What the reference substitutes for an empty string.
pub const EMPTY_TEXT_REPLACEMENT: &str = "You need to add some text for me to talk.";

// https://github.com/resemble-ai/chatterbox/blob/5de7a54/src/chatterbox/tts.py#L38
const PUNC_TO_REPLACE: &[(&str, &str)] = &[
    ("...", ", "),
    ("…", ", "),
    (":", ","),
    (" - ", ", "),
    (";", ", "),
    ("—", "-"),
    ("–", "-"),
    (" ,", ","),
    ("“", "\""),
    ("”", "\""),
    ("‘", "'"),
    ("’", "'"),
];

// https://github.com/resemble-ai/chatterbox/blob/5de7a54/src/chatterbox/tts_turbo.py#L46
const PUNC_TO_REPLACE_TURBO: &[(&str, &str)] = &[
    ("…", ", "),
    (":", ","),
    ("—", "-"),
    ("–", "-"),
    (" ,", ","),
    ("“", "\""),
    ("”", "\""),
    ("‘", "'"),
    ("’", "'"),
];

const SENTENCE_ENDERS: &[&str] = &[".", "!", "?", "-", ","];
const SENTENCE_ENDERS_MTL: &[&str] = &[".", "!", "?", "-", ",", "、", "，", "。", "？", "！"];

impl Variant {
    fn replacements(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Variant::English | Variant::Multilingual => PUNC_TO_REPLACE,
            Variant::Turbo => PUNC_TO_REPLACE_TURBO,
        }
    }

    fn sentence_enders(self) -> &'static [&'static str] {
        match self {
            Variant::English | Variant::Turbo => SENTENCE_ENDERS,
            Variant::Multilingual => SENTENCE_ENDERS_MTL,
        }
    }
}

/// The reference's `punc_norm`, exactly: an empty string becomes
/// [`EMPTY_TEXT_REPLACEMENT`]; a lowercase first character is upper-cased; whitespace runs
/// collapse to one space; the variant's replacements run in order; trailing spaces go; a `.` is
/// appended unless the text ends with one of the variant's sentence enders.
///
/// Whitespace-only input comes out as `"."`, as in the reference; [`punc_norm_checked`] rejects
/// it (and the empty string) instead.
pub fn punc_norm(text: &str, variant: Variant) -> String {
    if text.is_empty() {
        return EMPTY_TEXT_REPLACEMENT.to_string();
    }
    let text = capitalise_first(text);
    let mut text = collapse_whitespace(&text);
    for (old, new) in variant.replacements() {
        if text.contains(old) {
            text = text.replace(old, new);
        }
    }
    let trimmed = text.trim_end_matches(' ').len();
    text.truncate(trimmed);
    if !variant.sentence_enders().iter().any(|p| text.ends_with(p)) {
        text.push('.');
    }
    text
}

/// [`punc_norm`] for user input: fails with [`TextError::EmptyText`] when the text is empty or
/// whitespace only (where the reference would speak its placeholder sentence or a lone `.`).
pub fn punc_norm_checked(text: &str, variant: Variant) -> Result<String> {
    if text.chars().all(is_py_space) {
        return Err(TextError::EmptyText {
            chars: text.chars().count(),
        });
    }
    Ok(punc_norm(text, variant))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_differ_where_the_reference_does() {
        let t = "wait... what; really - yes";
        // as the reference: "..." and ";" become ", " after the whitespace collapse
        assert_eq!(punc_norm(t, Variant::English), "Wait,  what,  really, yes.");
        assert_eq!(punc_norm(t, Variant::Turbo), "Wait... what; really - yes.");
        assert_eq!(punc_norm("你好。", Variant::English), "你好。.");
        assert_eq!(punc_norm("你好。", Variant::Multilingual), "你好。");
    }

    #[test]
    fn empty_and_blank() {
        assert_eq!(punc_norm("", Variant::English), EMPTY_TEXT_REPLACEMENT);
        assert_eq!(punc_norm(" \t", Variant::Turbo), ".");
        assert!(matches!(
            punc_norm_checked(" \u{3000}", Variant::English),
            Err(TextError::EmptyText { chars: 2 })
        ));
        assert!(punc_norm_checked("", Variant::English).is_err());
        assert_eq!(
            punc_norm_checked("a", Variant::English).ok().as_deref(),
            Some("A.")
        );
    }
}
