//! Port of the parts of pykakasi 2.3.0's pykakasi/scripts.py that `Kakasi.convert` uses for the
//! `hira` field: the character classes `K2`, `H2`, `A2`, `Sym2` (`isRegion`) and katakana to
//! hiragana (`K2("H").convert_h`, `IConv._k2h`).
//
// SPDX-License-Identifier: GPL-3.0-or-later
// Derived from pykakasi, Copyright 2011-2021 Hiroshi Miura <miurahr@linux.com>.
use unicode_normalization::UnicodeNormalization;

/// `K2.isRegion`: katakana, half-width katakana, small kana extension.
pub(crate) fn k2_region(c: u32) -> bool {
    (0x30A0 < c && c < 0x30FD) || (0xFF65 < c && c < 0xFF9F) || (0x1B164..=0x1B167).contains(&c)
}

/// `H2.isRegion`: hiragana, small kana extension.
pub(crate) fn h2_region(c: u32) -> bool {
    (0x3040 < c && c < 0x3097) || (0x1B150..=0x1B152).contains(&c)
}

/// `A2.isRegion`: printable ASCII.
pub(crate) fn a2_region(c: u32) -> bool {
    (0x20..0x7F).contains(&c)
}

/// `Sym2.isRegion`, with pykakasi/properties.py `Ch`'s values (greece_Rho is 0x30A1 there, so
/// the range it opens spans U+0391..=U+30A1).
pub(crate) fn sym2_region(c: u32) -> bool {
    // pykakasi also tests `greece_Sigma <= c <= greece_Omega` = 0x30A3..=0x03A9, an empty range.
    (0x3000..=0x3020).contains(&c)
        || (0x3030..=0x303F).contains(&c)
        || (0x0391..=0x30A1).contains(&c)
        || (0x03B1..=0x03C9).contains(&c)
        || (0x0410..=0x044F).contains(&c)
        || (0xFF01..=0xFF1A).contains(&c)
        || (0x00A1..=0x00FF).contains(&c)
        || (0xFF20..=0xFF5E).contains(&c)
        || c == 0x0451
        || c == 0x0401
}

const KANA_DIFF: u32 = 0x30A1 - 0x3041;
const KANA_EDIFF: u32 = 0x1B164 - 0x1B150;

/// `K2._convert_half_kana` over pykakasi's `halfkana3.db` (half-width katakana to full width;
/// voiced pairs as one character; `ﾞ` to `゛`). Returns the full-width character and how many
/// input characters it used.
fn half_kana(text: &[char]) -> Option<(char, usize)> {
    const DAKUTEN_BASES: &str = "ｶｷｸｹｺｻｼｽｾｿﾀﾁﾂﾃﾄﾊﾋﾌﾍﾎｳ";
    const HANDAKUTEN_BASES: &str = "ﾊﾋﾌﾍﾎ";
    let single = |s: &str| -> Option<char> {
        let mut it = s.nfkc();
        match (it.next(), it.next()) {
            (Some(c), None) => Some(c),
            _ => None,
        }
    };
    let c = *text.first()?;
    if let Some(&next) = text.get(1) {
        let pair = (next == 'ﾞ' && DAKUTEN_BASES.contains(c))
            || (next == 'ﾟ' && HANDAKUTEN_BASES.contains(c));
        if pair {
            return single(&[c, next].iter().collect::<String>()).map(|k| (k, 2));
        }
    }
    match c {
        'ﾞ' => Some(('\u{309B}', 1)),
        '\u{FF66}'..='\u{FF9D}' => single(c.encode_utf8(&mut [0; 4])).map(|k| (k, 1)),
        _ => None,
    }
}

/// `K2("H").convert_h` on one window: converts the leading run of katakana.
fn convert_h(text: &[char]) -> (String, usize) {
    let mut out = String::new();
    let mut max_len = 0;
    let mut x = 0;
    while x < text.len() {
        let c = text[x] as u32;
        let push = |out: &mut String, code: u32| out.extend(char::from_u32(code));
        if (0x1B164..0x1B167).contains(&c) {
            push(&mut out, c - KANA_EDIFF);
            max_len += 1;
            x += 1;
        } else if c == 0x1B167 {
            out.push('\u{3093}');
            max_len += 1;
            x += 1;
        } else if 0x30A0 < c && c < 0x30F7 {
            push(&mut out, c - KANA_DIFF);
            max_len += 1;
            x += 1;
        } else if (0x30F7..0x30FD).contains(&c) {
            out.push(text[x]);
            max_len += 1;
            x += 1;
        } else if 0xFF65 < c && c < 0xFF9F {
            match half_kana(&text[x..]) {
                Some((k, length)) => {
                    max_len += length;
                    x += length;
                    if k as u32 == 0x309B {
                        out.push(k);
                    } else {
                        push(&mut out, (k as u32).wrapping_sub(KANA_DIFF));
                    }
                }
                None => {
                    // unknown half-width character: skipped (pykakasi issue #115)
                    max_len += 1;
                    x += 1;
                }
            }
        } else {
            break;
        }
    }
    (out, max_len)
}

/// `IConv._k2h`: katakana to hiragana over the whole string, in windows of 32 characters.
pub(crate) fn k2h(text: &[char]) -> String {
    const MAXLEN: usize = 32;
    let mut out = String::new();
    let mut i = 0;
    while i < text.len() {
        let w = (i + MAXLEN).min(text.len());
        let (t, l1) = convert_h(&text[i..w]);
        if l1 > 0 {
            out.push_str(&t);
            i += l1;
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_width_kana() {
        let chars: Vec<char> = "ｶﾞｷﾞｰｱ".chars().collect();
        assert_eq!(k2h(&chars), "がぎ゜あ");
    }
}
