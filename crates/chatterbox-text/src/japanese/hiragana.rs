//! Port of `hiragana_normalize` from chatterbox/models/tokenizers/tokenizer.py (upstream 5de7a54).
use super::kanji_reader::KanjiReader;
use unicode_normalization::UnicodeNormalization;

/// `is_kanji`: U+4E00..=U+9FFF (CJK Unified Ideographs only).
fn is_kanji(c: char) -> bool {
    (19968..=40959).contains(&(c as u32))
}

/// `hiragana_normalize`: every segment of the reader's output that contains a kanji is replaced
/// by its hiragana reading (with a leading `' '` when the reading starts with `は` or `へ`), all
/// other segments keep their original text, and the result is NFKD-normalised.
///
/// Without a reader (`None`) the text is returned unchanged and a warning is logged, as the
/// reference does when pykakasi is not installed.
// https://github.com/resemble-ai/chatterbox/blob/5de7a54/src/chatterbox/models/tokenizers/tokenizer.py#L75
pub fn hiragana_normalize(text: &str, reader: Option<&dyn KanjiReader>) -> String {
    let Some(reader) = reader else {
        tracing::warn!("no kanji reader - Japanese text processing skipped");
        return text.to_string();
    };
    let mut out = String::with_capacity(text.len() * 2);
    for segment in reader.convert(text) {
        if segment.orig.chars().any(is_kanji) {
            if segment.hira.starts_with(['は', 'へ']) {
                out.push(' ');
            }
            out.push_str(&segment.hira);
        } else {
            // The reference has two branches here (all katakana U+30A1..=U+30FA, and anything
            // else); both append the original text.
            out.push_str(&segment.orig);
        }
    }
    out.nfkd().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::japanese::Segment;

    /// A reader that returns fixed segments whatever the text.
    fn fixed(segments: &[(&str, &str)]) -> impl KanjiReader {
        let segments: Vec<Segment> = segments.iter().map(|&(o, h)| Segment::new(o, h)).collect();
        move |_: &str| segments.clone()
    }

    #[test]
    fn without_a_reader_the_text_is_unchanged() {
        // not even NFKD: the reference returns `text` itself
        assert_eq!(hiragana_normalize("ｶﾞ日本", None), "ｶﾞ日本");
    }

    #[test]
    fn kanji_segments_take_their_reading() {
        let reader = fixed(&[
            ("橋", "はし"),
            ("を", "を"),
            ("部屋", "へや"),
            ("母", "はは"),
        ]);
        assert_eq!(hiragana_normalize("", Some(&reader)), " はしを へや はは");
        // a kanji anywhere in the segment; an empty reading drops the segment
        let reader = fixed(&[("x日", "にち"), ("丼", ""), ("カナ", "かな"), ("ｶ", "か")]);
        // katakana and other segments keep `orig`; NFKD turns half-width ｶ into カ
        assert_eq!(hiragana_normalize("", Some(&reader)), "にちカナカ");
        // U+3400 (CJK extension A) is no kanji for the reference: `orig` is kept
        let reader = fixed(&[("\u{3400}", "は")]);
        assert_eq!(hiragana_normalize("", Some(&reader)), "\u{3400}");
    }

    #[test]
    fn the_result_is_nfkd() {
        let reader = fixed(&[("学", "がく")]);
        assert_eq!(
            hiragana_normalize("", Some(&reader)),
            "\u{304b}\u{3099}\u{304f}"
        );
    }
}
