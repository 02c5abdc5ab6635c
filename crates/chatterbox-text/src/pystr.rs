//! Python `str` semantics the reference relies on (`str.isspace`, `str.split()`, `str.strip()`,
//! `str.islower`/`str.upper` of one character), so the ports match byte for byte.

/// Python's `str.isspace()` for one character: Unicode `White_Space` plus the four ASCII
/// information separators U+001C..U+001F, which Python counts (bidirectional class B/S) and
/// Rust's `char::is_whitespace` does not.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `" ".join(text.split())`: split on runs of [`is_py_space`], drop empty parts, join
/// with one ASCII space.
pub(crate) fn collapse_whitespace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split(is_py_space).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Python's `text.strip()` (no argument).
pub(crate) fn py_strip(text: &str) -> &str {
    text.trim_matches(is_py_space)
}

/// The reference's "Capitalise first letter": `if text[0].islower(): text = text[0].upper() +
/// text[1:]`. Python's one-character `islower` is the Unicode `Lowercase` property and `upper` is
/// the full (SpecialCasing) mapping, which is what `char::is_lowercase`/`to_uppercase` implement.
pub(crate) fn capitalise_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) if c.is_lowercase() => {
            let mut out = String::with_capacity(text.len() + 2);
            out.extend(c.to_uppercase());
            out.push_str(chars.as_str());
            out
        }
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_whitespace_includes_information_separators() {
        assert_eq!(collapse_whitespace("a\u{1c}b\u{1f}\u{3000}c  "), "a b c");
        assert_eq!(collapse_whitespace(" \t\n"), "");
        assert_eq!(py_strip("\u{1e} x \u{85}"), "x");
        // U+200B ZERO WIDTH SPACE is not whitespace for Python.
        assert_eq!(collapse_whitespace("a\u{200b}b"), "a\u{200b}b");
    }

    #[test]
    fn capitalise_uses_full_uppercase_mapping() {
        assert_eq!(capitalise_first("ßa"), "SSa");
        assert_eq!(capitalise_first("ﬁne"), "FIne");
        assert_eq!(capitalise_first("Ab"), "Ab");
        assert_eq!(capitalise_first("ǅx"), "ǅx"); // titlecase is not lowercase
        assert_eq!(capitalise_first(""), "");
    }
}
