//! A pronunciation lexicon (issue 44; the reference has none): the user's respellings of
//! words the model says wrongly (`Nguyen = Win`, `GIF = jif`), applied to the text before it
//! is normalised and tokenized.
//!
//! The file is UTF-8 text, one entry a line: `word = respelling`. Blank lines and lines
//! starting with `#` are ignored. A word is letters and digits, with `'`, `’` or `-` between
//! them (`don't`, `e-mail`); a respelling is any text without `[`, `]`, `<` or `>` (so it can
//! never make markup), up to [`MAX_RESPELLING_CHARS`] characters. A word given twice, a
//! malformed line or more than [`MAX_LEXICON_ENTRIES`] entries are an error naming the line.
//!
//! Case rules:
//! * a word written all in lower case matches in any case (`gif = jif` matches `gif`, `Gif`,
//!   `GIF`); when the text's word starts with a capital, so does the respelling (`Gif` ->
//!   `Jif`);
//! * a word with a capital matches only as written (`US = United States` leaves `us` alone),
//!   and its respelling is used as written; it wins over a lower-case entry of the same word.
//!
//! Only whole words are replaced: `gif` does not touch `gifts`. Text inside square brackets is
//! left alone, so pause tags and Turbo's tags (`[laugh]`) are never respelled.
use crate::error::{Result, TextError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Most entries a lexicon may hold.
pub const MAX_LEXICON_ENTRIES: usize = 100_000;
/// Longest respelling, in characters.
pub const MAX_RESPELLING_CHARS: usize = 200;

/// Respellings of words, applied with [`Lexicon::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lexicon {
    /// Entries with a capital: matched as written.
    exact: HashMap<String, String>,
    /// Entries in lower case: matched in any case (keys lower-cased).
    folded: HashMap<String, String>,
}

/// Whether `c` can be part of a word.
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric()
}

/// Whether `c` may join two parts of a word (`don't`, `e-mail`).
fn is_joiner(c: char) -> bool {
    matches!(c, '\'' | '\u{2019}' | '-')
}

/// Whether `s` is one word as the lexicon reads words.
fn is_word(s: &str) -> bool {
    let chars: Vec<char> = s.chars().collect();
    !chars.is_empty()
        && chars.first().is_some_and(|&c| is_word_char(c))
        && chars.last().is_some_and(|&c| is_word_char(c))
        && chars
            .windows(2)
            .all(|w| !(is_joiner(w[0]) && is_joiner(w[1])))
        && chars.iter().all(|&c| is_word_char(c) || is_joiner(c))
}

impl Lexicon {
    /// Reads a lexicon file (see the module's documentation for the format).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = crate::error::read_to_string(path)?;
        Self::parse_named(&text, path.to_path_buf())
    }

    /// Reads a lexicon from the text of a file.
    pub fn parse(text: &str) -> Result<Self> {
        Self::parse_named(text, PathBuf::from("<in memory>"))
    }

    fn parse_named(text: &str, path: PathBuf) -> Result<Self> {
        let err = |line: usize, message: String| TextError::Lexicon {
            path: path.clone(),
            line,
            message,
        };
        let mut lex = Self::default();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((word, respelling)) = line.split_once('=') else {
                return Err(err(
                    line_no,
                    format!("{line:?} is not an entry: write `word = respelling`"),
                ));
            };
            let (word, respelling) = (word.trim(), respelling.trim());
            if !is_word(word) {
                return Err(err(
                    line_no,
                    format!("{word:?} is not a word: letters and digits, with ' or - between them"),
                ));
            }
            if respelling.is_empty() {
                return Err(err(line_no, format!("{word:?} has an empty respelling")));
            }
            if respelling.contains(['[', ']', '<', '>']) {
                return Err(err(
                    line_no,
                    format!("the respelling of {word:?} holds [, ], < or >, which would be markup"),
                ));
            }
            if respelling.chars().count() > MAX_RESPELLING_CHARS {
                return Err(err(
                    line_no,
                    format!("the respelling of {word:?} is longer than {MAX_RESPELLING_CHARS} characters"),
                ));
            }
            if seen.len() >= MAX_LEXICON_ENTRIES {
                return Err(err(
                    line_no,
                    format!("more than {MAX_LEXICON_ENTRIES} entries"),
                ));
            }
            if let Some(first) = seen.insert(word.to_string(), line_no) {
                return Err(err(
                    line_no,
                    format!("{word:?} is given twice (first on line {first})"),
                ));
            }
            let respelling = respelling.split_whitespace().collect::<Vec<_>>().join(" ");
            if word.chars().any(char::is_uppercase) {
                lex.exact.insert(word.to_string(), respelling);
            } else {
                lex.folded.insert(word.to_lowercase(), respelling);
            }
        }
        Ok(lex)
    }

    /// Entries in the lexicon.
    pub fn len(&self) -> usize {
        self.exact.len() + self.folded.len()
    }

    /// Whether the lexicon has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The respelling of one word of a text, if the lexicon has one.
    fn respell(&self, word: &str) -> Option<String> {
        if let Some(r) = self.exact.get(word) {
            return Some(r.clone());
        }
        let r = self.folded.get(&word.to_lowercase())?;
        let capital = word.chars().next().is_some_and(char::is_uppercase);
        let mut chars = r.chars();
        Some(match chars.next() {
            Some(first) if capital && first.is_lowercase() => {
                first.to_uppercase().chain(chars).collect()
            }
            _ => r.clone(),
        })
    }

    /// `text` with each word the lexicon has replaced by its respelling (whole words only;
    /// text inside `[...]` untouched). Without a match the text is returned unchanged.
    pub fn apply(&self, text: &str) -> String {
        if self.is_empty() {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut chars = text.char_indices().peekable();
        let mut in_bracket = false;
        while let Some((i, c)) = chars.next() {
            if in_bracket {
                in_bracket = c != ']';
                out.push(c);
                continue;
            }
            if c == '[' {
                in_bracket = true;
                out.push(c);
                continue;
            }
            if !is_word_char(c) {
                out.push(c);
                continue;
            }
            // a word: word characters, joined by one joiner between two of them
            let mut end = i + c.len_utf8();
            loop {
                match chars.peek().copied() {
                    Some((j, d)) if is_word_char(d) => {
                        end = j + d.len_utf8();
                        chars.next();
                    }
                    Some((j, d)) if is_joiner(d) => {
                        let next = text[j + d.len_utf8()..].chars().next();
                        if next.is_some_and(is_word_char) {
                            end = j + d.len_utf8();
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    _ => break,
                }
            }
            let word = &text[i..end];
            match self.respell(word) {
                Some(r) => out.push_str(&r),
                None => out.push_str(word),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex(s: &str) -> Lexicon {
        Lexicon::parse(s).unwrap_or_default()
    }

    #[test]
    fn case_rules() {
        let l = lex("# names\ngif = jif\nUS = United States\nNguyen =  Win \n\ndon't = do not\n");
        assert_eq!(l.len(), 4);
        assert_eq!(l.apply("A gif, a Gif, a GIF."), "A jif, a Jif, a Jif.");
        assert_eq!(l.apply("The US and us."), "The United States and us.");
        assert_eq!(l.apply("Mr Nguyen; mr nguyen"), "Mr Win; mr nguyen");
        assert_eq!(l.apply("Don't gifts"), "Do not gifts");
    }

    #[test]
    fn brackets_and_words_are_kept() {
        let l = lex("laugh = laff\npause = paws\ngif = jif");
        assert_eq!(
            l.apply("[laugh] gif [pause 1s] laugh-gif e-gif"),
            "[laugh] jif [pause 1s] laugh-gif e-gif"
        );
        assert_eq!(l.apply("gif's gif- -gif"), "gif's jif- -jif");
    }

    #[test]
    fn bad_files_name_the_line() {
        for (text, line) in [
            ("gif = jif\nnot an entry", 2),
            ("two words = x", 1),
            ("a = b\na = c", 2),
            ("a = [laugh]", 1),
            ("a =", 1),
            ("-a = b", 1),
        ] {
            match Lexicon::parse(text) {
                Err(TextError::Lexicon { line: l, .. }) => assert_eq!(l, line, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
