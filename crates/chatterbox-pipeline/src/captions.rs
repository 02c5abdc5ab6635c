//! Where each text chunk's speech lies in the output (issue 44; the reference returns only
//! the waveform): sentence timings exact to the sample, word timings estimated inside them.
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
    /// measured. Always `true` for now.
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
