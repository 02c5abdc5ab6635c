//! `chatterbox speak --captions FILE`: the sentence and word timings of the speech written as
//! SubRip (`.srt`), WebVTT (`.vtt`) or JSON (`.json`), chosen by the file's extension.
//!
//! SRT and WebVTT get one cue per text chunk (the pipeline's sentence groups), timed exactly;
//! JSON gets the sentences with their words, in seconds with millisecond precision: each word
//! timed from T3's alignment heads with the English and multilingual models (`"estimated":
//! false`; `speak` asks for them with `--captions`), or estimated by characters inside its
//! sentence (`"estimated": true`: Turbo and Nano, and words the alignment skipped).
use anyhow::{bail, Context, Result};
use chatterbox_pipeline::SentenceTiming;
use std::fmt::Write as _;
use std::path::Path;

/// A caption file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptionFormat {
    /// SubRip: numbered cues, `HH:MM:SS,mmm`.
    Srt,
    /// WebVTT: a `WEBVTT` header, `HH:MM:SS.mmm`.
    Vtt,
    /// The timings as JSON, words included.
    Json,
}

impl CaptionFormat {
    /// The format of `path`'s extension (`.srt`, `.vtt`, `.json`, any case); others are an
    /// error naming the three.
    pub fn of(path: &Path) -> Result<Self> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        Ok(match ext.as_deref() {
            Some("srt") => Self::Srt,
            Some("vtt") => Self::Vtt,
            Some("json") => Self::Json,
            _ => bail!(
                "--captions {}: the extension names the format: .srt, .vtt or .json",
                path.display()
            ),
        })
    }

    /// The caption file's text.
    pub fn render(self, captions: &[SentenceTiming], sample_rate: u32) -> String {
        let secs = |samples: usize| samples as f64 / f64::from(sample_rate);
        let mut out = String::new();
        match self {
            Self::Srt | Self::Vtt => {
                let sep = if self == Self::Srt { ',' } else { '.' };
                if self == Self::Vtt {
                    out.push_str("WEBVTT\n\n");
                }
                for (i, c) in captions.iter().enumerate() {
                    if self == Self::Srt {
                        let _ = writeln!(out, "{}", i + 1);
                    }
                    let _ = writeln!(
                        out,
                        "{} --> {}\n{}\n",
                        clock(secs(c.start_sample), sep),
                        clock(secs(c.end_sample), sep),
                        cue_text(&c.text, self == Self::Vtt)
                    );
                }
            }
            Self::Json => {
                let _ = write!(out, "{{\"sample_rate\": {sample_rate}, \"sentences\": [");
                for (i, c) in captions.iter().enumerate() {
                    let _ = write!(
                        out,
                        "{}\n  {{\"text\": {}, \"start\": {:.3}, \"end\": {:.3}, \"words\": [",
                        if i == 0 { "" } else { "," },
                        json_string(c.text.trim()),
                        secs(c.start_sample),
                        secs(c.end_sample)
                    );
                    for (k, w) in c.words.iter().enumerate() {
                        let _ = write!(
                            out,
                            "{}\n    {{\"word\": {}, \"start\": {:.3}, \"end\": {:.3}, \"estimated\": {}}}",
                            if k == 0 { "" } else { "," },
                            json_string(&w.text),
                            w.start_secs(),
                            w.end_secs(),
                            w.estimated
                        );
                    }
                    out.push_str("]}");
                }
                out.push_str("\n]}\n");
            }
        }
        out
    }
}

/// Writes `captions` to `path` in the format of its extension.
pub fn write(path: &Path, captions: &[SentenceTiming], sample_rate: u32) -> Result<()> {
    let text = CaptionFormat::of(path)?.render(captions, sample_rate);
    std::fs::write(path, text)
        .with_context(|| format!("cannot write the captions to {}", path.display()))
}

/// `HH:MM:SS<sep>mmm`, rounded to the millisecond.
fn clock(secs: f64, sep: char) -> String {
    let ms = (secs * 1000.0).round().max(0.0) as u64;
    format!(
        "{:02}:{:02}:{:02}{sep}{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// A cue's text on one line: whitespace runs become one space; no blank line can end the cue
/// early, and WebVTT's `-->`, `<` and `&` are escaped.
fn cue_text(text: &str, vtt: bool) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if vtt {
        line.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    } else {
        line
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_extension() {
        assert_eq!(
            CaptionFormat::of(Path::new("a.SRT")).ok(),
            Some(CaptionFormat::Srt)
        );
        assert_eq!(
            CaptionFormat::of(Path::new("a.vtt")).ok(),
            Some(CaptionFormat::Vtt)
        );
        assert_eq!(
            CaptionFormat::of(Path::new("a.json")).ok(),
            Some(CaptionFormat::Json)
        );
        assert!(CaptionFormat::of(Path::new("a.txt")).is_err());
        assert!(CaptionFormat::of(Path::new("captions")).is_err());
    }

    #[test]
    fn clocks_and_escapes() {
        assert_eq!(clock(3725.0125, ','), "01:02:05,013");
        assert_eq!(clock(0.0, '.'), "00:00:00.000");
        assert_eq!(cue_text("a  <b>\n&", true), "a &lt;b&gt; &amp;");
        assert_eq!(json_string("a\"\\\n\u{1}é"), "\"a\\\"\\\\\\n\\u0001é\"");
    }
}
