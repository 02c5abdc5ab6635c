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
//! With a chunk grid ([`grid_wait`]), chunks that can wait run only every few rounds, so
//! that streams which joined at different times still share their flow calls.
//!
//! A stream's chunks grow (Turbo: 10, 30, 120, then 480 tokens), which keeps the flow calls
//! few, but each chunk must be made while the one before it plays: a chunk of 30 tokens after
//! one of 10 needs tokens three times faster than real time. Under load a batch makes them
//! slower, and every listener runs dry waiting for its second chunk. With a paced schedule
//! ([`paced_hops`]) a live sentence that starts in a batch gets hops that its measured pace
//! ([`Pace`]: the mean round and a chunk's calls, carried from batch to batch) can
//! make in time: a longer first chunk (its first audio later) and growth slowed to what the
//! pace allows. Where the default keeps up, it is kept. A sentence planned in quiet rounds
//! would still outrun its listener when a crowd arrives: with hop fitting ([`fitted_hop`])
//! each later hop is chosen again when the chunk before it is made, from what its listener
//! has left to play, at the measured round or a longer one the caller allows (a server's
//! admission budget). Shorter hops make more flow calls; on a chunk grid they share them.
//! (Fitting on the measured round alone, without the grid, made twice the flow calls and fell
//! from 46x to 25x real time on an H200; cutting a chunk early when its listener was about to
//! run out, tried first, made four times the flow calls at 64 Turbo streams and fell from 163x
//! to 63x: the figures are in git, commits 981f765 and 8df3679.)
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

/// How much the newest measurement weighs in [`Pace`]'s means: about ten rounds make most of
/// them. (On an H200 this paced 44 of 64 Turbo streams arriving together and none of
/// English's waves of 16, whose last rounds, each stream making its final chunk, read as a
/// pace no schedule keeps; at 0.05, forty rounds, English paced 16 of 64 and Turbo none.)
const PACE_WEIGHT: f64 = 0.2;

/// The share of a listener's audio a paced chunk's successor may take to make: the rest
/// absorbs rounds slower than the mean.
pub(crate) const PACED_UTILISATION: f64 = 0.8;

/// The longest round a paced schedule is planned on, as a share of the usable audio of a token
/// ([`PACED_UTILISATION`] of it): a forecast or measured round at or past that plans on this
/// one, which still keeps up, and so starts a stream on its longest first chunk rather than the
/// model's short one. (On an H200, 64 Turbo streams arriving together, forecasts past it had
/// left them on the model's schedule: all 64 ran dry; English's mean round, just after one of
/// its flow calls of 100-150 ms, passes it too.)
pub(crate) const FORECAST_CEILING: f64 = 0.9;

/// Most hops a paced schedule lists (its last repeats).
const PACED_HOPS: usize = 8;

/// A batch's measured pace: exponentially weighted means of a round (a T3 step for every
/// stream, with that round's audio work) and of a flow and a HiFT call. Kept from one batch to the next by the server
/// ([`SpeechBatch::pace`](super::SpeechBatch::pace)), so that a crowd arriving at an idle
/// server is paced by what the last one measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pace {
    round: Option<Duration>,
    flow_call: Option<Duration>,
    vocoder_call: Option<Duration>,
}

fn mix(mean: &mut Option<Duration>, took: Duration) {
    *mean = Some(match *mean {
        None => took,
        Some(m) => m.mul_f64(1.0 - PACE_WEIGHT) + took.mul_f64(PACE_WEIGHT),
    });
}

impl Pace {
    /// A pace measured elsewhere (say, by a benchmark of this device and model): rounds of
    /// `round`, flow calls of `flow_call` and HiFT calls of `vocoder_call`. A batch's own
    /// rounds then update it.
    pub fn assumed(round: Duration, flow_call: Duration, vocoder_call: Duration) -> Self {
        Self {
            round: Some(round),
            flow_call: Some(flow_call),
            vocoder_call: Some(vocoder_call),
        }
    }

    /// Records a round that decoded `rows` streams and took `took` (a round that decoded
    /// nothing is no round).
    pub(crate) fn observe_round(&mut self, rows: usize, took: Duration) {
        if rows > 0 {
            mix(&mut self.round, took);
        }
    }

    pub(crate) fn observe_flow_call(&mut self, took: Duration) {
        mix(&mut self.flow_call, took);
    }

    pub(crate) fn observe_vocoder_call(&mut self, took: Duration) {
        mix(&mut self.vocoder_call, took);
    }

    /// The mean round; `None` before anything is measured. (Scaling it by the streams a
    /// round will hold against those it was measured on read a wave's last rounds, few
    /// streams each making its final chunk, as a pace no schedule keeps: Turbo and English on
    /// an H200 then paced nothing.)
    pub fn round(&self) -> Option<Duration> {
        self.round
    }

    /// A chunk's calls: a flow and a HiFT call, as measured.
    pub fn chunk_calls(&self) -> Option<Duration> {
        Some(self.flow_call? + self.vocoder_call?)
    }
}

/// The hops a live sentence starting now should use instead of `default` (see the module
/// docs), at a mean round of `round` and a chunk's calls taking `calls`, for a listener to
/// whom a token is `token_audio` of audio; `None` where `default` keeps up (or nothing can:
/// a round as long as a token's audio). Each chunk's successor takes at most
/// [`PACED_UTILISATION`] of the chunk's audio to make: the first hop grows until the second
/// of `default` fits behind it, each later one is the least of `default`'s and what fits
/// behind the one before it (never less than that one), up to `default`'s last.
pub(crate) fn paced_hops(
    default: &[usize],
    round: Duration,
    calls: Duration,
    token_audio: Duration,
) -> Option<Vec<usize>> {
    let (r, l) = (round.as_secs_f64(), calls.as_secs_f64());
    let a = token_audio.as_secs_f64() * PACED_UTILISATION;
    let (&first, &last) = (default.first()?, default.last()?);
    if r <= 0.0 || r >= a {
        return None;
    }
    let hop = |k: usize| default.get(k).copied().unwrap_or(last);
    let second = hop(1);
    // the least first hop whose audio covers the making of the second
    let need = ((second as f64 * r + l) / a).ceil() as usize;
    let mut hops = vec![need.clamp(first, first.max(second))];
    while hops.len() < PACED_HOPS {
        let prev = hops[hops.len() - 1];
        let fits = ((a * prev as f64 - l) / r).floor().max(0.0) as usize;
        let h = hop(hops.len()).min(fits.max(prev));
        hops.push(h);
        if hops.len() >= default.len() && h >= last {
            break;
        }
    }
    let same = hops.len() >= default.len() && hops.iter().zip(default).all(|(h, d)| h == d);
    (!same).then_some(hops)
}

/// The hop of a live sentence's next chunk, chosen when the chunk before it is made (see
/// [`SpeechBatch::set_hop_fitting`](super::SpeechBatch::set_hop_fitting)): `planned` (its
/// schedule's), unless its listener, who has `slack` of audio left, would run out first. At a
/// round of `round` (a token each) and the chunk's calls taking `calls`, the chunk may take
/// [`PACED_UTILISATION`] of the slack to make; `pending` tokens (its `look` look-ahead tokens
/// among them) are drawn already. Never shorter than `least` (the schedule's first hop: down
/// to the shortest chunk HiFT's overlap allows, 4 tokens, the H200's open loop ran dry
/// nowhere, but 64 Turbo clients arriving together spiralled into 4-token chunks, 1048 hops
/// fitted, 42x real time and 60 of 64 streams dry, against 120x and none).
pub(crate) fn fitted_hop(
    planned: usize,
    least: usize,
    slack: Duration,
    pending: usize,
    look: usize,
    round: Duration,
    calls: Duration,
) -> usize {
    let r = round.as_secs_f64();
    if r <= 0.0 {
        return planned;
    }
    let rounds = ((slack.as_secs_f64() * PACED_UTILISATION - calls.as_secs_f64()) / r).floor();
    let fits = (rounds + pending as f64 - look as f64).max(0.0) as usize;
    planned.min(fits.max(least))
}

/// What a live stream in a batch that fits each hop needs to choose its next one when it
/// makes a chunk ([`fitted_hop`]): the round and calls to plan on, when its first audio went
/// out, and its shortest hop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HopPacer {
    /// The round to plan on.
    pub round: Duration,
    /// A chunk's flow and HiFT calls, and those it may wait behind.
    pub calls: Duration,
    /// When the stream's first audio went out (`None`: with the chunk just made).
    pub first_audio: Option<Instant>,
    /// The shortest hop (the schedule's first).
    pub least: usize,
}

impl HopPacer {
    /// [`fitted_hop`] at `now` for a listener who has had `emitted` samples at `sample_rate`.
    pub(crate) fn next_hop(
        &self,
        now: Instant,
        planned: usize,
        pending: usize,
        look: usize,
        emitted: usize,
        sample_rate: u32,
    ) -> usize {
        let played_out = self.first_audio.unwrap_or(now)
            + Duration::from_secs_f64(emitted as f64 / f64::from(sample_rate));
        let slack = played_out.saturating_duration_since(now);
        let least = self.least.min(planned);
        fitted_hop(planned, least, slack, pending, look, self.round, self.calls)
    }
}

/// How long a chunk that falls due between a chunk grid's rounds (see
/// [`SpeechBatch::set_chunk_grid`](super::SpeechBatch::set_chunk_grid): chunks that can wait
/// run every `every`th round, together) may wait for the next one, after `round` rounds: the
/// rounds up to it and one more at the mean `round_time`, then `calls` (the calls of the chunks
/// falling due with it). A chunk whose listener runs out sooner runs now. `None` on a grid
/// round: everything due runs.
pub(crate) fn grid_wait(
    round: u64,
    every: usize,
    round_time: Duration,
    calls: Duration,
) -> Option<Duration> {
    let every = every.max(1) as u64;
    let left = (every - round % every) % every;
    (left > 0).then(|| round_time * (left as u32 + 1) + calls)
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

    fn ms_(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    const TURBO: [usize; 4] = [10, 30, 120, 480];

    #[test]
    fn a_pace_that_keeps_up_keeps_the_default() {
        // 16 Turbo streams on an H200: ~4.5 ms rounds
        let r = Duration::from_micros(4500);
        assert_eq!(paced_hops(&TURBO, r, ms_(50), ms_(40)), None);
    }

    #[test]
    fn a_slow_pace_starts_longer_and_grows_slower() {
        // 64 streams: 16 ms rounds, 50 ms of calls; a listener's token is 40 ms, 32 of it usable
        let hops = paced_hops(&TURBO, ms_(16), ms_(50), ms_(40)).unwrap();
        // the first chunk's 17 tokens (544 ms usable) cover the second's 30 (480 + 50 ms)
        assert_eq!(hops, vec![17, 30, 56, 108, 212, 420, 480]);
        for w in hops.windows(2) {
            assert!(w[1] as f64 * 16.0 + 50.0 <= w[0] as f64 * 32.0, "{w:?}");
        }
        // 8 ms rounds keep up at speed 1 but for the growth to 120 ...
        let r8 = paced_hops(&TURBO, ms_(8), ms_(50), ms_(40)).unwrap();
        assert_eq!(r8[..3], [10, 30, 113]);
        // ... and at speed 2 (a token is 20 ms) the first chunk must grow too
        let fast = paced_hops(&TURBO, ms_(8), ms_(50), ms_(20)).unwrap();
        assert_eq!(fast[..3], [19, 30, 53]);
        // 16 ms rounds cannot keep a listener at speed 2 fed by any schedule
        assert_eq!(paced_hops(&TURBO, ms_(16), ms_(50), ms_(20)), None);
    }

    #[test]
    fn no_schedule_helps_a_batch_slower_than_its_listeners() {
        assert_eq!(paced_hops(&TURBO, ms_(32), ms_(50), ms_(40)), None);
        assert_eq!(paced_hops(&TURBO, Duration::ZERO, ms_(50), ms_(40)), None);
        assert_eq!(paced_hops(&[], ms_(16), ms_(50), ms_(40)), None);
    }

    #[test]
    fn a_hop_fits_what_its_listener_has_left() {
        // 16 ms rounds, 50 ms of calls; the first chunk of 10 tokens (400 ms) just went out
        // and 3 look-ahead tokens are drawn: 320 ms usable, less the calls, is 16 rounds: the
        // second chunk makes 16 tokens, not the planned 30
        let fit = |slack, pending| fitted_hop(30, 10, ms_(slack), pending, 3, ms_(16), ms_(50));
        assert_eq!(fit(400, 3), 16);
        for (slack, pending) in [(400, 3), (400, 9), (300, 3), (900, 3)] {
            let h = fit(slack, pending);
            // made in time: its rounds and calls within the usable slack ...
            let rounds = (h + 3).saturating_sub(pending) as f64;
            assert!(rounds * 16.0 + 50.0 <= slack as f64 * 0.8, "{slack} {h}");
            // ... and as long as that allows, up to the plan
            let more = (h + 4).saturating_sub(pending) as f64;
            assert!(
                h == 30 || more * 16.0 + 50.0 > slack as f64 * 0.8,
                "{slack} {h}"
            );
        }
        // tokens drawn ahead count: 6 more drawn, 6 more tokens
        assert_eq!(fit(400, 9), 22);
        // a listener with plenty left gets the plan
        assert_eq!(fit(900, 3), 30);
        // one about to run out: the shortest hop
        assert_eq!(fit(250, 3), 10);
        assert_eq!(fit(0, 3), 10);
        // a long hop behind a long one shrinks below it: 4 s left at 25 ms rounds
        assert_eq!(fitted_hop(480, 10, ms_(4000), 3, 3, ms_(25), ms_(50)), 126);
        // nothing measured (no round): the plan
        assert_eq!(
            fitted_hop(30, 10, ms_(0), 3, 3, Duration::ZERO, ms_(50)),
            30
        );
    }

    #[test]
    fn a_pacer_counts_the_slack_from_the_first_audio() {
        let t0 = Instant::now();
        let p = HopPacer {
            round: ms_(16),
            calls: ms_(50),
            first_audio: Some(t0),
            least: 10,
        };
        // 0.4 s sent from t0, now at t0: as above
        assert_eq!(p.next_hop(t0, 30, 3, 3, 9_600, 24_000), 16);
        // 200 ms later the listener has 200 ms left: nothing fits, the shortest hop
        assert_eq!(p.next_hop(t0 + ms_(200), 30, 3, 3, 9_600, 24_000), 10);
        // a first chunk going out now counts from now
        let first = HopPacer {
            first_audio: None,
            ..p
        };
        assert_eq!(first.next_hop(t0 + ms_(200), 30, 3, 3, 9_600, 24_000), 16);
        // 1.2 s sent: 960 ms usable, 56 rounds, below the plan
        assert_eq!(p.next_hop(t0, 120, 3, 3, 28_800, 24_000), 56);
        // a plan shorter than the shortest hop stays
        assert_eq!(p.next_hop(t0 + ms_(900), 4, 3, 3, 9_600, 24_000), 4);
    }

    #[test]
    fn off_the_grid_a_chunk_may_wait_for_the_next_grid_round() {
        // every 4th round; 10 ms rounds and 30 ms of calls
        let wait = |round| grid_wait(round, 4, ms_(10), ms_(30));
        assert_eq!(wait(0), None);
        assert_eq!(wait(8), None);
        // after round 5, rounds 6, 7 and 8 are to come: 3 + 1 rounds, then the calls
        assert_eq!(wait(5), Some(ms_(70)));
        assert_eq!(wait(7), Some(ms_(50)));
        // a grid of one round (or none) is every round
        assert_eq!(grid_wait(5, 1, ms_(10), ms_(30)), None);
        assert_eq!(grid_wait(5, 0, ms_(10), ms_(30)), None);
    }

    #[test]
    fn a_pace_weighs_the_newest_round_by_a_fifth() {
        let mut p = Pace::default();
        assert_eq!(p.round(), None);
        assert_eq!(p.chunk_calls(), None);
        p.observe_round(16, ms_(10));
        p.observe_round(0, ms_(500)); // an empty round is no round
        assert_eq!(p.round(), Some(ms_(10)));
        p.observe_round(16, ms_(20));
        let round = p.round().map(|r| r.as_secs_f64()).unwrap_or(0.0);
        assert!((round - 0.012).abs() < 1e-9, "{round}");
        p.observe_flow_call(ms_(5));
        p.observe_vocoder_call(ms_(3));
        assert_eq!(p.chunk_calls(), Some(ms_(8)));
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
