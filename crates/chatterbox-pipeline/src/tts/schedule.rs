//! The order of a [`SpeechBatch`](super::SpeechBatch)'s audio work (issue 43): earliest
//! deadline first. No counterpart in the reference, which speaks one text per call.
//!
//! A stream that plays as it arrives (a *live* stream) has a deadline: the moment its
//! listener runs out of audio, which is when its first audio went out plus the audio sent
//! since ([`Playout::deadline`]). A live stream that has not spoken yet must start within
//! [`FIRST_AUDIO_BUDGET`] of joining; a stream whose audio is kept whole (a file) has no
//! deadline and goes after every live one.
//!
//! The chunks due in a round go through the flow in calls led by the most urgent chunk, each
//! call filled with the next most urgent chunks of its number of Euler steps
//! ([`next_call`]). With a horizon set, work that nobody needs yet (no deadline within the
//! horizon) runs at most one call per round, so the T3 step that feeds every stream is not
//! held behind audio that can wait.
//!
//! A stream's chunks grow (Turbo: 10, 30, 120, then 480 tokens), which keeps the flow calls
//! few, but each must be made while the one before it plays: the batch has to make tokens
//! three to four times faster than real time. Under load it cannot, and the listener runs dry
//! waiting for a chunk of 120 tokens while 30 play. With deadline cuts on, a live stream whose
//! next chunk would come after its listener runs out ([`Pace::cut_now`]: the tokens still
//! missing at the measured round time, then a chunk's calls) has its chunk cut on the tokens
//! it has, never fewer than its first hop: more, smaller chunks exactly when they are needed.
use std::time::{Duration, Instant};

/// How soon after joining a live stream's first chunk falls due.
pub const FIRST_AUDIO_BUDGET: Duration = Duration::from_millis(150);

/// When a stream joined, when its first audio went out, and whether it plays as it arrives:
/// with the audio it has sent, its deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Playout {
    /// When the stream joined the batch.
    pub added: Instant,
    /// When its first audio went out.
    pub first_audio: Option<Instant>,
    /// Whether it plays as it arrives (`false`: its audio is kept whole, no deadline).
    pub live: bool,
}

impl Playout {
    pub(crate) fn new(added: Instant) -> Self {
        Self {
            added,
            first_audio: None,
            live: true,
        }
    }

    /// When the listener runs out of audio, having had `emitted` samples at `sample_rate`;
    /// `None` for a stream kept whole.
    pub(crate) fn deadline(&self, emitted: usize, sample_rate: u32) -> Option<Instant> {
        if !self.live {
            return None;
        }
        Some(match self.first_audio {
            None => self.added + FIRST_AUDIO_BUDGET,
            Some(t) => t + Duration::from_secs_f64(emitted as f64 / f64::from(sample_rate)),
        })
    }
}

/// How much the newest measurement weighs in [`Pace`]'s means (about ten rounds make most of
/// them).
const PACE_WEIGHT: f64 = 0.2;

/// A batch's measured pace: exponentially weighted means of a round (a T3 step for every
/// stream, with that round's audio work) and of a chunk's flow and HiFT calls.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Pace {
    pub round: Option<Duration>,
    pub flow_call: Option<Duration>,
    pub vocoder_call: Option<Duration>,
}

fn mix(mean: &mut Option<Duration>, took: Duration) {
    *mean = Some(match *mean {
        None => took,
        Some(m) => m.mul_f64(1.0 - PACE_WEIGHT) + took.mul_f64(PACE_WEIGHT),
    });
}

impl Pace {
    pub(crate) fn observe_round(&mut self, took: Duration) {
        mix(&mut self.round, took);
    }

    pub(crate) fn observe_flow_call(&mut self, took: Duration) {
        mix(&mut self.flow_call, took);
    }

    pub(crate) fn observe_vocoder_call(&mut self, took: Duration) {
        mix(&mut self.vocoder_call, took);
    }

    /// Whether a live stream whose listener runs out of audio at `deadline`, and whose next
    /// chunk falls due after `tokens` more tokens, should have that chunk cut now: when it
    /// would come too late (the tokens and the round after them at the mean round time, then
    /// a flow and a HiFT call). Never while nothing is measured, nor when a round takes as
    /// long as the audio a token makes for the listener (`token_audio`, seconds): a batch
    /// slower than real time gains nothing from smaller chunks, each of which costs a call.
    pub(crate) fn cut_now(
        &self,
        now: Instant,
        deadline: Instant,
        tokens: usize,
        token_audio: f64,
    ) -> bool {
        let (Some(round), Some(flow), Some(vocoder)) =
            (self.round, self.flow_call, self.vocoder_call)
        else {
            return false;
        };
        if round.as_secs_f64() >= token_audio {
            return false;
        }
        let ready = now + round * (tokens as u32).saturating_add(1) + flow + vocoder;
        ready > deadline
    }
}

/// A chunk waiting for its flow call, as [`next_call`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    /// Its stream's deadline (`None`: none).
    pub deadline: Option<Instant>,
    /// The call's Euler steps, `None` for the model's own (only chunks of one number of
    /// steps share a call).
    pub steps: Option<usize>,
    /// Its frames (the call is padded to its longest chunk).
    pub frames: usize,
}

impl Due {
    /// Most urgent first: earliest deadline, chunks without one last; then fewer frames.
    fn urgency(&self) -> (bool, Option<Instant>, usize) {
        (self.deadline.is_none(), self.deadline, self.frames)
    }
}

/// The next flow call among `due`: indices into it, most urgent first, at most `max_rows`, of
/// the leader's number of Euler steps. Empty when nothing is due, or when nothing is urgent
/// (no deadline at or before `urgent_until`) and `background` is false: work that nobody needs
/// yet waits for a later round then. With `urgent_until` `None` everything is urgent.
pub(crate) fn next_call(
    due: &[Due],
    max_rows: usize,
    urgent_until: Option<Instant>,
    background: bool,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..due.len()).collect();
    order.sort_by_key(|&i| due[i].urgency());
    let Some(&lead) = order.first() else {
        return Vec::new();
    };
    let urgent = match (due[lead].deadline, urgent_until) {
        (_, None) => true,
        (Some(d), Some(until)) => d <= until,
        (None, Some(_)) => false,
    };
    if !urgent && !background {
        return Vec::new();
    }
    let steps = due[lead].steps;
    order
        .into_iter()
        .filter(|&i| due[i].steps == steps)
        .take(max_rows.max(1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t0: Instant, ms: u64) -> Option<Instant> {
        Some(t0 + Duration::from_millis(ms))
    }

    fn due(deadline: Option<Instant>, steps: usize, frames: usize) -> Due {
        Due {
            deadline,
            steps: Some(steps),
            frames,
        }
    }

    fn pace(round: u64, flow: u64, vocoder: u64) -> Pace {
        let d = Duration::from_millis;
        Pace {
            round: Some(d(round)),
            flow_call: Some(d(flow)),
            vocoder_call: Some(d(vocoder)),
        }
    }

    #[test]
    fn a_chunk_is_cut_when_the_schedules_would_come_too_late() {
        let t0 = Instant::now();
        let dl = t0 + Duration::from_millis(400);
        // 30 tokens at 10 ms, then 60 ms of calls: 370 ms, in time for a listener at 400 ms
        let p = pace(10, 40, 20);
        assert!(!p.cut_now(t0, dl, 29, 0.04));
        // 14 ms rounds (64 Turbo streams on an H200): 494 ms, too late
        assert!(pace(14, 40, 20).cut_now(t0, dl, 29, 0.04));
        // a listener already out of audio
        assert!(p.cut_now(t0, t0, 1, 0.04));
        // at speed 2 a token is 20 ms of audio: 25 ms rounds cannot keep up by any cut
        assert!(pace(14, 40, 20).cut_now(t0, dl, 29, 0.02));
        assert!(!pace(25, 40, 20).cut_now(t0, dl, 29, 0.02));
        // a batch slower than real time, or nothing measured yet: no cut
        assert!(!pace(40, 40, 20).cut_now(t0, t0, 29, 0.04));
        assert!(!Pace::default().cut_now(t0, t0, 29, 0.04));
    }

    #[test]
    fn pace_means_weigh_the_newest_round_by_a_fifth() {
        let mut p = Pace::default();
        p.observe_round(Duration::from_millis(10));
        assert_eq!(p.round, Some(Duration::from_millis(10)));
        p.observe_round(Duration::from_millis(20));
        let round = p.round.map(|r| r.as_secs_f64()).unwrap_or(0.0);
        assert!((round - 0.012).abs() < 1e-9, "{round}");
        p.observe_flow_call(Duration::from_millis(5));
        p.observe_vocoder_call(Duration::from_millis(3));
        assert_eq!(p.flow_call, Some(Duration::from_millis(5)));
        assert_eq!(p.vocoder_call, Some(Duration::from_millis(3)));
    }

    #[test]
    fn a_live_stream_is_due_when_its_listener_runs_out() {
        let t0 = Instant::now();
        let mut p = Playout::new(t0);
        assert_eq!(p.deadline(0, 24_000), ms(t0, 150));
        p.first_audio = ms(t0, 100);
        // 1.5 s of audio sent from 100 ms on: the listener runs out at 1.6 s
        assert_eq!(p.deadline(36_000, 24_000), ms(t0, 1600));
        p.live = false;
        assert_eq!(p.deadline(36_000, 24_000), None);
    }

    #[test]
    fn the_most_urgent_chunk_leads_and_whole_files_go_last() {
        let t0 = Instant::now();
        let d = [
            due(None, 10, 10),
            due(ms(t0, 900), 10, 400),
            due(ms(t0, 200), 10, 600),
            due(ms(t0, 500), 10, 50),
        ];
        assert_eq!(next_call(&d, 16, None, false), vec![2, 3, 1, 0]);
        assert_eq!(next_call(&d, 2, None, false), vec![2, 3]);
        // a call of one row runs the most urgent chunk alone
        assert_eq!(next_call(&d, 0, None, false), vec![2]);
        assert!(next_call(&[], 4, None, false).is_empty());
    }

    #[test]
    fn one_call_holds_one_number_of_steps() {
        let t0 = Instant::now();
        let d = [
            due(ms(t0, 300), 2, 80),
            due(ms(t0, 100), 10, 80),
            due(ms(t0, 200), 2, 80),
            due(ms(t0, 400), 10, 80),
        ];
        assert_eq!(next_call(&d, 8, None, false), vec![1, 3]);
        assert_eq!(next_call(&[d[0], d[2]], 8, None, false), vec![1, 0]);
    }

    #[test]
    fn equal_deadlines_put_shorter_chunks_first() {
        let t0 = Instant::now();
        let d = [due(ms(t0, 100), 2, 300), due(ms(t0, 100), 2, 100)];
        assert_eq!(next_call(&d, 1, None, false), vec![1]);
    }

    #[test]
    fn work_that_nobody_needs_yet_waits() {
        let t0 = Instant::now();
        let far = due(ms(t0, 2000), 2, 80);
        let near = due(ms(t0, 400), 2, 80);
        let whole = due(None, 2, 80);
        let until = ms(t0, 1000);
        assert!(next_call(&[far], 8, until, false).is_empty());
        assert!(next_call(&[far, whole], 8, until, false).is_empty());
        // one call of it may run when the round has run nothing else
        assert_eq!(next_call(&[whole, far], 8, until, true), vec![1, 0]);
        assert_eq!(next_call(&[whole], 8, until, true), vec![0]);
        // an urgent leader takes the others along
        assert_eq!(
            next_call(&[far, near, whole], 8, until, false),
            vec![1, 0, 2]
        );
        // without a limit everything is urgent
        assert_eq!(next_call(&[far], 8, None, false), vec![0]);
        assert_eq!(next_call(&[whole], 8, None, false), vec![0]);
    }
}
