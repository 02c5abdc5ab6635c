//! Pauses and a small SSML subset in the text to speak (issue 44; the reference has no
//! markup). [`parse_markup`] turns a text into [`MarkupSegment`]s: pieces of text to speak and
//! pauses to put between them. The pipeline speaks each text segment as it speaks a plain
//! text (sentence chunks joined with a crossfade) and inserts exact silence for each pause.
//!
//! Two forms are understood:
//!
//! * **Pause tags** anywhere in a text: `[pause 500ms]`, `[pause 1.5s]` (case-insensitive
//!   `pause`, a decimal number, `ms` or `s`). Only a `[` followed by `pause` and whitespace or
//!   `]` is markup: every other bracket, Turbo's paralinguistic tags (`[laugh]`,
//!   `[clear throat]`, ...) among them, stays in the text as before. A malformed pause tag
//!   (`[pause]`, `[pause soon]`, no closing `]`) is an error, not text.
//! * **SSML**, when the text starts (after whitespace and an optional `<?xml ...?>`
//!   declaration) with `<speak`: `<speak>` as the root, `<break time="500ms"/>` (or
//!   `strength="none|x-weak|weak|medium|strong|x-strong"`: 0, 100, 250, 400, 750 and
//!   1200 ms; medium without attributes), `<p>` and `<s>` (each starts a new text segment: no
//!   pause of its own, but a sentence never runs across them), `<sub alias="...">` (the alias
//!   is spoken in place of the element's text), the five XML entities and numeric character
//!   references. Pause tags work inside SSML text too. Any other element (`<prosody>`,
//!   `<emphasis>`, `<say-as>`, ...) is **refused** with an error naming it and the supported
//!   ones: speaking the tag as text or dropping it silently would both surprise. Unknown
//!   attributes are ignored (`xml:lang`, `version`, `xmlns` on `<speak>` among them).
//!
//! Bounds, so that a request cannot ask for hours of silence: one pause is at most
//! [`MAX_PAUSE_MS`] (60 s) and the pauses of one text add up to at most
//! [`MAX_TOTAL_PAUSE_MS`] (10 min); beyond them the text is refused. The parser runs in one
//! pass over the text, with no recursion, so any input ends quickly.
use crate::error::{Result, TextError};

/// The longest single pause, in milliseconds (60 s).
pub const MAX_PAUSE_MS: u32 = 60_000;
/// The longest sum of the pauses of one text, in milliseconds (10 minutes).
pub const MAX_TOTAL_PAUSE_MS: u64 = 600_000;

/// A piece of a text with markup: text to speak, or silence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkupSegment {
    /// Text to speak as given (never whitespace only; the tags around it removed, SSML
    /// entities decoded, `<sub>` replaced by its alias).
    Text(String),
    /// Silence of this many milliseconds (more than 0; consecutive pauses are summed).
    Pause {
        /// Its length in milliseconds.
        ms: u32,
    },
}

/// Splits `text` into segments of text and pauses (see the module's documentation for the
/// syntax). A text without markup gives one [`MarkupSegment::Text`] equal to it (none when
/// it is empty or whitespace).
pub fn parse_markup(text: &str) -> Result<Vec<MarkupSegment>> {
    let mut out = Segments::default();
    match ssml_body(text) {
        Some(start) => parse_ssml(text, start, &mut out)?,
        None => parse_pauses(text, 0, &mut out)?,
    }
    out.flush();
    Ok(out.segments)
}

/// Whether `text` holds markup [`parse_markup`] would act on (a pause tag or an SSML root).
/// A quick check: it does not validate the markup.
pub fn has_markup(text: &str) -> bool {
    ssml_body(text).is_some() || find_pause_tag(text, 0).is_some()
}

/// The byte offset of the `<speak` that starts an SSML document, if `text` is one.
fn ssml_body(text: &str) -> Option<usize> {
    let mut rest = text.trim_start();
    if rest.starts_with("<?xml") {
        let end = rest.find("?>")?;
        rest = rest[end + 2..].trim_start();
    }
    let tail = rest.strip_prefix("<speak")?;
    if tail.starts_with(|c: char| c == '>' || c == '/' || c.is_whitespace()) {
        Some(text.len() - rest.len())
    } else {
        None
    }
}

/// The segments built so far, with the text not yet closed by a pause or a boundary.
#[derive(Default)]
struct Segments {
    segments: Vec<MarkupSegment>,
    text: String,
    total_pause_ms: u64,
}

impl Segments {
    /// Closes the current text segment (dropped when whitespace only).
    fn flush(&mut self) {
        let text = std::mem::take(&mut self.text);
        if !text.trim().is_empty() {
            self.segments.push(MarkupSegment::Text(text));
        }
    }

    fn pause(&mut self, ms: u32, offset: usize) -> Result<()> {
        self.total_pause_ms += u64::from(ms);
        if self.total_pause_ms > MAX_TOTAL_PAUSE_MS {
            return Err(markup_error(
                offset,
                format!(
                    "the pauses add up to more than {} s, the most one text may hold",
                    MAX_TOTAL_PAUSE_MS / 1000
                ),
            ));
        }
        if ms == 0 {
            return Ok(());
        }
        self.flush();
        if let Some(MarkupSegment::Pause { ms: last }) = self.segments.last_mut() {
            // within the bound checked above, so no overflow
            *last = last.saturating_add(ms);
        } else {
            self.segments.push(MarkupSegment::Pause { ms });
        }
        Ok(())
    }
}

fn markup_error(offset: usize, message: impl Into<String>) -> TextError {
    TextError::Markup {
        offset,
        message: message.into(),
    }
}

/// The byte offset of the next `[pause` tag at or after `from` (`[pause` then whitespace or
/// `]`, `pause` in any case).
fn find_pause_tag(text: &str, from: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = from;
    while let Some(k) = text.get(i..).and_then(|t| t.find('[')) {
        let at = i + k;
        let word = bytes.get(at + 1..at + 6);
        let next = bytes.get(at + 6).copied();
        if word.is_some_and(|w| w.eq_ignore_ascii_case(b"pause"))
            && next.is_some_and(|c| c == b']' || c.is_ascii_whitespace())
        {
            return Some(at);
        }
        i = at + 1;
    }
    None
}

/// Text with pause tags (`text` from byte `base` of the whole input, for error offsets).
fn parse_pauses(text: &str, base: usize, out: &mut Segments) -> Result<()> {
    let mut pos = 0;
    while let Some(at) = find_pause_tag(text, pos) {
        out.text.push_str(&text[pos..at]);
        let body_start = at + "[pause".len();
        let close = text[body_start..]
            .find(']')
            .filter(|&k| k <= 40)
            .ok_or_else(|| markup_error(base + at, "a [pause tag without its closing ]"))?;
        let body = text[body_start..body_start + close].trim();
        if body.is_empty() {
            return Err(markup_error(
                base + at,
                "[pause] needs a duration: [pause 500ms] or [pause 1.5s]",
            ));
        }
        let ms = parse_duration(body).map_err(|m| markup_error(base + at, m))?;
        out.pause(ms, base + at)?;
        pos = body_start + close + 1;
    }
    out.text.push_str(&text[pos..]);
    Ok(())
}

/// `500ms`, `1.5s`, `2 s`: milliseconds, rounded, at most [`MAX_PAUSE_MS`].
fn parse_duration(s: &str) -> std::result::Result<u32, String> {
    let s = s.trim();
    let lower = s.to_ascii_lowercase();
    let (number, scale) = if let Some(n) = lower.strip_suffix("ms") {
        (n.trim_end(), 1.0)
    } else if let Some(n) = lower.strip_suffix('s') {
        (n.trim_end(), 1000.0)
    } else {
        return Err(format!(
            "{s:?} is not a duration: give a number with ms or s (500ms, 1.5s)"
        ));
    };
    let plain = !number.is_empty()
        && number.len() <= 12
        && number.chars().all(|c| c.is_ascii_digit() || c == '.')
        && number.chars().filter(|&c| c == '.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit());
    let value: f64 = if plain {
        number
            .parse()
            .map_err(|_| format!("{s:?} is not a duration"))?
    } else {
        return Err(format!(
            "{s:?} is not a duration: give a number with ms or s (500ms, 1.5s)"
        ));
    };
    let ms = (value * scale).round();
    if ms > f64::from(MAX_PAUSE_MS) {
        return Err(format!(
            "a pause of {s} is longer than {} s, the longest allowed",
            MAX_PAUSE_MS / 1000
        ));
    }
    // in 0..=MAX_PAUSE_MS here, so the cast is exact
    Ok(ms as u32)
}

/// The SSML elements understood.
const SSML_ELEMENTS: &str = "<speak>, <break>, <p>, <s>, <sub>";

/// An open SSML element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Speak,
    P,
    S,
    /// `<sub>`: its text is dropped for the alias, already spoken.
    Sub,
    /// `<break>` written as an element with a closing tag.
    Break,
}

impl Open {
    fn name(self) -> &'static str {
        match self {
            Open::Speak => "speak",
            Open::P => "p",
            Open::S => "s",
            Open::Sub => "sub",
            Open::Break => "break",
        }
    }
}

/// An SSML document starting at byte `start` of `text` (its `<speak`).
fn parse_ssml(text: &str, start: usize, out: &mut Segments) -> Result<()> {
    let mut stack: Vec<Open> = Vec::new();
    let mut pos = start;
    let mut closed_root = false;
    while pos < text.len() {
        let rest = &text[pos..];
        let Some(lt) = rest.find('<') else {
            ssml_text(text, pos, text.len(), &stack, closed_root, out)?;
            break;
        };
        if lt > 0 {
            ssml_text(text, pos, pos + lt, &stack, closed_root, out)?;
        }
        let tag_at = pos + lt;
        let end = text[tag_at..]
            .find('>')
            .map(|k| tag_at + k)
            .ok_or_else(|| markup_error(tag_at, "an SSML tag without its closing >"))?;
        let inner = &text[tag_at + 1..end];
        pos = end + 1;
        if closed_root {
            return Err(markup_error(tag_at, "markup after </speak>"));
        }
        if inner.starts_with("!--") || inner.starts_with('!') || inner.starts_with('?') {
            return Err(markup_error(
                tag_at,
                "comments, declarations and processing instructions are not supported inside <speak>",
            ));
        }
        if let Some(name) = inner.strip_prefix('/') {
            let name = name.trim();
            let Some(open) = stack.pop() else {
                return Err(markup_error(tag_at, format!("</{name}> closes nothing")));
            };
            if open.name() != name {
                return Err(markup_error(
                    tag_at,
                    format!("</{name}> where </{}> was expected", open.name()),
                ));
            }
            match open {
                Open::Speak => closed_root = true,
                Open::P | Open::S => out.flush(),
                Open::Sub | Open::Break => {}
            }
            continue;
        }
        let self_closing = inner.ends_with('/');
        let inner = inner.strip_suffix('/').unwrap_or(inner);
        let name_end = inner
            .find(|c: char| c.is_whitespace())
            .unwrap_or(inner.len());
        let (name, attrs) = inner.split_at(name_end);
        let attrs = parse_attributes(attrs).map_err(|m| markup_error(tag_at, m))?;
        let attr = |key: &str| {
            attrs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let open = match name {
            "speak" => {
                if !stack.is_empty() {
                    return Err(markup_error(tag_at, "<speak> inside <speak>"));
                }
                Open::Speak
            }
            _ if stack.is_empty() => {
                return Err(markup_error(tag_at, format!("<{name}> outside <speak>")));
            }
            "break" => {
                let ms = match (attr("time"), attr("strength")) {
                    (Some(t), _) => parse_duration(t).map_err(|m| markup_error(tag_at, m))?,
                    (None, Some(s)) => strength_ms(s).ok_or_else(|| {
                        markup_error(
                            tag_at,
                            format!(
                                "break strength {s:?}: expected none, x-weak, weak, medium, strong or x-strong"
                            ),
                        )
                    })?,
                    (None, None) => 400,
                };
                out.pause(ms, tag_at)?;
                Open::Break
            }
            "p" | "s" => {
                let open = if name == "p" { Open::P } else { Open::S };
                if stack.contains(&open) || (open == Open::P && stack.contains(&Open::S)) {
                    return Err(markup_error(
                        tag_at,
                        format!(
                            "<{name}> inside <{}>",
                            stack.last().map_or("", |o| o.name())
                        ),
                    ));
                }
                if stack.contains(&Open::Sub) {
                    return Err(markup_error(tag_at, format!("<{name}> inside <sub>")));
                }
                out.flush();
                open
            }
            "sub" => {
                if stack.contains(&Open::Sub) {
                    return Err(markup_error(tag_at, "<sub> inside <sub>"));
                }
                let alias = attr("alias").ok_or_else(|| {
                    markup_error(
                        tag_at,
                        "<sub> needs an alias attribute: <sub alias=\"...\">",
                    )
                })?;
                out.text
                    .push_str(&decode_entities(alias).map_err(|m| markup_error(tag_at, m))?);
                Open::Sub
            }
            other => {
                return Err(markup_error(
                    tag_at,
                    format!(
                        "the SSML element <{other}> is not supported; supported: {SSML_ELEMENTS}"
                    ),
                ));
            }
        };
        if !self_closing {
            if stack.last() == Some(&Open::Break) {
                return Err(markup_error(tag_at, "<break> holds no content"));
            }
            stack.push(open);
        } else if open == Open::Speak {
            closed_root = true;
        }
    }
    if let Some(open) = stack.last() {
        return Err(markup_error(
            text.len(),
            format!("<{}> is never closed", open.name()),
        ));
    }
    Ok(())
}

/// The character data from `from` to `to` inside the elements `stack`.
fn ssml_text(
    text: &str,
    from: usize,
    to: usize,
    stack: &[Open],
    closed_root: bool,
    out: &mut Segments,
) -> Result<()> {
    let raw = &text[from..to];
    if closed_root || stack.is_empty() {
        if raw.trim().is_empty() {
            return Ok(());
        }
        return Err(markup_error(from, "text outside <speak>"));
    }
    match stack.last() {
        // the alias is spoken instead
        Some(Open::Sub) => Ok(()),
        Some(Open::Break) if !raw.trim().is_empty() => {
            Err(markup_error(from, "<break> holds no content"))
        }
        _ => {
            let decoded = decode_entities(raw).map_err(|m| markup_error(from, m))?;
            parse_pauses(&decoded, from, out)
        }
    }
}

/// `name="value"` pairs (single or double quotes).
fn parse_attributes(s: &str) -> std::result::Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| format!("attribute {rest:?} has no value"))?;
        let key = rest[..eq].trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(format!("malformed attribute near {rest:?}"));
        }
        let value_part = rest[eq + 1..].trim_start();
        let quote = value_part
            .chars()
            .next()
            .filter(|&c| c == '"' || c == '\'')
            .ok_or_else(|| format!("the value of {key} must be quoted"))?;
        let body = &value_part[1..];
        let close = body
            .find(quote)
            .ok_or_else(|| format!("the value of {key} has no closing quote"))?;
        out.push((key.to_string(), body[..close].to_string()));
        rest = body[close + 1..].trim_start();
    }
    Ok(out)
}

/// `<break strength=...>` in milliseconds.
fn strength_ms(s: &str) -> Option<u32> {
    Some(match s {
        "none" => 0,
        "x-weak" => 100,
        "weak" => 250,
        "medium" => 400,
        "strong" => 750,
        "x-strong" => 1200,
        _ => return None,
    })
}

/// XML's five entities and numeric character references.
fn decode_entities(s: &str) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let semi = after
            .find(';')
            .filter(|&k| k <= 10)
            .ok_or_else(|| "a & that starts no entity: write &amp;".to_string())?;
        let name = &after[..semi];
        let c = match name {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = name.strip_prefix("#x").or(name.strip_prefix("#X")) {
                    u32::from_str_radix(hex, 16).ok()
                } else if let Some(dec) = name.strip_prefix('#') {
                    dec.parse().ok()
                } else {
                    None
                };
                code.and_then(char::from_u32)
                    .ok_or_else(|| format!("unknown entity &{name};"))?
            }
        };
        out.push(c);
        rest = &after[semi + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> MarkupSegment {
        MarkupSegment::Text(s.to_string())
    }

    fn pause(ms: u32) -> MarkupSegment {
        MarkupSegment::Pause { ms }
    }

    #[test]
    fn plain_text_is_one_segment() {
        assert_eq!(
            parse_markup("Hello there.").ok(),
            Some(vec![text("Hello there.")])
        );
        assert_eq!(parse_markup("  ").ok(), Some(vec![]));
        assert!(!has_markup("Hello [laugh] there."));
    }

    #[test]
    fn pause_tags_split_the_text() {
        let got = parse_markup("One. [pause 500ms] Two. [PAUSE 1.5s][pause 2 s] Three.").ok();
        assert_eq!(
            got,
            Some(vec![
                text("One. "),
                pause(500),
                text(" Two. "),
                pause(3500),
                text(" Three.")
            ])
        );
        assert!(has_markup("a [pause 1s] b"));
    }

    #[test]
    fn turbo_tags_stay_text() {
        let s = "Oh [laugh] that is [clear throat] funny [pauses] [pause1s].";
        assert_eq!(parse_markup(s).ok(), Some(vec![text(s)]));
    }

    #[test]
    fn bad_pauses_are_errors() {
        for bad in [
            "a [pause] b",
            "a [pause soon] b",
            "a [pause 1h] b",
            "a [pause 61s] b",
            "a [pause 1..5s] b",
            "a [pause 5s",
            "a [pause -1s] b",
        ] {
            assert!(parse_markup(bad).is_err(), "{bad}");
        }
        let many = "a [pause 60s] ".repeat(11);
        let err = parse_markup(&many)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("600 s"), "{err}");
    }

    #[test]
    fn ssml_subset() {
        let s = r#"<?xml version="1.0"?>
            <speak version="1.1" xml:lang="en-US"><p><s>Hello &amp; welcome.</s><s>Say
            <sub alias="World Wide Web">WWW</sub>.</s></p><break time="750ms"/>
            <p>Bye<break strength="weak"/>now.</p><break/></speak>"#;
        let got = parse_markup(s).ok();
        assert_eq!(
            got,
            Some(vec![
                text("Hello & welcome."),
                text("Say\n            World Wide Web."),
                pause(750),
                text("Bye"),
                pause(250),
                text("now."),
                pause(400),
            ])
        );
    }

    #[test]
    fn ssml_refusals_name_the_problem() {
        let cases = [
            (
                "<speak><prosody rate=\"slow\">x</prosody></speak>",
                "<prosody>",
            ),
            ("<speak><p><p>x</p></p></speak>", "inside"),
            ("<speak>x", "never closed"),
            ("<speak>x</p></speak>", "</p>"),
            ("<speak><sub>x</sub></speak>", "alias"),
            ("<speak>x</speak> tail", "outside"),
            ("<speak><break time=\"36000s\"/></speak>", "longer"),
            ("<speak>a & b</speak>", "&amp;"),
            ("<speak><speak>x</speak></speak>", "inside <speak>"),
        ];
        for (s, want) in cases {
            let err = parse_markup(s)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(want), "{s}: {err}");
        }
    }
}
