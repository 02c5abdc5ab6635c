//! What a text becomes before T3 sees it (issue 44): its text chunks in order and the pauses
//! its markup puts between them (`[pause 500ms]`, SSML `<break>`: see
//! [`chatterbox_text::parse_markup`]). A text without markup gives the same chunks as before
//! markup existed, with no pause, so its audio is unchanged.
use crate::s3gen::S3GEN_SR;
use crate::Result;
use chatterbox_text::{has_markup, parse_markup, Lexicon, MarkupSegment};

/// Text chunks to speak and the silence around them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpeechPlan {
    /// The text chunks, spoken in turn (each a sentence group of `max_chunk_chars`).
    pub(crate) texts: Vec<String>,
    /// Samples of silence before each text chunk; one more entry for the silence after the
    /// last (`texts.len() + 1` entries).
    pub(crate) silence: Vec<usize>,
}

/// The chunks and pauses of `text`, `chunks` splitting a text into sentence chunks (the
/// models' `max_chunk_chars` splitting). Each text segment of the markup is split on its own,
/// so a sentence never runs across a pause, `<p>` or `<s>`. With a `lexicon`, each text
/// segment is respelled first (the markup itself never is).
pub(crate) fn plan(
    text: &str,
    lexicon: Option<&Lexicon>,
    chunks: impl Fn(&str) -> Result<Vec<String>>,
) -> Result<SpeechPlan> {
    let respelled = |t: &str| lexicon.map(|l| l.apply(t));
    if !has_markup(text) {
        let texts = match respelled(text) {
            Some(t) => chunks(&t)?,
            None => chunks(text)?,
        };
        let silence = vec![0; texts.len() + 1];
        return Ok(SpeechPlan { texts, silence });
    }
    let mut texts = Vec::new();
    let mut silence = vec![0usize];
    for segment in parse_markup(text)? {
        match segment {
            MarkupSegment::Text(t) => {
                let t = respelled(&t).unwrap_or(t);
                for chunk in chunks(&t)? {
                    texts.push(chunk);
                    silence.push(0);
                }
            }
            MarkupSegment::Pause { ms } => {
                if let Some(last) = silence.last_mut() {
                    // at most MAX_TOTAL_PAUSE_MS in all (10 min): no overflow
                    *last += ms as usize * S3GEN_SR as usize / 1000;
                }
            }
        }
    }
    if texts.is_empty() && silence.iter().all(|&s| s == 0) {
        // nothing to speak: the plain path says so as before
        let texts = chunks(text)?;
        let silence = vec![0; texts.len() + 1];
        return Ok(SpeechPlan { texts, silence });
    }
    Ok(SpeechPlan { texts, silence })
}
