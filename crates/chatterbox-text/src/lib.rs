#![doc = include_str!("../README.md")]

mod chinese;
mod chunker;
mod en_tokenizer;
mod error;
mod frontend;
mod japanese;
mod korean;
mod language;
mod lexicon;
mod loading;
mod markup;
mod mtl_preprocessor;
mod mtl_tokenizer;
mod optional_models;
mod punc_norm;
mod pystr;
mod special_tokens;
mod turbo_tokenizer;

pub use chinese::{CangjieTable, ChineseCangjieConverter, ChineseSegmenter, CANGJIE_FILE};
pub use chunker::{Chunk, SentenceChunker, DEFAULT_ABBREVIATIONS, DEFAULT_MAX_CHARS};
pub use en_tokenizer::EnTokenizer;
pub use error::{Result, TextError};
pub use frontend::TextFrontend;
pub use japanese::{hiragana_normalize, KanjiReader, Segment};
pub use korean::korean_normalize;
pub use language::Language;
pub use lexicon::{Lexicon, MAX_LEXICON_ENTRIES, MAX_RESPELLING_CHARS};
pub use markup::{has_markup, parse_markup, MarkupSegment, MAX_PAUSE_MS, MAX_TOTAL_PAUSE_MS};
pub use mtl_preprocessor::{preprocess_text, MtlEncodeOptions, MtlPreprocessor};
pub use mtl_tokenizer::MTLTokenizer;
pub use optional_models::{add_hebrew_diacritics, add_russian_stress, TextModel};
pub use punc_norm::{punc_norm, punc_norm_checked, Variant, EMPTY_TEXT_REPLACEMENT};
pub use special_tokens::{EOT, SOT, SPACE, SPECIAL_TOKENS, UNK};
pub use turbo_tokenizer::{TurboTokenizer, TURBO_VOCAB_SIZE};
