//! The optional Hebrew and Russian models of chatterbox/models/tokenizers/tokenizer.py
//! (upstream 5de7a54): `add_hebrew_diacritics` (dicta_onnx) and `add_russian_stress`
//! (russian_text_stresser). The reference skips them, with a warning, when the package is not
//! installed or when the model fails; so do these hooks when no model is given or it fails.

/// A text-to-text model plugged into the multilingual preprocessing (a Hebrew diacritizer, a
/// Russian stress marker).
pub trait TextModel: Send + Sync {
    /// Rewrites `text`; an error makes the caller keep the input (and log a warning).
    fn process(&self, text: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>>;
}

fn apply(text: &str, model: Option<&dyn TextModel>, what: &str) -> String {
    match model {
        None => {
            tracing::warn!("no {what} model - {what} skipped");
            text.to_string()
        }
        Some(m) => match m.process(text) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("{what} failed: {e}");
                text.to_string()
            }
        },
    }
}

/// `add_hebrew_diacritics`: the model's output, or `text` unchanged without a model or when it
/// fails.
pub fn add_hebrew_diacritics(text: &str, model: Option<&dyn TextModel>) -> String {
    apply(text, model, "Hebrew diacritization")
}

/// `add_russian_stress`: the model's output, or `text` unchanged without a model or when it
/// fails.
pub fn add_russian_stress(text: &str, model: Option<&dyn TextModel>) -> String {
    apply(text, model, "Russian stress labeling")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Upper;
    impl TextModel for Upper {
        fn process(&self, text: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
            Ok(text.to_uppercase())
        }
    }
    struct Failing;
    impl TextModel for Failing {
        fn process(&self, _: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
            Err("model crashed".into())
        }
    }

    #[test]
    fn skip_when_absent_or_failing() {
        assert_eq!(add_hebrew_diacritics("שלום", None), "שלום");
        assert_eq!(add_russian_stress("мама", Some(&Upper)), "МАМА");
        assert_eq!(add_russian_stress("мама", Some(&Failing)), "мама");
    }
}
