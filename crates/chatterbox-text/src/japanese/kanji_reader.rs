//! The kanji reader hook of `hiragana_normalize` (chatterbox/models/tokenizers/tokenizer.py,
//! upstream 5de7a54), which the reference fills with `pykakasi.kakasi()` when it is installed.

/// One segment of a reading: the `orig` and `hira` fields of an item of pykakasi's
/// `kakasi().convert(text)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segment {
    /// The text of the segment as it was in the input.
    pub orig: String,
    /// Its reading in hiragana.
    pub hira: String,
}

impl Segment {
    /// A segment of `orig` read as `hira`.
    pub fn new(orig: impl Into<String>, hira: impl Into<String>) -> Self {
        Self {
            orig: orig.into(),
            hira: hira.into(),
        }
    }
}

/// Splits Japanese text into segments with their hiragana readings, in order: the role of
/// pykakasi's `kakasi().convert(text)` in the reference.
///
/// pykakasi (its algorithm and its dictionary) is GPL-3.0-or-later, so this MIT crate holds no
/// implementation. Without a reader, Japanese text is left as it is, exactly as the reference
/// does when pykakasi is not installed. The separate crate `chatterbox-kakasi`
/// (GPL-3.0-or-later) implements this trait with a port of pykakasi 2.3.0; anything else that
/// segments and reads Japanese can be plugged in too (closures of the right type are readers).
pub trait KanjiReader: Send + Sync {
    /// The segments of `text`, in order.
    fn convert(&self, text: &str) -> Vec<Segment>;
}

impl<F> KanjiReader for F
where
    F: Fn(&str) -> Vec<Segment> + Send + Sync,
{
    fn convert(&self, text: &str) -> Vec<Segment> {
        self(text)
    }
}
