//! The word segmenter hook of `ChineseCangjieConverter` (chatterbox/models/tokenizers/tokenizer.py,
//! upstream 5de7a54), which the reference fills with `spacy_pkuseg.pkuseg()` when installed.

/// Splits Chinese text into words; the converter joins them with `' '` (which becomes `[SPACE]`).
///
/// The reference uses `spacy_pkuseg.pkuseg()` (its `spacy_ontonotes` CRF model) when the package
/// is importable and skips segmentation otherwise. That model is not ported: without a
/// segmenter this crate does what the reference does without `spacy-pkuseg` installed. Plug a
/// port or a binding of pkuseg in here to match a reference that has it.
pub trait ChineseSegmenter: Send + Sync {
    /// The words of `text`, in order; their concatenation should be `text`.
    fn cut(&self, text: &str) -> Vec<String>;
}

impl<F> ChineseSegmenter for F
where
    F: Fn(&str) -> Vec<String> + Send + Sync,
{
    fn cut(&self, text: &str) -> Vec<String> {
        self(text)
    }
}
