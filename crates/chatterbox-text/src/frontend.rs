//! The text steps of `generate` in chatterbox/tts.py, mtl_tts.py and tts_turbo.py (upstream
//! 5de7a54): `punc_norm`, then the variant's tokenizer.
use crate::en_tokenizer::EnTokenizer;
use crate::error::Result;
use crate::japanese::KanjiReader;
use crate::language::Language;
use crate::mtl_preprocessor::MtlEncodeOptions;
use crate::mtl_tokenizer::MTLTokenizer;
use crate::punc_norm::{punc_norm_checked, Variant};
use crate::turbo_tokenizer::TurboTokenizer;
use std::path::Path;
use std::sync::Arc;

/// The text front end of one model variant.
#[derive(Debug, Clone)]
pub enum TextFrontend {
    /// `ChatterboxTTS`: `tokenizer.json`.
    English(EnTokenizer),
    /// `ChatterboxMultilingualTTS`: `grapheme_mtl_merged_expanded_v1.json` (+ `Cangjie5_TC.json`).
    Multilingual(MTLTokenizer),
    /// `ChatterboxTurboTTS` / Nano: the GPT-2 tokenizer files.
    Turbo(TurboTokenizer),
}

impl TextFrontend {
    /// Loads the variant's tokenizer from a checkpoint directory.
    pub fn from_checkpoint_dir(dir: impl AsRef<Path>, variant: Variant) -> Result<Self> {
        let dir = dir.as_ref();
        Ok(match variant {
            Variant::English => Self::English(EnTokenizer::from_file(dir.join("tokenizer.json"))?),
            Variant::Multilingual => {
                Self::Multilingual(MTLTokenizer::from_file(dir.join(MTLTokenizer::VOCAB_FILE))?)
            }
            Variant::Turbo => Self::Turbo(TurboTokenizer::from_dir(dir)?),
        })
    }

    /// Which variant this is.
    pub fn variant(&self) -> Variant {
        match self {
            Self::English(_) => Variant::English,
            Self::Multilingual(_) => Variant::Multilingual,
            Self::Turbo(_) => Variant::Turbo,
        }
    }

    /// `punc_norm` of the variant; [`TextError::EmptyText`](crate::TextError::EmptyText) for
    /// empty or whitespace-only text.
    pub fn normalize(&self, text: &str) -> Result<String> {
        punc_norm_checked(text, self.variant())
    }

    /// The exact string the tokenizer receives for `text`: `punc_norm`, then the tokenizer's own
    /// rewrite ([`EnTokenizer::prepare`], [`MTLTokenizer::prepare`] with the default options;
    /// Turbo tokenizes the normalised text as it is).
    /// [`text_tokens`](TextFrontend::text_tokens) encodes this string.
    pub fn prepare(&self, text: &str, language: Option<Language>) -> Result<String> {
        let text = self.normalize(text)?;
        Ok(match self {
            Self::English(_) => EnTokenizer::prepare(&text),
            Self::Multilingual(t) => t.prepare(&text, language, MtlEncodeOptions::default()),
            Self::Turbo(_) => text,
        })
    }

    /// Text token ids as `generate` computes them before T3: `punc_norm`, then the tokenizer
    /// (with the language token for the multilingual model; `language` is ignored by the
    /// others). The English and multilingual T3 then add `[START]` and `[STOP]` around them
    /// (see [`TextFrontend::sot_eot`]); Turbo uses them as they are.
    pub fn text_tokens(&self, text: &str, language: Option<Language>) -> Result<Vec<u32>> {
        let text = self.normalize(text)?;
        match self {
            Self::English(t) => t.encode(&text),
            Self::Multilingual(t) => t.encode(&text, language),
            Self::Turbo(t) => t.encode(&text),
        }
    }

    /// Sets the multilingual tokenizer's Japanese kanji reader (pykakasi's role; the
    /// GPL-3.0-or-later crate `chatterbox-kakasi` provides one). Returns `false`, changing
    /// nothing, for the English and Turbo front ends, which never read Japanese.
    pub fn set_kanji_reader(&mut self, reader: Option<Arc<dyn KanjiReader>>) -> bool {
        match self {
            Self::Multilingual(t) => {
                *t = t.clone().with_kanji_reader(reader);
                true
            }
            Self::English(_) | Self::Turbo(_) => false,
        }
    }

    /// Ids of `[START]` and `[STOP]` for the grapheme tokenizers (`None` for Turbo).
    pub fn sot_eot(&self) -> Option<(u32, u32)> {
        match self {
            Self::English(t) => Some((t.sot(), t.eot())),
            Self::Multilingual(t) => Some((t.sot(), t.eot())),
            Self::Turbo(_) => None,
        }
    }
}
