//! Port of `JConv` from pykakasi 2.3.0's pykakasi/kanji.py: the longest dictionary word at the
//! start of a text, through the variant (itaiji) table.
//
// SPDX-License-Identifier: GPL-3.0-or-later
// Derived from pykakasi, Copyright 2011-2021 Hiroshi Miura <miurahr@linux.com>.
use crate::dict::KakasiDict;

/// `JConv._is_vschr`. Its other range, `0x0E0100 <= c <= 0x0E1EF`, is empty (sic), so the
/// supplementary variation selectors never count here.
fn is_vschr(c: char) -> bool {
    ('\u{FE00}'..='\u{FE02}').contains(&c)
}

/// `JConv` over a dictionary.
pub(crate) struct JConv<'a> {
    dict: &'a KakasiDict,
}

impl<'a> JConv<'a> {
    pub(crate) fn new(dict: &'a KakasiDict) -> Self {
        Self { dict }
    }

    /// `JConv.isRegion`.
    pub(crate) fn is_region(&self, c: char) -> bool {
        (0x3400..0xE000).contains(&(c as u32)) || self.dict.itaiji.contains_key(&c)
    }

    /// `JConv.convert(itext, btext)`: the reading of the longest dictionary word at the start
    /// of `itext` and how many characters of `itext` it covers (variation selectors included).
    pub(crate) fn convert(&self, itext: &[char], btext: &[char]) -> (String, usize) {
        let mut text: Vec<char> = Vec::with_capacity(itext.len());
        for c in itext {
            match self.dict.itaiji.get(c) {
                Some(Some(r)) => text.extend(r.chars()),
                Some(None) => {}
                None => text.push(*c),
            }
        }
        let num_vs = itext.len().saturating_sub(text.len());
        // pykakasi raises IndexError here (a lone deleted variant at the end); treat as unknown.
        let Some(first) = text.first() else {
            return (String::new(), 0);
        };
        let Some(table) = self.dict.kanwa.get(first) else {
            return (String::new(), 0);
        };
        let btext: String = btext.iter().collect();
        let mut max_len = 0usize;
        let mut hstr = "";
        for word in table {
            let length = word.key.len();
            if text.len() >= length && text[..length] == word.key[..] {
                for r in &word.readings {
                    let ok = match &r.context {
                        None => true,
                        Some(con) => con.contains(&btext),
                    };
                    if ok && max_len < length {
                        hstr = &r.yomi;
                        max_len = length;
                    }
                }
            }
        }
        // Python indexing: `seq[max_len - 1]` is the last element when max_len is 0.
        let at = |seq: &[char], i: isize| -> Option<char> {
            let i = if i < 0 { seq.len() as isize + i } else { i };
            usize::try_from(i).ok().and_then(|i| seq.get(i).copied())
        };
        for _ in 0..num_vs {
            if max_len > itext.len() {
                break;
            }
            let (Some(t), Some(it)) = (
                at(&text, max_len as isize - 1),
                at(itext, max_len as isize - 1),
            ) else {
                // pykakasi raises IndexError here; stop adjusting instead.
                break;
            };
            if t != it || (max_len < itext.len() && is_vschr(itext[max_len])) {
                max_len += 1;
            }
        }
        (hstr.to_string(), max_len)
    }
}
