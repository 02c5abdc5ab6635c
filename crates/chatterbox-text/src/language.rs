//! The 23 languages of the multilingual model: `SUPPORTED_LANGUAGES` of chatterbox/mtl_tts.py
//! (upstream 5de7a54).
use crate::error::{Result, TextError};
use std::fmt;
use std::str::FromStr;

macro_rules! languages {
    ($($variant:ident => $id:literal, $name:literal;)*) => {
        /// A language of the multilingual model.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Language {
            $(
                #[doc = $name]
                $variant,
            )*
        }

        impl Language {
            /// All supported languages, in the reference's order (alphabetical by id).
            pub const ALL: &'static [Language] = &[$(Language::$variant),*];

            /// The lowercase ISO 639-1 id (`"en"`), as in the `[en]` token.
            pub fn id(self) -> &'static str {
                match self { $(Language::$variant => $id),* }
            }

            /// The English name (`"English"`).
            pub fn name(self) -> &'static str {
                match self { $(Language::$variant => $name),* }
            }

            fn from_lower(id: &str) -> Option<Self> {
                match id { $($id => Some(Language::$variant),)* _ => None }
            }
        }

        const SUPPORTED: &str = concat!($($id, ", "),*);
    };
}

languages! {
    Arabic => "ar", "Arabic";
    Danish => "da", "Danish";
    German => "de", "German";
    Greek => "el", "Greek";
    English => "en", "English";
    Spanish => "es", "Spanish";
    Finnish => "fi", "Finnish";
    French => "fr", "French";
    Hebrew => "he", "Hebrew";
    Hindi => "hi", "Hindi";
    Italian => "it", "Italian";
    Japanese => "ja", "Japanese";
    Korean => "ko", "Korean";
    Malay => "ms", "Malay";
    Dutch => "nl", "Dutch";
    Norwegian => "no", "Norwegian";
    Polish => "pl", "Polish";
    Portuguese => "pt", "Portuguese";
    Russian => "ru", "Russian";
    Swedish => "sv", "Swedish";
    Swahili => "sw", "Swahili";
    Turkish => "tr", "Turkish";
    Chinese => "zh", "Chinese";
}

impl Language {
    /// Parses an id case-insensitively, as `generate` does (`language_id.lower()`).
    pub fn parse(id: &str) -> Result<Self> {
        Self::from_lower(&id.to_lowercase()).ok_or_else(|| TextError::UnknownLanguage {
            language: id.to_string(),
            supported: SUPPORTED.trim_end_matches(", "),
        })
    }

    /// The language token prepended to the text (`"[en]"`).
    pub fn token(self) -> String {
        format!("[{}]", self.id())
    }
}

impl FromStr for Language {
    type Err = TextError;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_is_case_insensitive_and_rejects_unknown_ids() {
        assert_eq!(Language::ALL.len(), 23);
        assert_eq!(Language::parse("ZH").ok(), Some(Language::Chinese));
        assert_eq!(
            Language::parse("ja").ok().map(Language::token).as_deref(),
            Some("[ja]")
        );
        match Language::parse("xx") {
            Err(TextError::UnknownLanguage {
                language,
                supported,
            }) => {
                assert_eq!(language, "xx");
                assert!(supported.starts_with("ar, da,") && supported.ends_with("tr, zh"));
            }
            other => panic!("expected UnknownLanguage, got {other:?}"),
        }
        assert!(Language::parse("").is_err());
        for l in Language::ALL {
            assert_eq!(Language::parse(l.id()).ok(), Some(*l));
        }
    }
}
