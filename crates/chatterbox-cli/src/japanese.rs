//! Japanese kanji readings (`--kakasi-dict`): the multilingual model reads kanji through
//! pykakasi in the reference; here through chatterbox-kakasi, a GPL-3.0-or-later crate that
//! only a build with the `kakasi` cargo feature contains.
use anyhow::{bail, Result};
use chatterbox_text::KanjiReader;
use std::path::Path;
use std::sync::Arc;

/// Whether `text` has a kanji (CJK unified ideographs, extension A, compatibility block).
pub fn has_kanji(text: &str) -> bool {
    text.chars().any(|c| {
        matches!(c as u32, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0xF900..=0xFAFF | 0x20000..=0x2A6DF)
    })
}

/// What a user is told when Japanese kanji will be spoken without their readings.
pub fn missing_reader_warning() -> String {
    let how = if cfg!(feature = "kakasi") {
        "pass --kakasi-dict FILE"
    } else {
        "rebuild with `--features kakasi` (GPL-3.0-or-later) and pass --kakasi-dict FILE"
    };
    format!(
        "warning: the Japanese text has kanji, which are spoken without their readings (as the \
         reference does without pykakasi); for readings, {how}: the dictionary comes from \
         pykakasi, see crates/chatterbox-kakasi/README.md"
    )
}

/// Loads the kanji reader of `--kakasi-dict`.
#[cfg(feature = "kakasi")]
pub fn load_reader(path: &Path) -> Result<Arc<dyn KanjiReader>> {
    use anyhow::Context;
    let k = chatterbox_kakasi::Kakasi::from_file(path).with_context(|| {
        format!(
            "--kakasi-dict {}: cannot read the dictionary",
            path.display()
        )
    })?;
    Ok(Arc::new(k))
}

/// Without the `kakasi` feature there is no reader to load.
#[cfg(not(feature = "kakasi"))]
pub fn load_reader(path: &Path) -> Result<Arc<dyn KanjiReader>> {
    bail!(
        "--kakasi-dict {}: this chatterbox was built without Japanese kanji readings; rebuild \
         with `cargo build --release -p chatterbox-cli --features kakasi` (the kakasi port is \
         GPL-3.0-or-later)",
        path.display()
    )
}

/// `--kakasi-dict` applies to the multilingual model only.
pub fn check_applies(multilingual: bool, dict: Option<&Path>) -> Result<()> {
    if let (false, Some(p)) = (multilingual, dict) {
        bail!(
            "--kakasi-dict {}: only the multilingual model reads Japanese (--model multilingual \
             --language ja)",
            p.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kanji_are_found_and_the_advice_fits_the_build() {
        assert!(has_kanji("日本語のテキスト"));
        assert!(!has_kanji("ひらがなとカタカナ"));
        assert!(!has_kanji("Hello"));
        let w = missing_reader_warning();
        assert!(w.contains("--kakasi-dict FILE"), "{w}");
        assert_eq!(
            w.contains("--features kakasi"),
            !cfg!(feature = "kakasi"),
            "{w}"
        );
        let err = load_reader(Path::new("/nonexistent/dict.tsv")).err();
        assert!(err.is_some_and(|e| format!("{e:#}").contains("--kakasi-dict")));
        assert!(check_applies(false, Some(Path::new("d.tsv"))).is_err());
        assert!(check_applies(true, Some(Path::new("d.tsv"))).is_ok());
    }
}
