//! Port of the text steps of `MTLTokenizer.encode` before the tokenizer runs
//! (`preprocess_text`, the per-language rewrite, the `[lang]` prefix, `' '` → `[SPACE]`) from
//! chatterbox/models/tokenizers/tokenizer.py (upstream 5de7a54). They need no vocabulary, so
//! they live apart from [`MTLTokenizer`](crate::MTLTokenizer), which runs them through this.
use crate::chinese::{CangjieTable, ChineseCangjieConverter, ChineseSegmenter};
use crate::japanese::{hiragana_normalize, KanjiReader};
use crate::korean::korean_normalize;
use crate::language::Language;
use crate::optional_models::{add_hebrew_diacritics, add_russian_stress, TextModel};
use crate::special_tokens::SPACE;
use std::sync::Arc;
use unicode_normalization::UnicodeNormalization;

/// Options of `MTLTokenizer.encode`.
///
/// ```
/// use chatterbox_text::MtlEncodeOptions;
/// let raw = MtlEncodeOptions::default().with_lowercase(false).with_nfkd_normalize(false);
/// assert!(!raw.lowercase && !raw.nfkd_normalize);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MtlEncodeOptions {
    /// Lowercase the text first (`str.lower()`, full Unicode mapping). Default: `true`.
    pub lowercase: bool,
    /// NFKD-normalise after lowercasing. Default: `true`.
    pub nfkd_normalize: bool,
}

impl Default for MtlEncodeOptions {
    fn default() -> Self {
        Self {
            lowercase: true,
            nfkd_normalize: true,
        }
    }
}

impl MtlEncodeOptions {
    /// Sets [`lowercase`](Self::lowercase).
    pub fn with_lowercase(mut self, lowercase: bool) -> Self {
        self.lowercase = lowercase;
        self
    }

    /// Sets [`nfkd_normalize`](Self::nfkd_normalize).
    pub fn with_nfkd_normalize(mut self, nfkd_normalize: bool) -> Self {
        self.nfkd_normalize = nfkd_normalize;
        self
    }
}

/// `MTLTokenizer.preprocess_text`: `str.lower()` then NFKD, each optional.
pub fn preprocess_text(raw_text: &str, options: MtlEncodeOptions) -> String {
    let mut text = if options.lowercase {
        raw_text.to_lowercase()
    } else {
        raw_text.to_string()
    };
    if options.nfkd_normalize {
        text = text.nfkd().collect();
    }
    text
}

/// Everything the multilingual tokenizer does to a string before the vocabulary is looked at,
/// with its optional parts: the Cangjie table and word segmenter (`zh`), the kanji reader
/// (`ja`, pykakasi's role), the Hebrew diacritizer and the Russian stress marker. Each absent
/// part is skipped as the reference skips it when its package is not installed.
///
/// ```
/// use chatterbox_text::{Language, MtlEncodeOptions, MtlPreprocessor};
/// let pre = MtlPreprocessor::new();
/// let s = pre.prepare("Ça va?", Some(Language::French), MtlEncodeOptions::default());
/// assert_eq!(s, "[fr]c\u{327}a[SPACE]va?");
/// assert_eq!(pre.apply_language("한", Language::Korean), "\u{1112}\u{1161}\u{11ab}");
/// ```
#[derive(Clone, Default)]
pub struct MtlPreprocessor {
    cangjie_converter: ChineseCangjieConverter,
    kanji_reader: Option<Arc<dyn KanjiReader>>,
    hebrew: Option<Arc<dyn TextModel>>,
    russian: Option<Arc<dyn TextModel>>,
}

impl std::fmt::Debug for MtlPreprocessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MtlPreprocessor")
            .field("cangjie_converter", &self.cangjie_converter)
            .field("kanji_reader", &self.kanji_reader.is_some())
            .field("hebrew", &self.hebrew.is_some())
            .field("russian", &self.russian.is_some())
            .finish()
    }
}

impl MtlPreprocessor {
    /// A preprocessor without any optional part (an empty Cangjie table: Chinese characters
    /// pass unconverted).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the Japanese kanji → hiragana reader (pykakasi's role; the GPL-3.0-or-later crate
    /// `chatterbox-kakasi` provides one). `None`: Japanese text is left as it is, as in the
    /// reference without pykakasi.
    pub fn with_kanji_reader(mut self, reader: Option<Arc<dyn KanjiReader>>) -> Self {
        self.kanji_reader = reader;
        self
    }

    /// Sets the Chinese word segmenter (spacy-pkuseg's role).
    pub fn with_segmenter(mut self, segmenter: Option<Arc<dyn ChineseSegmenter>>) -> Self {
        self.cangjie_converter = self.cangjie_converter.with_segmenter(segmenter);
        self
    }

    /// Replaces the Cangjie table (`Cangjie5_TC.json`: [`CangjieTable::from_file`] or
    /// [`CangjieTable::from_json`]).
    pub fn with_cangjie_table(mut self, table: CangjieTable) -> Self {
        self.cangjie_converter = std::mem::take(&mut self.cangjie_converter).with_table(table);
        self
    }

    /// Sets the Hebrew diacritizer (dicta_onnx's role).
    pub fn with_hebrew_diacritizer(mut self, model: Option<Arc<dyn TextModel>>) -> Self {
        self.hebrew = model;
        self
    }

    /// Sets the Russian stress marker (russian_text_stresser's role).
    pub fn with_russian_stresser(mut self, model: Option<Arc<dyn TextModel>>) -> Self {
        self.russian = model;
        self
    }

    /// The Chinese converter.
    pub fn cangjie_converter(&self) -> &ChineseCangjieConverter {
        &self.cangjie_converter
    }

    /// The Japanese kanji reader, if set.
    pub fn kanji_reader(&self) -> Option<&dyn KanjiReader> {
        self.kanji_reader.as_deref()
    }

    /// The language's rewrite of already preprocessed text: Cangjie codes (`zh`), hiragana
    /// (`ja`), diacritics (`he`), Jamo (`ko`), stress marks (`ru`); other languages are
    /// returned unchanged.
    pub fn apply_language(&self, text: &str, language: Language) -> String {
        match language {
            Language::Chinese => self.cangjie_converter.convert(text),
            Language::Japanese => hiragana_normalize(text, self.kanji_reader.as_deref()),
            Language::Hebrew => add_hebrew_diacritics(text, self.hebrew.as_deref()),
            Language::Korean => korean_normalize(text),
            Language::Russian => add_russian_stress(text, self.russian.as_deref()),
            _ => text.to_string(),
        }
    }

    /// The string `MTLTokenizer.encode` hands to the tokenizer: [`preprocess_text`], the
    /// language's rewrite ([`MtlPreprocessor::apply_language`]), the `[lang]` prefix and
    /// `' '` → `[SPACE]`. `None` adds no language token and rewrites nothing.
    pub fn prepare(
        &self,
        txt: &str,
        language: Option<Language>,
        options: MtlEncodeOptions,
    ) -> String {
        let mut txt = preprocess_text(txt, options);
        if let Some(lang) = language {
            txt = format!("{}{}", lang.token(), self.apply_language(&txt, lang));
        }
        txt.replace(' ', SPACE)
    }
}
