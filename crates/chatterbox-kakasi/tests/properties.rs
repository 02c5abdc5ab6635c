//! Properties over arbitrary Unicode: the converter never panics, and text without kanji comes
//! back segment by segment. The dictionary is the committed parity subset
//! (`parity/fixtures/kakasi/assets/kakasi_dict.tsv`).
use chatterbox_text::hiragana_normalize;
use proptest::prelude::*;

#[cfg(test)]
mod support {
    use chatterbox_kakasi::Kakasi;
    use std::sync::OnceLock;

    pub fn kakasi() -> &'static Kakasi {
        static K: OnceLock<Kakasi> = OnceLock::new();
        K.get_or_init(|| {
            Kakasi::from_file(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../parity/fixtures/kakasi/assets/kakasi_dict.tsv"),
            )
            .unwrap()
        })
    }
}
use support::kakasi;

/// Arbitrary text weighted towards the characters the converter treats specially.
fn text() -> impl Strategy<Value = String> {
    let special = prop::sample::select(vec![
        "漢字",
        "日本",
        "東京",
        "は",
        "へ",
        "ー",
        "ｰ",
        "ｶﾞ",
        "ﾟ",
        "ﾞ",
        "\u{fe00}",
        "\u{e0100}",
        "\u{3099}",
        "\u{300}",
        "😀",
        "\u{f000}",
        "\u{fffd}",
        "\u{ffff}",
        "\u{10ffff}",
        "。",
        "、",
        "!",
        ")",
        "々",
        "〇",
        "Ω",
        "Я",
        "ё",
        "\u{3400}",
        "\u{1b164}",
        "\u{1b150}",
        "葛󠄀",
    ]);
    let piece = prop_oneof![
        3 => any::<char>().prop_map(String::from),
        3 => special.prop_map(String::from),
        2 => "[a-zA-Z0-9 ]{1,6}",
        3 => "[\u{4e00}-\u{4e80}\u{3041}-\u{3096}\u{30a1}-\u{30fa}\u{ff66}-\u{ff9f}]{1,6}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn convert_never_panics(s in text()) {
        // every segment's `orig` is made of input characters (pykakasi drops some, repeats some
        // after a character of no known class, and returns nothing for dropped characters only)
        for seg in kakasi().convert(&s) {
            prop_assert!(seg.orig.chars().all(|c| s.contains(c)), "{:?} in {:?}", seg.orig, s);
        }
        let _ = hiragana_normalize(&s, Some(kakasi()));
    }

    #[test]
    fn text_without_kanji_keeps_its_segments(s in "[a-z0-9 \u{3041}-\u{3096}\u{30a1}-\u{30fa}]{0,30}") {
        // kana, ASCII: every segment keeps its original text, none is emitted twice
        let joined: String = kakasi().convert(&s).iter().map(|x| x.orig.as_str()).collect();
        prop_assert_eq!(joined, s);
    }
}
