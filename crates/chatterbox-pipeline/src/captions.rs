//! Where each text chunk's speech lies in the output (issue 44; the reference returns only
//! the waveform): sentence timings exact to the sample, word timings inside them measured from
//! T3's text-to-speech alignment where the model has alignment heads and it is asked for,
//! estimated otherwise.
//!
//! The output is the text chunks' audio (and the pauses' silence) joined with a linear
//! crossfade of [`crate::GenerateOptions::crossfade_ms`]: two neighbours overlap by the
//! crossfade (or by the shorter of the two when one is shorter than it). A sentence's timing
//! runs from the middle of the crossfade before it to the middle of the crossfade after it,
//! so consecutive sentences meet without a gap or an overlap, the first starts at 0 and, when
//! nothing follows it, the last ends at the output's last sample. A pause's silence lies
//! between the sentences around it and belongs to none.
//!
//! Words are not timed by the model here: each sentence's span is shared among its
//! whitespace-separated words in proportion to their characters, and every word says so
//! ([`WordTiming::estimated`]). Timings from T3's alignment heads would be measured instead.
//!
//! At a [`crate::GenerateOptions::speed`] other than 1 every position is divided by the speed
//! (rounded), as the time stretch moves the audio: the last sentence still ends at the output's
//! last sample.
use crate::s3gen::S3GEN_SR;
use chatterbox_dsp::stretch::stretched_len;
use chatterbox_t3::{BackboneConfig, LLAMA_ALIGNED_HEADS};
use chatterbox_text::TextFrontend;

/// Where one text chunk's speech lies in the output, in 24 kHz samples.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentenceTiming {
    /// The text chunk, from 0 (as [`crate::AudioChunk::sentence`]).
    pub sentence: usize,
    /// Its text as spoken (after markup, before normalisation).
    pub text: String,
    /// First sample (the middle of the crossfade before it, 0 for the first).
    pub start_sample: usize,
    /// One past its last sample (the middle of the crossfade after it).
    pub end_sample: usize,
    /// Its words in order, each once.
    pub words: Vec<WordTiming>,
}

impl SentenceTiming {
    /// Start in seconds.
    pub fn start_secs(&self) -> f64 {
        self.start_sample as f64 / f64::from(S3GEN_SR)
    }

    /// End in seconds.
    pub fn end_secs(&self) -> f64 {
        self.end_sample as f64 / f64::from(S3GEN_SR)
    }

    /// The timing in the output played `speed` times faster ([`crate::GenerateOptions::speed`]):
    /// every sample position `p` becomes `round(p / speed)`, where the time stretch puts it.
    pub(crate) fn at_speed(mut self, speed: f32) -> Self {
        let at = |p: usize| stretched_len(p, speed);
        self.start_sample = at(self.start_sample);
        self.end_sample = at(self.end_sample);
        for w in &mut self.words {
            w.start_sample = at(w.start_sample);
            w.end_sample = at(w.end_sample);
        }
        self
    }
}

/// Where one word lies in the output, in 24 kHz samples.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WordTiming {
    /// The word as written (punctuation attached).
    pub text: String,
    /// First sample.
    pub start_sample: usize,
    /// One past its last sample.
    pub end_sample: usize,
    /// Whether the timing is interpolated (by characters inside its sentence) rather than
    /// measured. `false` only for a word whose start T3's alignment heads measured (the first
    /// speech token aligned to it; its end is the next word's start): with
    /// [`crate::GenerateOptions::word_alignment`] on the English or multilingual model, and
    /// the alignment reached the word. Otherwise `true`.
    pub estimated: bool,
}

impl WordTiming {
    /// Start in seconds.
    pub fn start_secs(&self) -> f64 {
        self.start_sample as f64 / f64::from(S3GEN_SR)
    }

    /// End in seconds.
    pub fn end_secs(&self) -> f64 {
        self.end_sample as f64 / f64::from(S3GEN_SR)
    }
}

/// The words of `text` spread over `start..end` in proportion to their characters.
pub(crate) fn words_by_chars(text: &str, start: usize, end: usize) -> Vec<WordTiming> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let total: usize = words.iter().map(|w| w.chars().count()).sum();
    let span = end.saturating_sub(start) as u128;
    let at = |chars: usize| -> usize {
        if total == 0 {
            return start;
        }
        // exact integer interpolation; the result is within start..=end
        start + (span * chars as u128 / total as u128) as usize
    };
    let mut before = 0;
    words
        .into_iter()
        .map(|w| {
            let after = before + w.chars().count();
            let t = WordTiming {
                text: w.to_string(),
                start_sample: at(before),
                end_sample: at(after),
                estimated: true,
            };
            before = after;
            t
        })
        .collect()
}

/// The (layer, head) pairs the parity recorder maps [`LLAMA_ALIGNED_HEADS`] onto for the tiny
/// 2-layer, 2-head test models (`parity/recorders/t3.py`'s `ALIGN_HEADS`).
const TINY_ALIGNED_HEADS: [(usize, usize); 3] = [(1, 1), (1, 0), (0, 1)];

/// The alignment heads of a T3 backbone: [`LLAMA_ALIGNED_HEADS`] for a Llama with the layers
/// and heads they name (the released English and multilingual models), the recorder's stand-in
/// pairs for a Llama too small for them (the tiny test checkpoints), `None` for GPT-2.
pub(crate) fn aligned_heads(backbone: &BackboneConfig) -> Option<Vec<(usize, usize)>> {
    let BackboneConfig::Llama(c) = backbone else {
        return None;
    };
    let fits = |pairs: &[(usize, usize)]| {
        pairs
            .iter()
            .all(|&(l, h)| l < c.num_hidden_layers && h < c.num_attention_heads)
    };
    [&LLAMA_ALIGNED_HEADS[..], &TINY_ALIGNED_HEADS[..]]
        .into_iter()
        .find(|p| fits(p))
        .map(<[(usize, usize)]>::to_vec)
}

/// The written word each position of T3's text span belongs to: `[START]` (position 0), the
/// text tokens `ids` (positions `1..=ids.len()`), `[STOP]` (`ids.len() + 1`). `[SPACE]` tokens
/// separate the words of the tokenized text; a leading language token (`[fr]`) and the
/// separators belong to none. When the tokenized text has as many words as `text` has
/// whitespace-separated words (the usual case: normalisation rewrites punctuation, not
/// spaces), word `i` is written word `i`; otherwise they are matched in proportion.
pub(crate) fn text_token_words(
    frontend: &TextFrontend,
    ids: &[u32],
    text: &str,
) -> Vec<Option<usize>> {
    let tok = match frontend {
        TextFrontend::English(t) => t.inner(),
        TextFrontend::Multilingual(t) => t.inner(),
        TextFrontend::Turbo(_) => return vec![None; ids.len() + 2],
    };
    let space = tok.token_to_id(chatterbox_text::SPACE);
    let mut group = Vec::with_capacity(ids.len());
    let (mut groups, mut in_word) = (0usize, false);
    for (i, &id) in ids.iter().enumerate() {
        let is_lang = i == 0
            && frontend.variant() == chatterbox_text::Variant::Multilingual
            && tok.id_to_token(id).is_some_and(|t| {
                t.len() > 2 && t.starts_with('[') && t.ends_with(']') && t != chatterbox_text::SPACE
            });
        if Some(id) == space || is_lang {
            in_word = false;
            group.push(None);
            continue;
        }
        if !in_word {
            groups += 1;
            in_word = true;
        }
        group.push(Some(groups - 1));
    }
    let words = text.split_whitespace().count();
    let mut out = Vec::with_capacity(ids.len() + 2);
    out.push(None);
    out.extend(group.into_iter().map(|g| {
        g.filter(|_| words > 0).map(|g| {
            if groups == words {
                g
            } else {
                g * words / groups
            }
        })
    }));
    out.push(None);
    out
}

/// The words of `text` over `start..end` from T3's alignment: `positions[k]` is the text-span
/// position the alignment attended when speech token `k` was drawn (one per speech token
/// S3Gen synthesised into the sentence's audio, in order), `token_words` the word of each
/// text-span position ([`text_token_words`]). See the module docs for the rules. Falls back
/// to [`words_by_chars`] when there is no speech token.
pub(crate) fn aligned_words(
    text: &str,
    start: usize,
    end: usize,
    positions: &[usize],
    token_words: &[Option<usize>],
) -> Vec<WordTiming> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let n = positions.len();
    if n == 0 || words.is_empty() {
        return words_by_chars(text, start, end);
    }
    let span = end.saturating_sub(start) as u128;
    let sample = |k: usize| start + (span * k as u128 / n as u128) as usize;
    // the first speech token aligned to each word, along the monotonic position
    let mut first: Vec<Option<usize>> = vec![None; words.len()];
    let mut furthest = 0;
    for (k, &p) in positions.iter().enumerate() {
        furthest = furthest.max(p);
        if let Some(&Some(w)) = token_words.get(furthest) {
            if w < words.len() && first[w].is_none() {
                first[w] = Some(k);
            }
        }
    }
    // boundaries: word i runs from bounds[i] to bounds[i + 1]; measured ones from the tokens
    let mut bounds: Vec<Option<usize>> = (0..=words.len())
        .map(|i| match i {
            0 => Some(start),
            i if i == words.len() => Some(end),
            i => first[i].map(sample),
        })
        .collect();
    // a measured boundary never goes back (the sample map is monotonic, this keeps it so)
    let mut last = start;
    for b in bounds.iter_mut().flatten() {
        *b = (*b).clamp(last, end);
        last = *b;
    }
    // the others interpolated by characters between the measured ones around them
    let chars: Vec<usize> = words.iter().map(|w| w.chars().count()).collect();
    let mut i = 0;
    while i < words.len() {
        let Some(j) = (i + 1..=words.len()).find(|&j| bounds[j].is_some()) else {
            break;
        };
        let (a, b) = (bounds[i].unwrap_or(start), bounds[j].unwrap_or(end));
        let total: usize = chars[i..j].iter().sum();
        let mut before = 0;
        for m in i + 1..j {
            before += chars[m - 1];
            let d = (b - a) as u128 * before as u128 / total.max(1) as u128;
            bounds[m] = Some(a + d as usize);
        }
        i = j;
    }
    words
        .iter()
        .enumerate()
        .map(|(i, w)| WordTiming {
            text: (*w).to_string(),
            start_sample: bounds[i].unwrap_or(start),
            end_sample: bounds[i + 1].unwrap_or(end),
            estimated: first[i].is_none(),
        })
        .collect()
}

/// What T3's alignment gave for one text chunk: the word of each text-span position and the
/// text position of each speech token synthesised into its audio.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ChunkAlignment {
    pub(crate) token_words: Vec<Option<usize>>,
    pub(crate) positions: Vec<usize>,
}

impl ChunkAlignment {
    /// The words of `timing` measured from this alignment.
    pub(crate) fn time_words(&self, timing: &mut SentenceTiming) {
        timing.words = aligned_words(
            &timing.text,
            timing.start_sample,
            timing.end_sample,
            &self.positions,
            &self.token_words,
        );
    }
}

/// Follows the segments given to a crossfader to say where each lies in the joined output.
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    fade: usize,
    /// The joined output's length so far (every segment's samples counted).
    end: usize,
    /// The previous segment's length (`None` before the first).
    last: Option<usize>,
}

impl Timeline {
    pub(crate) fn new(fade: usize) -> Self {
        Self {
            fade,
            end: 0,
            last: None,
        }
    }

    /// The overlap of a next segment of `len` samples with the one before.
    fn overlap(&self, len: usize) -> usize {
        self.last.map_or(0, |p| self.fade.min(p).min(len))
    }

    /// Adds a segment of `len` samples: its first and one-past-last sample in the output.
    pub(crate) fn push(&mut self, len: usize) -> (usize, usize) {
        let start = self.end - self.overlap(len);
        self.end = start + len;
        self.last = Some(len);
        (start, self.end)
    }

    /// The length of a silence segment that leaves exactly `samples` of zeros between the
    /// fades around it: the fade out of what came before and, when `text_follows`, the fade
    /// in of the next text chunk.
    pub(crate) fn silence_len(&self, samples: usize, text_follows: bool) -> usize {
        let before = self.last.map_or(0, |p| self.fade.min(p));
        let after = if text_follows { self.fade } else { 0 };
        samples + before + after
    }

    /// Adds a text chunk's audio of `len` samples; `more_follows` says whether another
    /// segment will come after it. Its timing, words included.
    pub(crate) fn sentence(
        &mut self,
        sentence: usize,
        text: &str,
        len: usize,
        more_follows: bool,
    ) -> SentenceTiming {
        let overlap = self.overlap(len);
        let (start, end) = self.push(len);
        let start = start + (overlap - overlap / 2);
        let end = if more_follows {
            end - self.fade.min(len) / 2
        } else {
            end
        }
        .max(start);
        SentenceTiming {
            sentence,
            text: text.to_string(),
            start_sample: start,
            end_sample: end,
            words: words_by_chars(text, start, end),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_share_the_span_by_characters() {
        let w = words_by_chars("ab  cdef g", 100, 170);
        let spans: Vec<_> = w.iter().map(|w| (w.start_sample, w.end_sample)).collect();
        assert_eq!(spans, vec![(100, 120), (120, 160), (160, 170)]);
        assert!(w.iter().all(|w| w.estimated));
        assert!(words_by_chars("  ", 0, 10).is_empty());
    }

    /// `[START] a b [SPACE] c d [SPACE] e [STOP]`: the words `ab cd e`.
    fn token_words() -> Vec<Option<usize>> {
        vec![
            None,
            Some(0),
            Some(0),
            None,
            Some(1),
            Some(1),
            None,
            Some(2),
            None,
        ]
    }

    fn spans(w: &[WordTiming]) -> Vec<(usize, usize, bool)> {
        w.iter()
            .map(|w| (w.start_sample, w.end_sample, w.estimated))
            .collect()
    }

    #[test]
    fn aligned_words_start_at_their_first_token() {
        // 10 speech tokens over 0..1000 (token k at 100 k); the position going back at token 4
        // does not move the running maximum
        let pos = [0, 1, 1, 2, 0, 4, 5, 5, 7, 8];
        let w = aligned_words("ab cd e", 0, 1000, &pos, &token_words());
        assert_eq!(
            spans(&w),
            vec![(0, 500, false), (500, 800, false), (800, 1000, false)]
        );
        let texts: Vec<&str> = w.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, ["ab", "cd", "e"]);
        // inside a sentence that starts later: the same fractions
        let w = aligned_words("ab cd e", 2000, 3000, &pos, &token_words());
        assert_eq!(
            spans(&w),
            vec![
                (2000, 2500, false),
                (2500, 2800, false),
                (2800, 3000, false)
            ]
        );
    }

    #[test]
    fn words_the_alignment_skipped_are_interpolated() {
        // from "b" (2) to the separator after "cd" (6) in one step: "cd" never reached
        let pos = [0, 1, 2, 6, 7, 8];
        let w = aligned_words("ab cd e", 0, 600, &pos, &token_words());
        assert_eq!(
            spans(&w),
            vec![(0, 200, false), (200, 400, true), (400, 600, false)]
        );
        // never past [START]: every word estimated, by characters
        let w = aligned_words("ab cd e", 0, 1000, &[0, 0, 0], &token_words());
        assert_eq!(w, words_by_chars("ab cd e", 0, 1000));
        // stopped inside "cd": "e" never reached, interpolated by characters between the
        // measured start of "cd" (token 3) and the sentence's end: 300 + 200 * 2 / 3
        let w = aligned_words("ab cd e", 0, 500, &[0, 1, 3, 4, 5], &token_words());
        assert_eq!(
            spans(&w),
            vec![(0, 300, false), (300, 433, false), (433, 500, true)]
        );
        // no speech token: by characters
        assert_eq!(
            aligned_words("ab cd e", 0, 70, &[], &token_words()),
            words_by_chars("ab cd e", 0, 70)
        );
    }

    #[test]
    fn sentences_meet_in_the_crossfade() {
        let mut t = Timeline::new(10);
        let a = t.sentence(0, "one", 100, true);
        let b = t.sentence(1, "two", 50, false);
        // joined: 100 + 50 - 10 = 140 samples, the fade over 90..100
        assert_eq!((a.start_sample, a.end_sample), (0, 95));
        assert_eq!((b.start_sample, b.end_sample), (95, 140));
        // a pause of 30 samples after a text: 30 zeros between the fades
        let mut t = Timeline::new(10);
        t.sentence(0, "one", 100, true);
        let len = t.silence_len(30, true);
        assert_eq!(len, 50);
        assert_eq!(t.push(len), (90, 140));
        let c = t.sentence(1, "two", 100, false);
        assert_eq!((c.start_sample, c.end_sample), (135, 230));
    }

    #[test]
    fn a_speed_divides_every_position() {
        let mut t = Timeline::new(10);
        let a = t.sentence(0, "one two", 101, false).at_speed(2.0);
        // 101 samples at speed 2: round(50.5) = 51 (half away from zero), as the audio's length
        assert_eq!((a.start_sample, a.end_sample), (0, 51));
        let spans: Vec<_> = a
            .words
            .iter()
            .map(|w| (w.start_sample, w.end_sample))
            .collect();
        assert_eq!(spans, vec![(0, 25), (25, 51)]);
        let b = Timeline::new(10)
            .sentence(0, "x", 100, false)
            .at_speed(0.25);
        assert_eq!(b.end_sample, 400);
    }
}
