//! Port of `MTLTokenizer` from chatterbox/models/tokenizers/tokenizer.py (upstream 5de7a54).
use crate::chinese::{CangjieTable, ChineseCangjieConverter, ChineseSegmenter, CANGJIE_FILE};
use crate::error::Result;
use crate::japanese::KanjiReader;
use crate::language::Language;
use crate::loading::{checked_tokenizer, in_memory, tokenizer_from_bytes, tokenizer_from_file};
use crate::mtl_preprocessor::{preprocess_text, MtlEncodeOptions, MtlPreprocessor};
use crate::optional_models::TextModel;
use crate::special_tokens::{check_vocabset_sot_eot, decode_graphemes, encode_ids};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokenizers::Tokenizer;

/// The multilingual grapheme tokenizer (`grapheme_mtl_merged_expanded_v1.json`) with its
/// per-language preprocessing ([`MtlPreprocessor`]).
///
/// Optional parts, each skipped as in the reference when absent: the Japanese kanji reader
/// ([`MTLTokenizer::with_kanji_reader`], pykakasi's role), the Chinese word segmenter
/// ([`MTLTokenizer::with_segmenter`]), the Hebrew and Russian models. [`MTLTokenizer::from_file`]
/// reads the Cangjie table from `Cangjie5_TC.json` beside the vocabulary file; the in-memory
/// constructors start without one ([`MTLTokenizer::with_cangjie_table`] sets it).
// https://github.com/resemble-ai/chatterbox/blob/5de7a54/src/chatterbox/models/tokenizers/tokenizer.py#L249
#[derive(Clone)]
pub struct MTLTokenizer {
    tokenizer: Tokenizer,
    path: PathBuf,
    sot: u32,
    eot: u32,
    preprocessor: MtlPreprocessor,
}

impl std::fmt::Debug for MTLTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MTLTokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .field("preprocessor", &self.preprocessor)
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
        let tokenizer = tokenizer_from_file(&path)?;
        let this = Self::build(tokenizer, path)?;
        let cangjie_path = this
            .path
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
        Ok(this.with_cangjie_table(table))
    }

    /// Builds the tokenizer from the content of a vocabulary file (`tokenizer.json` format),
    /// with the same checks as [`MTLTokenizer::from_file`] and no Cangjie table.
    pub fn from_json(json: &str) -> Result<Self> {
        Self::from_bytes(json.as_bytes())
    }

    /// [`MTLTokenizer::from_json`] over raw bytes (an embedded or downloaded file).
    pub fn from_bytes(json: &[u8]) -> Result<Self> {
        let path = in_memory();
        Self::build(tokenizer_from_bytes(json, &path)?, path)
    }

    /// Wraps a `tokenizers` tokenizer (it must have `[START]` and `[STOP]`); no Cangjie table.
    pub fn from_tokenizer(tokenizer: Tokenizer) -> Result<Self> {
        Self::build(checked_tokenizer(tokenizer)?, in_memory())
    }

    fn build(tokenizer: Tokenizer, path: PathBuf) -> Result<Self> {
        let (sot, eot) = check_vocabset_sot_eot(&tokenizer, &path)?;
        Ok(Self {
            tokenizer,
            path,
            sot,
            eot,
            preprocessor: MtlPreprocessor::new(),
        })
    }

    /// Sets the Japanese kanji → hiragana reader (pykakasi's role; the GPL-3.0-or-later crate
    /// `chatterbox-kakasi` provides one). `None`: Japanese text is left as it is, as in the
    /// reference without pykakasi.
    pub fn with_kanji_reader(mut self, reader: Option<Arc<dyn KanjiReader>>) -> Self {
        self.preprocessor = self.preprocessor.with_kanji_reader(reader);
        self
    }

    /// Sets the Chinese word segmenter (spacy-pkuseg's role).
    pub fn with_segmenter(mut self, segmenter: Option<Arc<dyn ChineseSegmenter>>) -> Self {
        self.preprocessor = self.preprocessor.with_segmenter(segmenter);
        self
    }

    /// Replaces the Cangjie table.
    pub fn with_cangjie_table(mut self, table: CangjieTable) -> Self {
        self.preprocessor = self.preprocessor.with_cangjie_table(table);
        self
    }

    /// Sets the Hebrew diacritizer (dicta_onnx's role).
    pub fn with_hebrew_diacritizer(mut self, model: Option<Arc<dyn TextModel>>) -> Self {
        self.preprocessor = self.preprocessor.with_hebrew_diacritizer(model);
        self
    }

    /// Sets the Russian stress marker (russian_text_stresser's role).
    pub fn with_russian_stresser(mut self, model: Option<Arc<dyn TextModel>>) -> Self {
        self.preprocessor = self.preprocessor.with_russian_stresser(model);
        self
    }

    /// Replaces the whole preprocessing (table, segmenter, reader, models).
    pub fn with_preprocessor(mut self, preprocessor: MtlPreprocessor) -> Self {
        self.preprocessor = preprocessor;
        self
    }

    /// The preprocessing run before the tokenizer.
    pub fn preprocessor(&self) -> &MtlPreprocessor {
        &self.preprocessor
    }

    /// The Chinese converter.
    pub fn cangjie_converter(&self) -> &ChineseCangjieConverter {
        self.preprocessor.cangjie_converter()
    }

    /// The Japanese kanji reader, if set.
    pub fn kanji_reader(&self) -> Option<&dyn KanjiReader> {
        self.preprocessor.kanji_reader()
    }

    /// `preprocess_text`: lowercase and NFKD, each optional.
    pub fn preprocess_text(&self, raw_text: &str, options: MtlEncodeOptions) -> String {
        preprocess_text(raw_text, options)
    }

    /// Everything `encode` does before the tokenizer runs: preprocessing, the language's
    /// rewrite (zh Cangjie, ja hiragana, he diacritics, ko Jamo, ru stress), the `[lang]`
    /// prefix and `' '` → `[SPACE]` ([`MtlPreprocessor::prepare`], which needs no vocabulary).
    pub fn prepare(
        &self,
        txt: &str,
        language: Option<Language>,
        options: MtlEncodeOptions,
    ) -> String {
        self.preprocessor.prepare(txt, language, options)
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
