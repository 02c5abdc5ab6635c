//! Splitting long text into chunks for generation (no counterpart in the reference, which
//! speaks the whole text at once and degrades past a few hundred characters).
use crate::error::{Result, TextError};
use crate::pystr::is_py_space;
use std::collections::HashSet;

/// One chunk of text: `text == input[start..end]` (byte offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The chunk.
    pub text: String,
    /// Byte offset of its first character in the input.
    pub start: usize,
    /// Byte offset just past its last character.
    pub end: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Priority {
    Word,
    Clause,
    Sentence,
}

#[derive(Debug, Clone, Copy)]
struct Break {
    /// Byte offset where the chunk before it ends (start of the whitespace, if any).
    end: usize,
    /// Byte offset where the next chunk starts (after the whitespace).
    next: usize,
    priority: Priority,
}

/// Abbreviations (lowercase, without the final dot) after which a `.` does not end a sentence.
pub const DEFAULT_ABBREVIATIONS: &[&str] = &[
    // English titles, Latin and reference abbreviations, months
    "mr", "mrs", "ms", "mx", "dr", "prof", "sr", "jr", "st", "mt", "vs", "etc", "e.g", "i.e", "cf",
    "nr", "vol", "fig", "pp", "inc", "ltd", "corp", "dept", "approx", "jan", "feb", "mar", "apr",
    "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "capt", "sgt", "lt", "rev", "hon",
    // German, Spanish, French, Italian, Polish, Russian
    "z.b", "bzw", "usw", "sra", "srta", "mme", "mlle", "p.ex", "ecc", "np", "itp", "т.е", "т.д",
    "т.п", "г", "ул",
];

/// Splits long text into chunks of at most `max_chars` characters at sentence, clause or word
/// boundaries.
///
/// # What is preserved
///
/// Every [`Chunk`] is a slice `text[start..end]` of the input, non-empty, without leading or
/// trailing whitespace; chunks come in input order and do not overlap, and everything between
/// two chunks (and before the first and after the last) is whitespace. So the input is exactly
/// the chunks joined with the whitespace that separated them: only whitespace at chunk
/// boundaries is dropped. Whitespace is Python's `str.isspace` (as `punc_norm` uses).
///
/// # Where it splits
///
/// A chunk holds at most `max_chars` characters (Unicode scalar values). Break points, best
/// first:
/// 1. sentence ends: `.`, `!`, `?`, `…` and other scripts' full stops followed by whitespace
///    (closing quotes and brackets may come between); `。！？` also without whitespace; a
///    whitespace run with a line break. A `.` after a known abbreviation (`Dr.`, `e.g.`, `z.B.`),
///    a single-letter initial or before a lowercase word does not end a sentence;
/// 2. clause marks: `,` `;` `:` `—` `–` (and `，、；：` without whitespace);
/// 3. any other whitespace, and the gap between two CJK characters (Han, kana).
///
/// The last break point of the best class that keeps the chunk within budget is used. Where
/// none fits (a URL, a long run of letters without spaces), the chunk is cut after
/// `max_chars` characters (before any combining marks of the character there), so no chunk is
/// ever longer than the budget and any text of any length can be spoken.
#[derive(Debug, Clone)]
pub struct SentenceChunker {
    max_chars: usize,
    abbreviations: HashSet<String>,
}

/// Default character budget: below the ~300 characters past which users report garbled output.
pub const DEFAULT_MAX_CHARS: usize = 250;

impl Default for SentenceChunker {
    fn default() -> Self {
        Self {
            max_chars: DEFAULT_MAX_CHARS,
            abbreviations: DEFAULT_ABBREVIATIONS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

fn is_closer(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | ')'
            | ']'
            | '}'
            | '”'
            | '’'
            | '»'
            | '›'
            | '」'
            | '』'
            | '）'
            | '】'
            | '〕'
            | '〉'
            | '》'
            | '〗'
            | '〙'
            | '〛'
            | '＂'
            | '＇'
            | '］'
            | '｝'
    )
}

fn is_opener(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | '('
            | '['
            | '{'
            | '“'
            | '‘'
            | '«'
            | '‹'
            | '「'
            | '『'
            | '（'
            | '【'
            | '〔'
            | '¿'
            | '¡'
    )
}

fn is_sentence_end(c: char) -> bool {
    matches!(
        c,
        '.' | '!'
            | '?'
            | '…'
            | '‼'
            | '⁇'
            | '⁈'
            | '⁉'
            | '。'
            | '！'
            | '？'
            | '｡'
            | '．'
            | '؟'
            | '۔'
            | '।'
            | '॥'
            | '\u{37e}' // Greek question mark
    )
}

fn is_cjk_sentence_end(c: char) -> bool {
    matches!(c, '。' | '！' | '？' | '｡' | '．')
}

fn is_clause_mark(c: char) -> bool {
    matches!(
        c,
        ',' | ';' | ':' | '—' | '–' | '，' | '、' | '；' | '：' | '､' | '،' | '؛'
    )
}

fn is_cjk_clause_mark(c: char) -> bool {
    matches!(c, '，' | '、' | '；' | '：' | '､')
}

/// Combining marks (and the zero-width joiner), which a hard cut keeps with the character
/// before them.
fn is_combining(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory as G};
    c == '\u{200d}'
        || matches!(
            get_general_category(c),
            G::NonspacingMark | G::SpacingMark | G::EnclosingMark
        )
}

/// Han ideographs, kana and CJK symbols: scripts written without spaces, where a chunk may end
/// between any two characters.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // hiragana, katakana
        | 0x31F0..=0x31FF    // katakana phonetic extensions
        | 0x3400..=0x4DBF    // CJK ext A
        | 0x4E00..=0x9FFF    // CJK unified
        | 0xF900..=0xFAFF    // compatibility ideographs
        | 0xFF66..=0xFF9D    // half-width katakana
        | 0x20000..=0x3134F  // CJK ext B..G
    )
}

impl SentenceChunker {
    /// A chunker with a budget of `max_chars` characters and the default abbreviations.
    pub fn new(max_chars: usize) -> Result<Self> {
        if max_chars == 0 {
            return Err(TextError::ZeroBudget);
        }
        Ok(Self {
            max_chars,
            ..Self::default()
        })
    }

    /// Replaces the abbreviation list (lowercase, without the final dot: `"dr"`, `"e.g"`).
    pub fn with_abbreviations<I, S>(mut self, abbreviations: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.abbreviations = abbreviations.into_iter().map(Into::into).collect();
        self
    }

    /// The character budget.
    pub fn max_chars(&self) -> usize {
        self.max_chars
    }

    /// Whether the `.` at char index `dot` (of `chars`) ends a sentence.
    fn dot_ends_sentence(
        &self,
        chars: &[(usize, char)],
        dot: usize,
        next_word: Option<char>,
    ) -> bool {
        if next_word.is_some_and(char::is_lowercase) {
            return false;
        }
        // the word before the dot
        let mut k = dot;
        while k > 0 && !is_py_space(chars[k - 1].1) {
            k -= 1;
        }
        let word: String = chars[k..dot]
            .iter()
            .map(|&(_, c)| c)
            .skip_while(|&c| is_opener(c))
            .collect::<String>()
            .to_lowercase();
        if word.is_empty() {
            return true;
        }
        let mut letters = word.chars();
        let single_letter =
            letters.next().is_some_and(char::is_alphabetic) && letters.next().is_none();
        !(single_letter || self.abbreviations.contains(&word))
    }

    fn breaks(&self, text: &str, chars: &[(usize, char)]) -> Vec<Break> {
        let mut out = Vec::new();
        let n = chars.len();
        let mut i = 0;
        while i < n {
            let (pos, c) = chars[i];
            if is_py_space(c) {
                let mut j = i;
                let mut line_break = false;
                while j < n && is_py_space(chars[j].1) {
                    line_break |=
                        matches!(chars[j].1, '\n' | '\r' | '\u{2028}' | '\u{2029}' | '\u{85}');
                    j += 1;
                }
                if i > 0 && j < n {
                    let next = chars[j].0;
                    // the mark before the whitespace, skipping closing quotes/brackets
                    let mut k = i - 1;
                    while k > 0 && is_closer(chars[k].1) {
                        k -= 1;
                    }
                    let mark = chars[k].1;
                    let priority = if line_break {
                        Priority::Sentence
                    } else if is_sentence_end(mark) {
                        let next_word = chars[j..].iter().map(|&(_, c)| c).find(|&c| !is_opener(c));
                        if mark != '.' || self.dot_ends_sentence(chars, k, next_word) {
                            Priority::Sentence
                        } else {
                            Priority::Word
                        }
                    } else if is_clause_mark(mark) {
                        Priority::Clause
                    } else {
                        Priority::Word
                    };
                    out.push(Break {
                        end: pos,
                        next,
                        priority,
                    });
                }
                i = j;
                continue;
            }
            // gap between chars[i] and chars[i + 1], both non-whitespace
            if let Some(&(next_pos, b)) = chars.get(i + 1) {
                if !is_py_space(b) && !is_closer(b) {
                    let mut k = i;
                    while k > 0 && is_closer(chars[k].1) {
                        k -= 1;
                    }
                    let mark = chars[k].1;
                    let priority = if is_cjk_sentence_end(mark) {
                        Some(Priority::Sentence)
                    } else if is_cjk_clause_mark(mark) {
                        Some(Priority::Clause)
                    } else if is_cjk(c) && is_cjk(b) {
                        Some(Priority::Word)
                    } else {
                        None
                    };
                    if let Some(priority) = priority {
                        out.push(Break {
                            end: next_pos,
                            next: next_pos,
                            priority,
                        });
                    }
                }
            }
            i += 1;
        }
        debug_assert!(out.iter().all(|b| b.end <= b.next && b.next <= text.len()));
        out
    }

    /// A cut after `max_chars` characters from char index `start` (inside a stretch with no
    /// break point, which holds no whitespace), moved back so that combining marks stay with
    /// their base character when that leaves anything before the cut.
    fn hard_break(&self, chars: &[(usize, char)], start: usize) -> Break {
        let mut cut = start + self.max_chars;
        while cut > start + 1 && is_combining(chars[cut].1) {
            cut -= 1;
        }
        if is_combining(chars[cut].1) {
            cut = start + self.max_chars;
        }
        let at = chars[cut].0;
        Break {
            end: at,
            next: at,
            priority: Priority::Word,
        }
    }

    /// Splits `text` into chunks (none for empty or whitespace-only text).
    pub fn chunk(&self, text: &str) -> Vec<Chunk> {
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        // char index of each byte offset that starts a char (and of text.len())
        let char_at = |byte: usize| chars.partition_point(|&(p, _)| p < byte);
        let breaks = self.breaks(text, &chars);
        let mut chunks = Vec::new();
        let Some(first) = chars.iter().position(|&(_, c)| !is_py_space(c)) else {
            return chunks;
        };
        let mut start = chars[first].0;
        let mut b = 0; // first break after `start`
        loop {
            while b < breaks.len() && breaks[b].end <= start {
                b += 1;
            }
            let start_char = char_at(start);
            let rest_end = text.trim_end_matches(is_py_space).len();
            if char_at(rest_end) - start_char <= self.max_chars {
                chunks.push(Chunk {
                    text: text[start..rest_end].to_string(),
                    start,
                    end: rest_end,
                });
                return chunks;
            }
            // breaks whose chunk fits the budget
            let fits = breaks[b..]
                .iter()
                .take_while(|br| char_at(br.end) - start_char <= self.max_chars)
                .count();
            let chosen = if fits == 0 {
                // No break point within the budget (a URL, a long unspaced run): cut hard.
                self.hard_break(&chars, start_char)
            } else {
                let window = &breaks[b..b + fits];
                let best = window
                    .iter()
                    .map(|br| br.priority)
                    .max()
                    .unwrap_or(Priority::Word);
                window
                    .iter()
                    .rev()
                    .find(|br| br.priority == best)
                    .copied()
                    .unwrap_or(window[fits - 1])
            };
            chunks.push(Chunk {
                text: text[start..chosen.end].to_string(),
                start,
                end: chosen.end,
            });
            start = chosen.next;
        }
    }

    /// The chunks' texts.
    pub fn split(&self, text: &str) -> Vec<String> {
        self.chunk(text).into_iter().map(|c| c.text).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(max: usize, text: &str) -> Vec<String> {
        SentenceChunker::new(max).unwrap().split(text)
    }

    #[test]
    fn prefers_sentences_then_clauses_then_words() {
        let t = "Dr. Smith arrived at 5 p.m. today. He was late, as usual; nobody minded. The end!";
        assert_eq!(
            split(40, t),
            vec![
                "Dr. Smith arrived at 5 p.m. today.",
                "He was late, as usual; nobody minded.",
                "The end!"
            ]
        );
        assert_eq!(
            split(20, "one two three, four five six seven"),
            vec!["one two three,", "four five six seven"]
        );
        assert_eq!(split(9, "abc def ghi jkl"), vec!["abc def", "ghi jkl"]);
    }

    #[test]
    fn abbreviations_initials_and_lowercase_continuations() {
        let t = "J. R. R. Tolkien wrote it, e.g. The Hobbit. Approx. five. Then more.";
        assert_eq!(
            split(30, t),
            vec![
                "J. R. R. Tolkien wrote it,",
                "e.g. The Hobbit. Approx. five.",
                "Then more."
            ]
        );
    }

    #[test]
    fn cjk_without_spaces() {
        assert_eq!(
            split(7, "今天天气很好。我们去公园吧！"),
            vec!["今天天气很好。", "我们去公园吧！"]
        );
        assert_eq!(split(3, "日本語の文章"), vec!["日本語", "の文章"]);
        assert_eq!(
            split(8, "「はい。」と言った。"),
            vec!["「はい。」", "と言った。"]
        );
    }

    #[test]
    fn stretches_without_break_points_are_cut_hard() {
        assert_eq!(
            split(5, "  supercalifragilistic is long  "),
            vec!["super", "calif", "ragil", "istic", "is", "long"]
        );
        // A URL, then a sentence: the URL is cut, the sentence is left whole.
        assert_eq!(
            split(12, "https://example.com/a/b/c Then."),
            vec!["https://exam", "ple.com/a/b/", "c Then."]
        );
        // Thai (no spaces, no CJK gaps) of any length speaks in budget-sized pieces.
        let thai = "สวัสดีครับ".repeat(100);
        let pieces = split(250, &thai);
        assert!(pieces.iter().all(|p| p.chars().count() <= 250));
        assert_eq!(pieces.concat(), thai);
        // A combining mark stays with its base letter.
        assert_eq!(split(3, "abe\u{301}cd"), vec!["ab", "e\u{301}c", "d"]);
        assert!(split(5, " \n\t ").is_empty());
        assert!(split(5, "").is_empty());
        assert!(matches!(
            SentenceChunker::new(0),
            Err(TextError::ZeroBudget)
        ));
    }

    #[test]
    fn paragraph_breaks_end_sentences() {
        assert_eq!(
            split(15, "Title\n\nBody text here"),
            vec!["Title", "Body text here"]
        );
    }
}
