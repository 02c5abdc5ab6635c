//! Admission by capacity (issue 43): a batched model seats a new request only while its
//! measured costs say every seated stream still plays without a gap.
//!
//! A round of a batch ([`RequestBatch::step`](crate::RequestBatch::step)) decodes one speech
//! token for every seated request: 40 ms of audio at T3's 25 tokens a second (less at a
//! `speed` above 1). Streams keep up with their listeners while the mean round, its share of
//! the flow and HiFT work included, takes less than that. [`Capacity`] forecasts the mean
//! round of `n` requests from two measured costs:
//! - the round's own part (the T3 step, admissions, host work): a line in the number seated
//!   (least squares over the recent rounds, older ones weighing less), measured the round it
//!   happens;
//! - the audio work (flow and HiFT calls) per second of audio they make, times the `n` tokens
//!   of audio a round decodes.
//!
//! Both are measured where the work happens, so a crowd's first rounds, which decode its
//! tokens but carry none of the audio work those bring a few rounds later, are not read as
//! room. (The first model, a line of whole round times against batch sizes, did: on an H200 it
//! seated 47 English streams at 52 ms rounds, and 63 of 64 ran dry. The second, the audio a
//! batch handed out per second of rounds, read each size's rate as the rate of any larger one:
//! it seated crowds in many small steps, and the streams, no longer starting together, shared
//! their flow calls four at a time instead of sixteen: Turbo at 16 clients fell from 124x to
//! 66x real time.) One more request is seated only while the forecast, at one more, stays
//! within [`UTILISATION`] of a token's audio. Until rounds of several sizes are measured, half
//! of the round's own part is taken to grow with the number seated (a cautious reading that
//! still seats a crowd within a few rounds). A batch with nobody in it always takes the next
//! request; one that has made no audio yet takes no second.
use std::time::Duration;

/// The audio one round makes per request at speed 1: one speech token (25 a second).
pub(crate) const TOKEN_AUDIO: Duration = Duration::from_millis(40);

/// The share of [`TOKEN_AUDIO`] the forecast mean round may take: the rest absorbs the rounds
/// slower than the mean and leaves paced schedules room to grow their chunks (a paced chunk may
/// grow by the usable share of a token's audio over the round: at 24 ms rounds, by a third).
pub(crate) const UTILISATION: f64 = 0.6;

/// The longest mean round admission by capacity lets a batch of streams played at speed 1
/// reach ([`UTILISATION`] of [`TOKEN_AUDIO`]: 24 ms): what a batch's fitted hops plan on at
/// least ([`PipelineModel::with_round_budget`](crate::PipelineModel::with_round_budget)).
pub fn round_budget() -> Duration {
    Capacity::budget(1.0)
}

/// The batch time over which the costs are measured: a round's weight falls by e every
/// `WINDOW` of rounds after it.
pub(crate) const WINDOW: Duration = Duration::from_secs(2);

/// The requests a batch will hold once `waiting` ones have joined the `seated` ones: up to
/// `slots` in all (the rest wait for a later batch), or those seated where more.
pub(crate) fn held(seated: usize, waiting: usize, slots: usize) -> usize {
    (seated + waiting).min(slots.max(seated))
}

/// A batch's measured costs and the admissions they allow.
#[derive(Debug, Clone, Default)]
pub(crate) struct Capacity {
    /// Weighted sums over rounds of 1, n, b, n², n·b (n: requests seated, b: the round's
    /// own seconds, its audio work left out).
    s0: f64,
    sn: f64,
    sb: f64,
    snn: f64,
    snb: f64,
    /// Weighted seconds of audio work, and of the audio it made.
    work: f64,
    made: f64,
}

impl Capacity {
    /// Records a round of `seated` requests that took `took`, `audio_work` of it in the flow
    /// and HiFT calls that made `made` seconds of audio (every stream's, together).
    pub(crate) fn observe(
        &mut self,
        seated: usize,
        took: Duration,
        audio_work: Duration,
        made: Duration,
    ) {
        let t = took.as_secs_f64();
        let keep = (-t / WINDOW.as_secs_f64()).exp();
        self.work = self.work * keep + audio_work.as_secs_f64().min(t);
        self.made = self.made * keep + made.as_secs_f64();
        if seated == 0 {
            return;
        }
        let (n, b) = (seated as f64, (t - audio_work.as_secs_f64()).max(0.0));
        self.s0 = self.s0 * keep + 1.0;
        self.sn = self.sn * keep + n;
        self.sb = self.sb * keep + b;
        self.snn = self.snn * keep + n * n;
        self.snb = self.snb * keep + n * b;
    }

    /// The round's own part with `seated` requests: the line through the measured rounds, or,
    /// over one size only, half of it fixed and half growing with the number seated.
    fn own(&self, seated: usize) -> Option<f64> {
        if self.s0 <= 0.0 {
            return None;
        }
        let n = seated as f64;
        let (mean_n, mean_b) = (self.sn / self.s0, self.sb / self.s0);
        let spread = self.snn / self.s0 - mean_n * mean_n;
        let slope = if spread >= 0.25 {
            ((self.snb / self.s0 - mean_n * mean_b) / spread).max(0.0)
        } else {
            mean_b / (2.0 * mean_n)
        };
        Some((mean_b + slope * (n - mean_n)).max(0.0))
    }

    /// Audio work per second of audio made; `None` before any audio.
    fn work_per_audio(&self) -> Option<f64> {
        (self.made > 0.0).then(|| self.work / self.made)
    }

    /// The mean round expected with `seated` requests: its own part and the audio work of a
    /// token of audio each; `None` before any round that made audio.
    pub(crate) fn predict(&self, seated: usize) -> Option<Duration> {
        let t =
            self.own(seated)? + self.work_per_audio()? * seated as f64 * TOKEN_AUDIO.as_secs_f64();
        Some(Duration::from_secs_f64(t))
    }

    /// The longest mean round that keeps streams played at `speed` fed.
    fn budget(speed: f32) -> Duration {
        TOKEN_AUDIO.mul_f64(UTILISATION / f64::from(speed.max(0.25)))
    }

    /// The mean round expected once `waiting` requests have joined the `seated` ones, up to
    /// `slots` in all and, when admission is `by_capacity`, up to what it seats (or those
    /// seated, where more). What the streams starting now are paced for: a crowd still in the
    /// queue slows the rounds they will see. `None` before any audio or with nobody held.
    pub(crate) fn expected_round(
        &self,
        seated: usize,
        waiting: usize,
        slots: usize,
        by_capacity: bool,
    ) -> Option<Duration> {
        let mut held = held(seated, waiting, slots);
        if by_capacity {
            held = held.min(self.streams(held)?.max(seated).max(1));
        }
        if held == 0 {
            return None;
        }
        self.predict(held)
    }

    /// The most live streams at speed 1, up to `limit`, whose forecast round stays within the
    /// budget: what admission by capacity seats (0 for a model too slow to keep even one fed,
    /// which it still serves one at a time); `None` before any round that made audio.
    pub(crate) fn streams(&self, limit: usize) -> Option<usize> {
        let budget = Self::budget(1.0);
        self.predict(1)?;
        Some(
            (1..=limit)
                .take_while(|&n| self.predict(n).is_some_and(|t| t <= budget))
                .count(),
        )
    }

    /// Whether one more request may join a batch of `seated` requests when its fastest stream
    /// plays at `speed`.
    pub(crate) fn admits(&self, seated: usize, speed: f32) -> bool {
        seated == 0
            || self
                .predict(seated + 1)
                .is_some_and(|t| t <= Self::budget(speed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1e3)
    }

    /// A fake batch of known costs seating from a queue of `queued` while its capacity admits:
    /// a round's own part costs `fixed_ms + per_ms` a seated request, and each request makes
    /// its audio a chunk of `chunk` tokens at a time (every `chunk`th round after it is
    /// seated), with `flow_ms` of audio work in that round. Returns the seated count after
    /// each round.
    fn run(
        fixed_ms: f64,
        per_ms: f64,
        flow_ms: f64,
        chunk: usize,
        queued: usize,
        rounds: usize,
        speed: f32,
    ) -> Vec<usize> {
        let mut c = Capacity::default();
        // rounds each seated request has decoded
        let mut seated: Vec<usize> = Vec::new();
        let mut waiting = queued;
        let mut sizes = Vec::new();
        for _ in 0..rounds {
            while waiting > 0 && c.admits(seated.len(), speed) {
                seated.push(0);
                waiting -= 1;
            }
            let own = fixed_ms + per_ms * seated.len() as f64;
            let (mut work, mut made) = (0.0, Duration::ZERO);
            for r in &mut seated {
                *r += 1;
                if *r % chunk == 0 {
                    work += flow_ms;
                    made += TOKEN_AUDIO * chunk as u32;
                }
            }
            c.observe(seated.len(), ms(own + work), ms(work), made);
            sizes.push(seated.len());
        }
        sizes
    }

    #[test]
    fn a_crowd_is_seated_up_to_what_keeps_pace() {
        // 2.5 ms + 1 ms a request: 24 ms rounds (60 % of a token) hold 21 requests
        let sizes = run(2.5, 1.0, 0.0, 1, 64, 100, 1.0);
        assert_eq!(*sizes.last().unwrap(), 21);
        assert!(sizes.iter().all(|&n| n <= 21), "{sizes:?}");
        // one, then 12 (one size measured, 3.5 ms: half of it taken to grow with the number
        // seated), then the line through both sizes
        assert_eq!(&sizes[..3], &[1, 12, 21], "{sizes:?}");
    }

    #[test]
    fn a_crowd_s_first_rounds_are_not_read_as_capacity() {
        // decoding is cheap (2 ms + 0.1 ms a request); every 10th round of a request makes its
        // chunk of 400 ms with 10 ms of flow work: a mean round of 2 + 1.1 ms a request, 20
        // requests in 24 ms. A crowd's first rounds carry none of its chunks' work: a line of
        // round times alone read them as room for the whole crowd.
        let sizes = run(2.0, 0.1, 10.0, 10, 64, 300, 1.0);
        assert!(sizes.iter().all(|&n| n <= 20), "{sizes:?}");
        assert_eq!(*sizes.last().unwrap(), 20);
        // nobody joins before the first audio is made; then 11 (the fixed part not yet known)
        assert!(sizes[..10].iter().all(|&n| n == 1), "{sizes:?}");
        assert_eq!(sizes[10], 11, "{sizes:?}");
    }

    #[test]
    fn a_faster_speed_needs_faster_rounds() {
        // at speed 2 a token is 20 ms of audio: 12 ms rounds hold 9 requests
        let sizes = run(2.5, 1.0, 0.0, 1, 64, 100, 2.0);
        assert_eq!(*sizes.last().unwrap(), 9);
        assert!(sizes.iter().all(|&n| n <= 9), "{sizes:?}");
    }

    #[test]
    fn a_model_too_slow_for_one_stream_still_serves_one_at_a_time() {
        let sizes = run(50.0, 10.0, 0.0, 1, 4, 100, 1.0);
        assert!(sizes.iter().all(|&n| n == 1), "{sizes:?}");
        let mut c = Capacity::default();
        c.observe(1, ms(60.0), Duration::ZERO, ms(40.0));
        assert_eq!(c.streams(4), Some(0), "not even one stream is kept fed");
    }

    #[test]
    fn nothing_joins_a_batch_that_has_made_no_audio() {
        let mut c = Capacity::default();
        assert!(c.admits(0, 1.0), "an empty batch takes the next request");
        assert!(!c.admits(1, 1.0));
        c.observe(1, ms(5.0), Duration::ZERO, Duration::ZERO);
        assert_eq!(c.predict(2), None);
        assert!(!c.admits(1, 1.0));
        assert_eq!(c.expected_round(1, 10, 64, false), None);
    }

    #[test]
    fn the_audio_work_counts_per_second_of_audio() {
        let mut c = Capacity::default();
        // 8 requests: 6 ms of their own and 4 ms of flow work making 320 ms a round
        for _ in 0..50 {
            c.observe(8, ms(10.0), ms(4.0), ms(320.0));
        }
        let at = |n| {
            c.predict(n)
                .map(|d| d.as_secs_f64() * 1e3)
                .unwrap_or(f64::NAN)
        };
        // 12.5 ms of work a second of audio: 4 ms at 8, 8 ms at 16, whose own part is taken
        // to be half fixed: 3 + 0.375 x 16 ms
        assert!((at(8) - 10.0).abs() < 1e-9, "{}", at(8));
        assert!((at(16) - 17.0).abs() < 1e-9, "{}", at(16));
    }

    #[test]
    fn a_crowd_in_the_queue_is_expected_to_slow_the_rounds() {
        let mut c = Capacity::default();
        assert_eq!(c.expected_round(4, 60, 64, false), None);
        // rounds of 4 + 2n ms, audio made and no audio work: the line alone
        for n in [1, 2, 4, 8, 1, 2, 4, 8] {
            c.observe(n, ms(4.0 + 2.0 * n as f64), Duration::ZERO, ms(40.0));
        }
        let at = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 1e3).round() as u64);
        // 4 seated and 60 queued on 64 slots: the round of 64 (4 + 2 x 64 ms)
        assert_eq!(at(c.expected_round(4, 60, 64, false)), Some(132));
        // the queue beyond the slots waits for a later batch
        assert_eq!(at(c.expected_round(4, 200, 64, false)), Some(132));
        // admission by capacity seats 10 (24 ms): their round
        assert_eq!(at(c.expected_round(4, 60, 64, true)), Some(24));
        // nobody queued: the round of those seated
        assert_eq!(at(c.expected_round(5, 0, 64, false)), Some(14));
        // more seated than slots (a batch that grew its slots), or than admission would seat
        // now: those seated
        assert_eq!(at(c.expected_round(10, 5, 8, false)), Some(24));
        assert_eq!(at(c.expected_round(16, 5, 64, true)), Some(36));
        assert_eq!(c.expected_round(0, 0, 64, false), None);
        // the streams it keeps fed: 10 (24 ms), fewer where the slots are fewer
        assert_eq!(c.streams(64), Some(10));
        assert_eq!(c.streams(6), Some(6));
        assert_eq!(Capacity::default().streams(64), None);
    }

    #[test]
    fn the_costs_weigh_recent_batch_time_most() {
        let mut c = Capacity::default();
        // 4 s of rounds of 10 ms making 400 ms each with 4 ms of work (10 ms a second of
        // audio), then 2 s (one window) with 8 ms of work (20 ms a second)
        for _ in 0..400 {
            c.observe(10, ms(10.0), ms(4.0), ms(400.0));
        }
        let w = |c: &Capacity| c.work_per_audio().unwrap() * 1e3;
        assert!((w(&c) - 10.0).abs() < 1e-9, "{}", w(&c));
        for _ in 0..200 {
            c.observe(10, ms(10.0), ms(8.0), ms(400.0));
        }
        // weights: the last 2 s 1 - 1/e, the 4 s before (1 - e^-2) / e
        let (new, old) = (1.0 - (-1f64).exp(), (1.0 - (-2f64).exp()) * (-1f64).exp());
        let want = (20.0 * new + 10.0 * old) / (new + old);
        assert!((w(&c) - want).abs() < 0.05, "{} against {want}", w(&c));
    }
}
