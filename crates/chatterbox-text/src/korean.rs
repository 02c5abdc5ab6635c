//! Port of `korean_normalize` from chatterbox/models/tokenizers/tokenizer.py (upstream 5de7a54).
use crate::pystr::py_strip;

/// Decomposes each character of U+AC00..=U+D7AF into conjoining Jamo with the Hangul formula
/// (`initial + medial + final`), then strips surrounding whitespace as the reference does.
///
/// The range is the reference's: it includes U+D7A4..=U+D7AF, which are not syllables, and the
/// formula is applied to them too. After the multilingual tokenizer's NFKD, real syllables are
/// already decomposed, so in that path only those code points and the final strip act.
// https://github.com/resemble-ai/chatterbox/blob/5de7a54/src/chatterbox/models/tokenizers/tokenizer.py#L141
pub fn korean_normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for c in text.chars() {
        if ('\u{ac00}'..='\u{d7af}').contains(&c) {
            let base = c as u32 - 0xAC00;
            let initial = 0x1100 + base / (21 * 28);
            let medial = 0x1161 + (base % (21 * 28)) / 28;
            for code in [initial, medial] {
                out.extend(char::from_u32(code));
            }
            if !base.is_multiple_of(28) {
                out.extend(char::from_u32(0x11A7 + base % 28));
            }
        } else {
            out.push(c);
        }
    }
    py_strip(&out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decomposes_syllables() {
        // 한 = ᄒ ᅡ ᆫ, 가 = ᄀ ᅡ (no final)
        assert_eq!(
            korean_normalize(" 한가 "),
            "\u{1112}\u{1161}\u{11ab}\u{1100}\u{1161}"
        );
        // U+D7AF is outside the syllable block but inside the reference's range.
        assert_eq!(korean_normalize("\u{d7af}"), "\u{1113}\u{1161}\u{11b2}");
    }
}
