//! Where the text comes from: the argument, `--file`, or standard input.
use anyhow::{bail, Context, Result};
use std::io::{IsTerminal, Read};
use std::path::Path;

/// Decodes an audio file (WAV, FLAC, MP3, Ogg/Vorbis) to mono; `what` names it in errors.
pub fn load_audio(path: &Path, what: &str) -> Result<chatterbox_dsp::Audio> {
    if !path.is_file() {
        bail!("the {what} {} does not exist", path.display());
    }
    chatterbox_dsp::audio::load(path)
        .with_context(|| format!("cannot read the {what} {}", path.display()))
}

/// The text to speak: `--file`, else the argument, else (argument `-` or absent) stdin.
/// Empty or whitespace-only text is an error.
pub fn read_text(arg: Option<&str>, file: Option<&Path>) -> Result<String> {
    let text = match (file, arg) {
        (Some(path), _) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the text file {}", path.display()))?,
        (None, Some(t)) if t != "-" => t.to_string(),
        (None, _) => {
            let mut stdin = std::io::stdin();
            if stdin.is_terminal() {
                bail!(
                    "no text given: pass it as an argument (chatterbox speak \"Hello.\" -o \
                     hello.wav), with --file FILE, or pipe it in"
                );
            }
            let mut s = String::new();
            stdin
                .read_to_string(&mut s)
                .context("cannot read the text from standard input (is it UTF-8?)")?;
            s
        }
    };
    if text.trim().is_empty() {
        bail!("the text to speak is empty");
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_is_used_and_empty_text_is_refused() -> Result<()> {
        assert_eq!(read_text(Some("Hi."), None)?, "Hi.");
        assert!(read_text(Some("  \n"), None).is_err());
        let dir = tempfile::tempdir()?;
        let f = dir.path().join("t.txt");
        std::fs::write(&f, "From a file.")?;
        assert_eq!(read_text(None, Some(&f))?, "From a file.");
        let err = read_text(None, Some(&dir.path().join("missing.txt")))
            .err()
            .context("no error")?;
        assert!(format!("{err:#}").contains("missing.txt"));
        Ok(())
    }
}
