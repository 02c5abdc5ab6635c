//! Port of `MTLTokenizer` from chatterbox/models/tokenizers/tokenizer.py (upstream 5de7a54).
use crate::chinese::{CangjieTable, ChineseCangjieConverter, ChineseSegmenter, CANGJIE_FILE};
use crate::en_tokenizer::{check_padding_and_truncation, check_tokenizer_json};
use crate::error::Result;
use crate::japanese::{hiragana_normalize, KanjiReader};
use crate::korean::korean_normalize;
use crate::language::Language;
use crate::optional_models::{add_hebrew_diacritics, add_russian_stress, TextModel};
use crate::special_tokens::{
    check_vocabset_sot_eot, decode_graphemes, encode_ids, load_tokenizer, SPACE,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokenizers::Tokenizer;
use unicode_normalization::UnicodeNormalization;

/// Options of `MTLTokenizer.encode`.
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

/// The multilingual grapheme tokenizer (`grapheme_mtl_merged_expanded_v1.json`) with its
/// per-language preprocessing.
///
/// Optional parts, each skipped as in the reference when absent: the Japanese kanji reader
/// ([`MTLTokenizer::with_kanji_reader`], pykakasi's role), the Chinese word segmenter
/// ([`MTLTokenizer::with_segmenter`]), the Hebrew and Russian models. The Cangjie table is read
/// from `Cangjie5_TC.json` beside the vocabulary file.
// https://github.com/resemble-ai/chatterbox/blob/5de7a54/src/chatterbox/models/tokenizers/tokenizer.py#L249
#[derive(Clone)]
pub struct MTLTokenizer {
    tokenizer: Tokenizer,
    path: PathBuf,
    sot: u32,
    eot: u32,
    cangjie_converter: ChineseCangjieConverter,
    kanji_reader: Option<Arc<dyn KanjiReader>>,
    hebrew: Option<Arc<dyn TextModel>>,
    russian: Option<Arc<dyn TextModel>>,
}

impl std::fmt::Debug for MTLTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MTLTokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .field("cangjie_converter", &self.cangjie_converter)
            .field("kanji_reader", &self.kanji_reader.is_some())
            .field("hebrew", &self.hebrew.is_some())
            .field("russian", &self.russian.is_some())
            .finish()
    }
}

impl MTLTokenizer {
    /// File name of the vocabulary in the multilingual checkpoint directory.
    pub const VOCAB_FILE: &'static str = "grapheme_mtl_merged_expanded_v1.json";

    /// Loads the vocabulary and, when present, `Cangjie5_TC.json` from the same directory (a
    /// missing table is logged and leaves Chinese characters unconverted, as in the reference).
    pub fn from_file(vocab_file_path: impl AsRef<Path>) -> Result<Self> {
        let path = vocab_file_path.as_ref().to_path_buf();
        check_tokenizer_json(&path)?;
        let tokenizer = load_tokenizer(&path)?;
        check_padding_and_truncation(&tokenizer, &path)?;
        let (sot, eot) = check_vocabset_sot_eot(&tokenizer, &path)?;
        let cangjie_path = path
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(CANGJIE_FILE);
        let table = if cangjie_path.is_file() {
            CangjieTable::from_file(&cangjie_path)?
        } else {
            tracing::warn!(
                "Could not load Cangjie mapping: {} not found",
                cangjie_path.display()
            );
            CangjieTable::default()
        };
        Ok(Self {
            tokenizer,
            path,
            sot,
            eot,
            cangjie_converter: ChineseCangjieConverter::new(table),
            kanji_reader: None,
            hebrew: None,
            russian: None,
        })
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

    /// Replaces the Cangjie table.
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

    /// `preprocess_text`: lowercase and NFKD, each optional.
    pub fn preprocess_text(&self, raw_text: &str, options: MtlEncodeOptions) -> String {
        preprocess_text(raw_text, options)
    }

    /// Everything `encode` does before the tokenizer runs: preprocessing, the language's
    /// rewrite (zh Cangjie, ja hiragana, he diacritics, ko Jamo, ru stress), the `[lang]`
    /// prefix and `' '` → `[SPACE]`.
    pub fn prepare(
        &self,
        txt: &str,
        language: Option<Language>,
        options: MtlEncodeOptions,
    ) -> String {
        let mut txt = preprocess_text(txt, options);
        txt = match language {
            Some(Language::Chinese) => self.cangjie_converter.convert(&txt),
            Some(Language::Japanese) => hiragana_normalize(&txt, self.kanji_reader.as_deref()),
            Some(Language::Hebrew) => add_hebrew_diacritics(&txt, self.hebrew.as_deref()),
            Some(Language::Korean) => korean_normalize(&txt),
            Some(Language::Russian) => add_russian_stress(&txt, self.russian.as_deref()),
            _ => txt,
        };
        if let Some(lang) = language {
            txt = format!("{}{txt}", lang.token());
        }
        txt.replace(' ', SPACE)
    }

    /// `encode` with the default options (lowercase, NFKD). `None` adds no language token.
    pub fn encode(&self, txt: &str, language: Option<Language>) -> Result<Vec<u32>> {
        self.encode_with(txt, language, MtlEncodeOptions::default())
    }

    /// `encode` with explicit options.
    pub fn encode_with(
        &self,
        txt: &str,
        language: Option<Language>,
        options: MtlEncodeOptions,
    ) -> Result<Vec<u32>> {
        encode_ids(
            &self.tokenizer,
            &self.path,
            &self.prepare(txt, language, options),
        )
    }

    /// `decode`: ids back to text (`[SPACE]` to `' '`; `[STOP]` and `[UNK]` dropped).
    pub fn decode(&self, seq: &[u32]) -> Result<String> {
        decode_graphemes(&self.tokenizer, &self.path, seq)
    }

    /// Id of `[START]`.
    pub fn sot(&self) -> u32 {
        self.sot
    }

    /// Id of `[STOP]`.
    pub fn eot(&self) -> u32 {
        self.eot
    }

    /// Vocabulary size including added tokens (2454 for the released model).
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.tokenizer
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
