//! Properties over arbitrary Unicode: nothing panics, and the chunker keeps every character in
//! order (only whitespace at chunk boundaries is dropped). Tokenizer files are the committed
//! parity assets (`parity/fixtures/text/assets`).
use chatterbox_text::{
    hiragana_normalize, korean_normalize, preprocess_text, punc_norm, punc_norm_checked,
    CangjieTable, ChineseCangjieConverter, Language, MtlEncodeOptions, SentenceChunker, Variant,
};
use proptest::prelude::*;
use unicode_normalization::UnicodeNormalization;

#[cfg(test)]
mod support {
    use chatterbox_text::{EnTokenizer, MTLTokenizer, Segment, TurboTokenizer};
    use std::path::PathBuf;
    use std::sync::{Arc, OnceLock};

    fn assets() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../parity/fixtures/text/assets")
    }

    pub struct Tokenizers {
        pub en: EnTokenizer,
        pub mtl: MTLTokenizer,
        pub turbo: TurboTokenizer,
        /// `mtl` with a stand-in kanji reader (one segment per character, kanji read as `はし`).
        pub mtl_reader: MTLTokenizer,
    }

    pub fn char_reader(text: &str) -> Vec<Segment> {
        text.chars()
            .map(|c| {
                let kanji = ('\u{4e00}'..='\u{9fff}').contains(&c);
                Segment::new(
                    c,
                    if kanji {
                        "はし".to_string()
                    } else {
                        c.to_string()
                    },
                )
            })
            .collect()
    }

    pub fn tokenizers() -> &'static Tokenizers {
        static T: OnceLock<Tokenizers> = OnceLock::new();
        T.get_or_init(|| {
            let mtl =
                MTLTokenizer::from_file(assets().join("mtl/grapheme_mtl_merged_expanded_v1.json"))
                    .unwrap();
            Tokenizers {
                en: EnTokenizer::from_file(assets().join("en/tokenizer.json")).unwrap(),
                mtl_reader: mtl.clone().with_kanji_reader(Some(Arc::new(char_reader))),
                mtl,
                turbo: TurboTokenizer::from_dir(assets().join("turbo")).unwrap(),
            }
        })
    }
}
use support::{char_reader, tokenizers};

/// Arbitrary text weighted towards the characters the code treats specially.
fn text() -> impl Strategy<Value = String> {
    let special = prop::sample::select(vec![
        " ",
        "  ",
        "\t",
        "\n",
        "\u{3000}",
        "\u{1c}",
        "\u{a0}",
        ".",
        "...",
        "…",
        "!",
        "?",
        ",",
        ";",
        ":",
        " - ",
        "—",
        "–",
        "“",
        "”",
        "‘",
        "’",
        "\"",
        "'",
        ")",
        "」",
        "。",
        "、",
        "，",
        "！",
        "？",
        "Dr.",
        "e.g.",
        "J.",
        "漢字",
        "日本",
        "は",
        "ー",
        "ｶﾞ",
        "\u{fe00}",
        "\u{e0100}",
        "\u{3099}",
        "\u{300}",
        "😀",
        "👨‍👩‍👧",
        "한국어",
        "\u{d7a4}",
        "ß",
        "İ",
        "Σ",
        "ǅ",
        "ﬁ",
        "[laugh]",
        "[SPACE]",
        "[en]",
        "[cj_a]",
        "<|endoftext|>",
        "\u{ffff}",
        "\u{10ffff}",
    ]);
    let piece = prop_oneof![
        3 => any::<char>().prop_map(String::from),
        2 => special.prop_map(String::from),
        2 => "[a-zA-Z]{1,8}",
        1 => "[\u{4e00}-\u{4e80}\u{3041}-\u{3096}\u{30a1}-\u{30fa}]{1,6}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn normalisation_never_panics(s in text()) {
        for v in [Variant::English, Variant::Multilingual, Variant::Turbo] {
            let out = punc_norm(&s, v);
            prop_assert!(!out.is_empty());
            let checked = punc_norm_checked(&s, v);
            prop_assert_eq!(checked.is_err(), s.chars().all(is_py_space));
        }
        let pre = preprocess_text(&s, MtlEncodeOptions::default());
        let _ = korean_normalize(&pre);
        prop_assert_eq!(hiragana_normalize(&pre, None), pre.clone());
        let _ = hiragana_normalize(&pre, Some(&char_reader));
        let _ = hiragana_normalize(&s, Some(&char_reader));
        let table = CangjieTable::from_entries(["漢\tabc", "字\tabc", "x\ty"]).unwrap();
        let _ = ChineseCangjieConverter::new(table).convert(&s);
    }

    #[test]
    fn hiragana_normalize_keeps_text_without_kanji(s in "[a-z0-9 \u{3041}-\u{3096}\u{30a1}-\u{30fa}]{0,30}") {
        // no segment holds a kanji: every `orig` is kept, then NFKD
        prop_assert_eq!(hiragana_normalize(&s, Some(&char_reader)), s.nfkd().collect::<String>());
    }

    #[test]
    fn tokenizers_never_panic(s in text()) {
        let t = tokenizers();
        let ids = t.en.encode(&s).unwrap();
        let _ = t.en.decode(&ids).unwrap();
        for lang in [None, Some(Language::Japanese), Some(Language::Chinese), Some(Language::Korean),
                     Some(Language::Hebrew), Some(Language::Russian), Some(Language::Arabic)] {
            for mtl in [&t.mtl, &t.mtl_reader] {
                let ids = mtl.encode(&s, lang).unwrap();
                if lang.is_some() {
                    prop_assert!(!ids.is_empty()); // the language token at least
                }
                let _ = mtl.decode(&ids).unwrap();
            }
        }
        let ids = t.turbo.encode(&s).unwrap();
        prop_assert!(ids.len() <= t.turbo.max_length().unwrap_or(usize::MAX));
        let _ = t.turbo.decode(&ids).unwrap();
    }

    #[test]
    fn chunks_preserve_every_character(s in text(), max in 1usize..60) {
        let chunker = SentenceChunker::new(max).unwrap();
        let chunks = chunker.chunk(&s);
        let mut at = 0;
        for c in &chunks {
            // each chunk is the input slice it claims, trimmed, non-empty
            prop_assert_eq!(&s[c.start..c.end], c.text.as_str());
            prop_assert!(!c.text.is_empty());
            prop_assert!(!c.text.starts_with(is_py_space) && !c.text.ends_with(is_py_space));
            // what lies between chunks is whitespace only, and chunks are in order
            prop_assert!(c.start >= at);
            prop_assert!(s[at..c.start].chars().all(is_py_space));
            at = c.end;
            // never over budget: a stretch with no break point is cut hard
            prop_assert!(c.text.chars().count() <= max, "{} chars > {max}", c.text.chars().count());
        }
        prop_assert!(s[at..].chars().all(is_py_space));
        // so the non-whitespace characters are exactly those of the input, in order
        let kept: String = chunks.iter().flat_map(|c| c.text.chars()).filter(|c| !is_py_space(*c)).collect();
        let all: String = s.chars().filter(|c| !is_py_space(*c)).collect();
        prop_assert_eq!(kept, all);
    }
}
