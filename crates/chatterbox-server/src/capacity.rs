//! Admission by capacity (issue 43): a batched model seats a new request only while its
//! measured pace says every seated stream still plays without a gap.
//!
//! A round of a batch ([`RequestBatch::step`](crate::RequestBatch::step)) decodes one speech
//! token for every seated request: 40 ms of audio at T3's 25 tokens a second (less at a
//! `speed` above 1). Streams keep up with their listeners while the mean round, its share of
//! the flow and HiFT work included, takes less than that; [`Capacity`] learns the mean round
//! time as a line in the number of seated requests (least squares over the recent rounds,
//! older rounds weighing less) and seats one more request only while the line, at one more,
//! stays within [`UTILISATION`] of the token's audio. Until it has seen rounds at several
//! sizes it assumes no fixed cost (the time per request at the sizes seen), which is the
//! cautious reading. It never seats more than twice the largest batch it has measured for
//! [`PROVEN_ROUNDS`] rounds in a row (a slow start: the rounds of a batch's first tokens carry
//! none of the flow and HiFT work that its chunks bring a few rounds later, so a crowd that
//! arrives at once is seated as fast as the measurements allow, not all on the pace of those
//! cheap first rounds). A batch with nobody in it always takes the next request.
use std::collections::VecDeque;
use std::time::Duration;

/// The audio one round makes per request at speed 1: one speech token (25 a second).
pub(crate) const TOKEN_AUDIO: Duration = Duration::from_millis(40);

/// The share of [`TOKEN_AUDIO`] the mean round may take: the rest absorbs the rounds that
/// cost more than the mean (chunk boundaries, admissions) and the error of the estimate.
pub(crate) const UTILISATION: f64 = 0.75;

/// How much an older round weighs against the next one (about 50 rounds, two seconds of
/// audio, make up most of the estimate).
const DECAY: f64 = 0.98;

/// The rounds a batch size must be held to count as measured: one second of audio, by which
/// each stream that joined has made its first chunk.
pub(crate) const PROVEN_ROUNDS: usize = 25;

/// The requests a batch will hold once `waiting` ones have joined the `seated` ones: up to
/// `slots` in all (the rest wait for a later batch), or those seated where more.
pub(crate) fn held(seated: usize, waiting: usize, slots: usize) -> usize {
    (seated + waiting).min(slots.max(seated))
}

/// A batch's measured pace and the admissions it allows.
#[derive(Debug, Clone, Default)]
pub(crate) struct Capacity {
    /// Exponentially weighted sums over rounds of 1, n, t, n², n·t (n: requests seated,
    /// t: the round's seconds).
    s0: f64,
    sn: f64,
    st: f64,
    snn: f64,
    snt: f64,
    /// The sizes of the last [`PROVEN_ROUNDS`] rounds.
    recent: VecDeque<usize>,
    /// The largest size held for [`PROVEN_ROUNDS`] rounds in a row.
    proven: usize,
}

impl Capacity {
    /// Records a round of `seated` requests that took `took`.
    pub(crate) fn observe(&mut self, seated: usize, took: Duration) {
        if seated == 0 {
            return;
        }
        let (n, t) = (seated as f64, took.as_secs_f64());
        self.s0 = self.s0 * DECAY + 1.0;
        self.sn = self.sn * DECAY + n;
        self.st = self.st * DECAY + t;
        self.snn = self.snn * DECAY + n * n;
        self.snt = self.snt * DECAY + n * t;
        if self.recent.len() == PROVEN_ROUNDS {
            self.recent.pop_front();
        }
        self.recent.push_back(seated);
        if self.recent.len() == PROVEN_ROUNDS {
            let held = self.recent.iter().copied().min().unwrap_or(0);
            self.proven = self.proven.max(held);
        }
    }

    /// The mean round time expected with `seated` requests; `None` before any round.
    pub(crate) fn predict(&self, seated: usize) -> Option<Duration> {
        if self.s0 <= 0.0 {
            return None;
        }
        let n = seated as f64;
        let mean_n = self.sn / self.s0;
        let mean_t = self.st / self.s0;
        // the time per request at the sizes seen: no fixed cost, the cautious reading
        let proportional = mean_t * n / mean_n;
        let spread = self.snn / self.s0 - mean_n * mean_n;
        let t = if spread >= 0.25 {
            let slope = (self.snt / self.s0 - mean_n * mean_t) / spread;
            if slope > 0.0 {
                mean_t + slope * (n - mean_n)
            } else {
                proportional
            }
        } else {
            proportional
        };
        Some(Duration::from_secs_f64(t.max(0.0)))
    }

    /// The mean round expected once `waiting` requests have joined the `seated` ones, up to
    /// `slots` in all (what the streams starting now are paced for: a crowd still in the queue
    /// slows the rounds they will see); `None` before any round or with nobody held.
    pub(crate) fn expected_round(
        &self,
        seated: usize,
        waiting: usize,
        slots: usize,
    ) -> Option<Duration> {
        let held = held(seated, waiting, slots);
        if held == 0 {
            return None;
        }
        self.predict(held)
    }

    /// The longest mean round that keeps streams played at `speed` fed.
    pub(crate) fn budget(speed: f32) -> Duration {
        TOKEN_AUDIO.mul_f64(UTILISATION / f64::from(speed.max(0.25)))
    }

    /// Whether one more request may join a batch of `seated` requests when its fastest stream
    /// plays at `speed`.
    pub(crate) fn admits(&self, seated: usize, speed: f32) -> bool {
        if seated == 0 {
            return true;
        }
        if seated + 1 > 2 * self.proven {
            return false;
        }
        self.predict(seated + 1)
            .is_some_and(|t| t <= Self::budget(speed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch whose round costs `fixed + per * n` (every `chunk_every`th round `extra` more:
    /// the chunks' flow and HiFT calls), seating from a queue of `queued` while its capacity
    /// admits: the seated count after each round.
    fn run(
        fixed_ms: f64,
        per_ms: f64,
        extra_ms: f64,
        chunk_every: usize,
        queued: usize,
        rounds: usize,
        speed: f32,
    ) -> Vec<usize> {
        let mut c = Capacity::default();
        let (mut seated, mut waiting) = (0, queued);
        let mut sizes = Vec::new();
        for r in 0..rounds {
            while waiting > 0 && c.admits(seated, speed) {
                seated += 1;
                waiting -= 1;
            }
            let mut ms = fixed_ms + per_ms * seated as f64;
            if chunk_every > 0 && r % chunk_every == 0 {
                ms += extra_ms * seated as f64;
            }
            c.observe(seated, Duration::from_secs_f64(ms / 1e3));
            sizes.push(seated);
        }
        sizes
    }

    #[test]
    fn a_crowd_is_seated_by_doubling_up_to_what_keeps_pace() {
        // 2.5 ms + 1 ms a request: 30 ms (75 % of a token) holds 27 requests
        let sizes = run(2.5, 1.0, 0.0, 0, 64, 200, 1.0);
        let steps: Vec<usize> = sizes.iter().step_by(PROVEN_ROUNDS).copied().collect();
        assert_eq!(&steps[..6], &[1, 2, 4, 8, 16, 27]);
        assert_eq!(*sizes.last().unwrap(), 27);
        assert!(sizes.iter().all(|&n| n <= 27), "{sizes:?}");
    }

    #[test]
    fn the_mean_round_counts_the_chunk_rounds_too() {
        // 1 ms a request every round, 5 ms a request more every 5th: a mean of 2 ms a
        // request, 15 requests in 30 ms
        let sizes = run(0.0, 1.0, 5.0, 5, 64, 300, 1.0);
        let last = *sizes.last().unwrap();
        assert!((13..=15).contains(&last), "{sizes:?}");
        assert!(sizes.iter().all(|&n| n <= 15), "{sizes:?}");
    }

    #[test]
    fn a_faster_speed_needs_faster_rounds() {
        // at speed 2 a token is 20 ms of audio: 15 ms holds 12 requests
        let sizes = run(2.5, 1.0, 0.0, 0, 64, 200, 2.0);
        assert_eq!(*sizes.last().unwrap(), 12);
    }

    #[test]
    fn a_model_too_slow_for_one_stream_still_serves_one_at_a_time() {
        let sizes = run(50.0, 10.0, 0.0, 0, 4, 100, 1.0);
        assert!(sizes.iter().all(|&n| n == 1), "{sizes:?}");
    }

    #[test]
    fn a_crowd_in_the_queue_is_expected_to_slow_the_rounds() {
        let mut c = Capacity::default();
        assert_eq!(c.expected_round(4, 60, 64), None);
        for n in [1, 2, 4, 8, 1, 2, 4, 8] {
            c.observe(n, Duration::from_secs_f64((4.0 + 2.0 * n as f64) / 1e3));
        }
        let ms = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 1e3).round() as u64);
        // 4 seated and 60 queued on 64 slots: the round of 64 (4 + 2 x 64 ms)
        assert_eq!(ms(c.expected_round(4, 60, 64)), Some(132));
        // the queue beyond the slots waits for a later batch
        assert_eq!(ms(c.expected_round(4, 200, 64)), Some(132));
        // nobody queued: the round of those seated
        assert_eq!(ms(c.expected_round(5, 0, 64)), Some(14));
        // more seated than slots (a batch that grew its slots): those seated
        assert_eq!(ms(c.expected_round(10, 5, 8)), Some(24));
        assert_eq!(c.expected_round(0, 0, 64), None);
    }

    #[test]
    fn the_estimate_follows_a_line_once_sizes_vary() {
        let mut c = Capacity::default();
        assert_eq!(c.predict(3), None);
        for n in [1, 2, 4, 8, 1, 2, 4, 8] {
            c.observe(n, Duration::from_secs_f64((4.0 + 2.0 * n as f64) / 1e3));
        }
        let t = c.predict(16).unwrap().as_secs_f64() * 1e3;
        assert!((t - 36.0).abs() < 1e-6, "{t}");
        // one size only: no fixed cost assumed (8 ms at 2 gives 4 ms a request)
        let mut c = Capacity::default();
        c.observe(2, Duration::from_millis(8));
        let t = c.predict(5).unwrap().as_secs_f64() * 1e3;
        assert!((t - 20.0).abs() < 1e-6, "{t}");
        assert!(c.admits(0, 1.0), "an empty batch takes the next request");
        assert!(
            !c.admits(2, 1.0),
            "size 2 is not measured for long enough yet"
        );
        for _ in 1..PROVEN_ROUNDS {
            c.observe(2, Duration::from_millis(8));
        }
        assert!(c.admits(2, 1.0) && c.admits(3, 1.0));
        assert!(!c.admits(4, 1.0), "at most twice the size measured");
    }
}
