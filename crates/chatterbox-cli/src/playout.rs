//! When to start playing a stream (`speak --stream -o -` into a player): a listener who starts
//! at the first chunk must not stop and wait for the next one, so where generation runs slower
//! than real time the audio is held back until the rest can follow in time.
//!
//! Pure: no I/O and no clock of its own. The caller reports each chunk with the wall time it
//! measured, the audio produced so far and an estimate of the audio still to come
//! ([`SpeechEstimate`]); the [`Planner`] answers play or keep buffering.
//!
//! The rule ([`Policy::Adaptive`]), for a producer making `r` seconds of audio per wall second
//! and `T` seconds of audio in all (`B` produced and buffered so far, `R = T - B` to come):
//! playing from now, the listener reaches the end of what exists when the producer does only if
//! `B + R >= R / r`, i.e. `B >= R (1/r - 1)`, which is `B >= T (1 - r)`, the standard result for
//! a constant-rate producer. To it come a margin `m` (seconds of audio the listener still has in
//! hand when the producer finishes) and the largest chunk seen so far `c` (the audio arrives in
//! chunks, so what has been handed out lags the rate by up to a chunk):
//!
//! ```text
//! play when  B >= T (1 - r) + r (m + c),  T = B + R
//! ```
//!
//! At or above real time (`r >= 1`) playback starts at once, margin or not: nothing changes
//! where generation keeps up (a GPU's first audio goes out as soon as it is made). The rate is
//! measured per chunk: at the first chunk, its audio over the time since generation began (the
//! only measure there is; it includes the prefill, so it errs slow); from the second on, the
//! audio made since the first chunk over the time since it (the prefill paid once no longer
//! counts; later sentences' prefills do, as they recur). Once playing, it plays on: a player
//! cannot be paused from here, so later chunks are written as they come.

/// Seconds of speech per character of text, for the estimate of a text's length before any
/// of it is spoken: 10 characters a second, slower than English speech's usual ~14 (the soak
/// bench's figure), so the estimate errs long.
pub const SECS_PER_CHAR: f64 = 0.1;

/// Seconds of speech per Chinese, Japanese or Korean character (a syllable or more each:
/// Mandarin runs at 4-5 characters a second).
pub const SECS_PER_CJK_CHAR: f64 = 0.25;

/// Seconds of audio per speech token (S3Gen: 25 tokens a second).
const SECS_PER_TOKEN: f64 = 0.04;

/// Tokens a Turbo or Nano sentence adds after its last drawn one (three silence tokens).
const TRAILING_TOKENS: usize = 3;

/// How long a character is spoken for, before any speed change.
fn char_secs(c: char) -> f64 {
    let cjk = matches!(c as u32,
        0x3040..=0x30FF      // hiragana, katakana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF); // CJK compatibility ideographs
    if cjk {
        SECS_PER_CJK_CHAR
    } else {
        SECS_PER_CHAR
    }
}

/// The audio a text will make, estimated from its characters (see [`SECS_PER_CHAR`]) and
/// bounded by the token cap, and corrected upwards as its text chunks finish: where the
/// finished ones took longer than their characters said, the rest is scaled by the same
/// factor (never downwards: the estimate stays on the long side).
#[derive(Debug, Clone, PartialEq)]
pub struct SpeechEstimate {
    /// The characters' estimate of the whole text, seconds (at the speed).
    prior_secs: f64,
    /// The most the text can make: every text chunk at the token cap, seconds (at the speed).
    cap_secs: f64,
    /// The characters' estimate of the finished text chunks.
    finished_prior_secs: f64,
    /// Their measured audio.
    finished_secs: f64,
    /// Output seconds per second of speech (`--speed`).
    speed: f64,
}

impl SpeechEstimate {
    /// `text` spoken in `text_chunks` pieces of at most `max_new_tokens` speech tokens each,
    /// `speed` times faster than normal (a speed that is not a positive number counts as 1).
    pub fn new(text: &str, text_chunks: usize, max_new_tokens: usize, speed: f64) -> Self {
        let speed = if speed.is_finite() && speed > 0.0 {
            speed
        } else {
            1.0
        };
        let prior_secs = text.chars().map(char_secs).sum::<f64>() / speed;
        let per_chunk = (max_new_tokens + TRAILING_TOKENS) as f64 * SECS_PER_TOKEN;
        Self {
            prior_secs,
            cap_secs: text_chunks.max(1) as f64 * per_chunk / speed,
            finished_prior_secs: 0.0,
            finished_secs: 0.0,
            speed,
        }
    }

    /// A text chunk's speech is complete: `text` as spoken, and `secs` of audio.
    pub fn finished(&mut self, text: &str, secs: f64) {
        self.finished_prior_secs += text.chars().map(char_secs).sum::<f64>() / self.speed;
        self.finished_secs += secs.max(0.0);
    }

    /// The estimated audio of the whole text, seconds.
    pub fn total_secs(&self) -> f64 {
        let factor = if self.finished_prior_secs > 0.0 {
            (self.finished_secs / self.finished_prior_secs).max(1.0)
        } else {
            1.0
        };
        let rest = (self.prior_secs - self.finished_prior_secs).max(0.0) * factor;
        (self.finished_secs + rest).min(self.cap_secs.max(self.finished_secs))
    }

    /// The estimated audio still to come once `produced_secs` of it is made, seconds.
    pub fn remaining_secs(&self, produced_secs: f64) -> f64 {
        (self.total_secs() - produced_secs).max(0.0)
    }
}

/// How the start is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// Play at once where generation keeps up with real time; otherwise buffer as the rule in
    /// the module's documentation says, with `margin_secs` to spare.
    Adaptive {
        /// Seconds of audio the listener keeps in hand at the end (at the measured rate).
        margin_secs: f64,
    },
    /// Buffer `secs` of audio (or the whole stream, if shorter), whatever the rate (`0`: play
    /// at once).
    Fixed {
        /// Seconds of audio to buffer.
        secs: f64,
    },
}

/// A chunk of the stream, as the caller measured it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Produced {
    /// When the chunk was ready, in seconds since generation began (the caller's clock).
    pub at_secs: f64,
    /// Seconds of audio produced so far, this chunk included (all of it buffered until the
    /// planner says play).
    pub audio_secs: f64,
    /// Estimated seconds of audio still to come (see [`SpeechEstimate::remaining_secs`]).
    pub remaining_secs: f64,
    /// Whether this is the last chunk.
    pub is_last: bool,
}

/// What to do after a chunk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// Write what is buffered and play from now on (every later chunk answers this too).
    Play,
    /// No audio yet: nothing to decide on.
    Wait,
    /// Hold the audio until `target_secs` of it is buffered (the estimate at this rate;
    /// recomputed at every chunk).
    Buffer {
        /// Seconds of audio to buffer before playing.
        target_secs: f64,
        /// The measured production rate: seconds of audio per wall second.
        rate: f64,
    },
}

/// Decides, chunk by chunk, when a stream may start playing; see the module's documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct Planner {
    policy: Policy,
    /// The first chunk with audio: `(at_secs, audio_secs)`.
    first: Option<(f64, f64)>,
    /// The audio produced at the previous chunk.
    last_audio_secs: f64,
    /// The largest chunk so far, seconds of audio.
    largest_chunk_secs: f64,
    /// The latest measured rate.
    rate: Option<f64>,
    playing: bool,
}

impl Planner {
    /// A planner that has seen no chunk.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            first: None,
            last_audio_secs: 0.0,
            largest_chunk_secs: 0.0,
            rate: None,
            playing: false,
        }
    }

    /// The latest measured production rate (seconds of audio per wall second), once a chunk
    /// with audio was seen.
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// Whether playback has started.
    pub fn playing(&self) -> bool {
        self.playing
    }

    /// Takes the next chunk's measures; answers whether to start playing now.
    pub fn observe(&mut self, p: Produced) -> Decision {
        let audio = if p.audio_secs.is_finite() {
            p.audio_secs.max(0.0)
        } else {
            0.0
        };
        let chunk = audio - self.last_audio_secs;
        self.largest_chunk_secs = self.largest_chunk_secs.max(chunk);
        self.last_audio_secs = audio;
        if audio > 0.0 {
            self.measure(p.at_secs, audio);
        }
        if self.playing {
            return Decision::Play;
        }
        if p.is_last {
            // Nothing more comes: whatever there is can play.
            self.playing = true;
            return Decision::Play;
        }
        let Some(rate) = self.rate else {
            return Decision::Wait;
        };
        let target = match self.policy {
            Policy::Fixed { secs } => secs,
            Policy::Adaptive { .. } if rate >= 1.0 => 0.0,
            Policy::Adaptive { margin_secs } => {
                let remaining = if p.remaining_secs.is_nan() {
                    f64::INFINITY
                } else {
                    p.remaining_secs.max(0.0)
                };
                let total = audio + remaining;
                total * (1.0 - rate) + rate * (margin_secs.max(0.0) + self.largest_chunk_secs)
            }
        };
        if audio >= target {
            self.playing = true;
            Decision::Play
        } else {
            Decision::Buffer {
                target_secs: target,
                rate,
            }
        }
    }

    /// Updates the rate with a chunk that brought the audio to `audio` at `at`.
    fn measure(&mut self, at: f64, audio: f64) {
        match self.first {
            None => {
                self.first = Some((at, audio));
                self.rate = Some(if at > 0.0 { audio / at } else { f64::INFINITY });
            }
            Some((t0, a0)) => {
                // No time between the chunks: nothing new to measure.
                if at > t0 {
                    self.rate = Some((audio - a0).max(0.0) / (at - t0));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADAPTIVE: Policy = Policy::Adaptive { margin_secs: 0.0 };

    fn chunk(at_secs: f64, audio_secs: f64, remaining_secs: f64) -> Produced {
        Produced {
            at_secs,
            audio_secs,
            remaining_secs,
            is_last: false,
        }
    }

    /// The decisions for a producer that makes `chunk_secs` of audio every `every` seconds
    /// after a start-up of `startup` seconds, `total` seconds in all.
    fn run(policy: Policy, startup: f64, every: f64, chunk_secs: f64, total: f64) -> Vec<Decision> {
        let mut p = Planner::new(policy);
        let n = (total / chunk_secs).round() as usize;
        (1..=n)
            .map(|i| {
                let audio = i as f64 * chunk_secs;
                p.observe(Produced {
                    at_secs: startup + (i - 1) as f64 * every,
                    audio_secs: audio,
                    remaining_secs: total - audio,
                    is_last: i == n,
                })
            })
            .collect()
    }

    /// How long the listener of [`run`]'s stream waits at most for a chunk (negative: how
    /// early the latest one comes), playback starting at the first `Play` or at chunk
    /// `start` (from 0) instead.
    fn worst_wait(
        d: &[Decision],
        startup: f64,
        every: f64,
        chunk_secs: f64,
        start: Option<usize>,
    ) -> f64 {
        let first = d
            .iter()
            .position(|d| *d == Decision::Play)
            .unwrap_or(d.len());
        let s = start.unwrap_or(first);
        let started = startup + s as f64 * every;
        (s + 1..d.len())
            .map(|k| {
                let ready = startup + k as f64 * every;
                let needed = started + k as f64 * chunk_secs;
                ready - needed
            })
            .fold(f64::NEG_INFINITY, f64::max)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn faster_than_real_time_plays_the_first_chunk_at_once() {
        // 0.2 s of audio after 0.05 s: 4x real time.
        let d = run(ADAPTIVE, 0.05, 0.05, 0.2, 10.0);
        assert_eq!(d[0], Decision::Play);
        assert!(d.iter().all(|d| *d == Decision::Play));
        // a margin changes nothing above real time
        let d = run(Policy::Adaptive { margin_secs: 5.0 }, 0.05, 0.05, 0.2, 10.0);
        assert_eq!(d[0], Decision::Play);
    }

    #[test]
    fn real_time_plays_at_once() {
        // the first chunk's 0.5 s took 0.5 s: exactly real time
        let d = run(Policy::Adaptive { margin_secs: 1.0 }, 0.5, 0.5, 0.5, 5.0);
        assert_eq!(d[0], Decision::Play);
    }

    #[test]
    fn slower_than_real_time_buffers_until_the_rest_follows_in_time() {
        // Half real time: 0.5 s of audio each second, 4 s in all. Play when
        // B >= 4 (1 - 0.5) + 0.5 (0 + 0.5) = 2.25 s: at the fifth chunk (2.5 s).
        let d = run(ADAPTIVE, 1.0, 1.0, 0.5, 4.0);
        for (i, d) in d.iter().enumerate().take(4) {
            assert!(
                matches!(d, Decision::Buffer { target_secs, rate }
                    if close(*target_secs, 2.25) && close(*rate, 0.5)),
                "chunk {i}: {d:?}"
            );
        }
        assert_eq!(d[4], Decision::Play);
        assert!(d[5..].iter().all(|d| *d == Decision::Play));
        // The listener never waits; one chunk sooner and the last chunk would come late.
        assert!(worst_wait(&d, 1.0, 1.0, 0.5, None) <= 0.0);
        assert!(worst_wait(&d, 1.0, 1.0, 0.5, Some(3)) > 0.0);
    }

    #[test]
    fn the_margin_adds_rate_times_margin() {
        // 0.5x, margin 1 s: target 4 * 0.5 + 0.5 * (1 + 0.5) = 2.75 s: the sixth chunk (3 s).
        let d = run(Policy::Adaptive { margin_secs: 1.0 }, 1.0, 1.0, 0.5, 4.0);
        assert!(
            matches!(d[0], Decision::Buffer { target_secs, .. } if close(target_secs, 2.75)),
            "{:?}",
            d[0]
        );
        assert!(matches!(d[4], Decision::Buffer { .. }), "{:?}", d[4]);
        assert_eq!(d[5], Decision::Play);
    }

    #[test]
    fn the_first_rate_counts_from_the_start_and_later_ones_from_the_first_chunk() {
        let mut p = Planner::new(ADAPTIVE);
        // 0.2 s after 4 s: 0.05x; 10 s to come in all.
        let d = p.observe(chunk(4.0, 0.2, 9.8));
        assert!(
            matches!(d, Decision::Buffer { rate, target_secs }
                if close(rate, 0.05) && close(target_secs, 10.0 * 0.95 + 0.05 * 0.2)),
            "{d:?}"
        );
        // then 1 s of audio in 0.8 s: 1.25x from the first chunk on: play.
        assert_eq!(p.observe(chunk(4.8, 1.2, 8.8)), Decision::Play);
        assert!(p.rate().is_some_and(|r| close(r, 1.25)), "{:?}", p.rate());
        assert!(p.playing());
    }

    #[test]
    fn a_producer_that_slows_down_raises_the_target() {
        let mut p = Planner::new(ADAPTIVE);
        // 0.8x at first: 1 s of audio at 1.25 s; 9 s to come.
        let d = p.observe(chunk(1.25, 1.0, 9.0));
        assert!(
            matches!(d, Decision::Buffer { target_secs, rate }
                if close(rate, 0.8) && close(target_secs, 10.0 * 0.2 + 0.8 * 1.0)),
            "{d:?}"
        );
        // 0.8x again: 2.8 s needed, 2 s there.
        let d = p.observe(chunk(2.5, 2.0, 8.0));
        assert!(
            matches!(d, Decision::Buffer { target_secs, .. } if close(target_secs, 2.8)),
            "{d:?}"
        );
        // The next second of audio takes 3.75 s: 2 s in 5 s since the first chunk, 0.4x.
        // Target 10 * 0.6 + 0.4 * 1 = 6.4 s, far above the 3 s there.
        let d = p.observe(chunk(6.25, 3.0, 7.0));
        assert!(
            matches!(d, Decision::Buffer { target_secs, rate }
                if close(rate, 0.4) && close(target_secs, 6.4)),
            "{d:?}"
        );
        // Had it kept 0.8x, 3 s would have played: 10 * 0.2 + 0.8 = 2.8.
        let mut steady = Planner::new(ADAPTIVE);
        steady.observe(chunk(1.25, 1.0, 9.0));
        steady.observe(chunk(2.5, 2.0, 8.0));
        assert_eq!(steady.observe(chunk(3.75, 3.0, 7.0)), Decision::Play);
    }

    #[test]
    fn no_audio_yet_waits_and_the_last_chunk_plays() {
        let mut p = Planner::new(ADAPTIVE);
        assert_eq!(p.observe(chunk(1.0, 0.0, 5.0)), Decision::Wait);
        assert_eq!(p.rate(), None);
        assert!(!p.playing());
        // the last chunk plays whatever the rate, even an empty stream
        let d = p.observe(Produced {
            at_secs: 20.0,
            audio_secs: 0.5,
            remaining_secs: 0.0,
            is_last: true,
        });
        assert_eq!(d, Decision::Play);
        let mut empty = Planner::new(Policy::Fixed { secs: 3.0 });
        let d = empty.observe(Produced {
            at_secs: 1.0,
            audio_secs: 0.0,
            remaining_secs: 0.0,
            is_last: true,
        });
        assert_eq!(d, Decision::Play);
        // audio at time zero: no time to measure a rate in, so it is taken as keeping up
        let mut instant = Planner::new(ADAPTIVE);
        assert_eq!(instant.observe(chunk(0.0, 0.2, 5.0)), Decision::Play);
    }

    #[test]
    fn once_playing_it_plays_on() {
        let mut p = Planner::new(ADAPTIVE);
        assert_eq!(p.observe(chunk(0.1, 0.5, 5.0)), Decision::Play);
        // much slower afterwards: still playing (it cannot be paused)
        assert_eq!(p.observe(chunk(10.0, 0.6, 5.0)), Decision::Play);
    }

    #[test]
    fn a_fixed_buffer_ignores_the_rate() {
        // 4x real time, but 1 s is asked for: the fourth 0.25 s chunk.
        let d = run(Policy::Fixed { secs: 1.0 }, 0.0625, 0.0625, 0.25, 3.0);
        assert!(
            matches!(d[2], Decision::Buffer { target_secs, rate }
                if close(target_secs, 1.0) && close(rate, 4.0)),
            "{:?}",
            d[2]
        );
        assert_eq!(d[3], Decision::Play);
        // 0: the first chunk, even far below real time
        let d = run(Policy::Fixed { secs: 0.0 }, 4.0, 1.0, 0.2, 3.0);
        assert_eq!(d[0], Decision::Play);
        // more than the whole stream: its last chunk
        let d = run(Policy::Fixed { secs: 60.0 }, 0.05, 0.05, 0.5, 2.0);
        assert!(matches!(d[2], Decision::Buffer { .. }));
        assert_eq!(d[3], Decision::Play);
    }

    #[test]
    fn an_unknown_remainder_waits_for_the_end_below_real_time() {
        let mut p = Planner::new(ADAPTIVE);
        let d = p.observe(chunk(1.0, 0.5, f64::NAN));
        assert!(
            matches!(d, Decision::Buffer { target_secs, .. } if target_secs.is_infinite()),
            "{d:?}"
        );
    }

    #[test]
    fn the_estimate_counts_characters_and_is_corrected_upwards() {
        // 20 letters (2 s) and 4 CJK characters (1 s), 2 chunks of at most 100 tokens.
        let text = "abcdefghij klmnopqr 日本語だ";
        assert_eq!(text.chars().count(), 24);
        let mut e = SpeechEstimate::new(text, 2, 100, 1.0);
        assert!(close(e.total_secs(), 2.0 + 1.0), "{}", e.total_secs());
        assert!(close(e.remaining_secs(0.5), 2.5));
        assert_eq!(e.remaining_secs(10.0), 0.0);
        // twice as fast: half as long
        let fast = SpeechEstimate::new(text, 2, 100, 2.0);
        assert!(close(fast.total_secs(), 1.5));
        // the first 10 letters (1 s by their count) took 2 s: the rest (2 s) counts double
        e.finished("abcdefghij", 2.0);
        assert!(close(e.total_secs(), 2.0 + 2.0 * 2.0), "{}", e.total_secs());
        // a faster finish does not shorten the rest
        let mut quick = SpeechEstimate::new(text, 2, 100, 1.0);
        quick.finished("abcdefghij", 0.5);
        assert!(close(quick.total_secs(), 0.5 + 2.0));
        // the token cap bounds it: 2 chunks of (5 + 3) tokens, 0.64 s
        let capped = SpeechEstimate::new(text, 2, 5, 1.0);
        assert!(close(capped.total_secs(), 0.64), "{}", capped.total_secs());
    }
}
