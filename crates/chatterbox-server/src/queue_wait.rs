//! The expected wait of a model's queue, which a 429's `Retry-After` reports instead of a
//! constant: how long the server needs, at the pace it has recently kept, to finish the
//! requests it has already admitted for the model (those waiting and those being generated).
//! By then the queue has room again.
//!
//! The pace is measured online, per model: [`Throughput`] keeps the requests that left the
//! queue (finished, failed or abandoned: each frees its place) per *busy* second (a second in
//! which some request for the model was admitted), as two exponentially decayed sums, so
//! that the last [`MEMORY_SECS`] of busy time weigh most. Idle time is not counted: the
//! pace is what the server does when it has work, and a quiet night does not make it look
//! slow in the morning. A batch that finishes many requests at once counts them all at
//! the end of one interval, so bursts do not swing the ratio.
//!
//! Before anything has been measured (a fresh server whose first requests are still
//! running) there is no pace to go by, and [`retry_after`] falls back to the configured
//! value. The answer is rounded up to whole seconds (what `Retry-After` carries) and kept
//! within `floor..=`[`MAX_RETRY_AFTER_SECS`], where the floor is the configured value.
use std::time::{Duration, Instant};

/// Busy seconds over which the measured pace fades to `1/e` of its weight.
pub(crate) const MEMORY_SECS: f64 = 30.0;

/// The longest `Retry-After` given (unless the configured floor is longer): OpenAI's client
/// libraries honour a server's `Retry-After` up to 60 s (the Python package's older releases;
/// newer ones up to 120 s) and fall back to their own short back-off beyond it.
pub(crate) const MAX_RETRY_AFTER_SECS: u64 = 60;

/// Requests that left a model's queue per busy second, exponentially weighted.
#[derive(Debug, Default, Clone)]
pub(crate) struct Throughput {
    /// Requests that left, decayed.
    left: f64,
    /// Busy seconds, decayed alike.
    busy: f64,
    /// Where the busy time not yet counted starts: `Some` while some request is admitted.
    mark: Option<Instant>,
}

impl Throughput {
    /// A request was admitted at `now` into a queue that held none: busy time starts.
    pub(crate) fn busy_from(&mut self, now: Instant) {
        if self.mark.is_none() {
            self.mark = Some(now);
        }
    }

    /// A request left the queue at `now`; `idle` when it was the last one admitted (busy
    /// time stops until the next admission).
    pub(crate) fn left(&mut self, now: Instant, idle: bool) {
        let dt = self
            .mark
            .map_or(0.0, |m| now.saturating_duration_since(m).as_secs_f64());
        let keep = (-dt / MEMORY_SECS).exp();
        self.left = self.left * keep + 1.0;
        self.busy = self.busy * keep + dt;
        self.mark = (!idle).then_some(now);
    }

    /// Requests that leave per busy second; `None` until one has left after some busy time.
    pub(crate) fn rate(&self) -> Option<f64> {
        (self.busy > 0.0 && self.left > 0.0).then(|| self.left / self.busy)
    }

    /// How long the `ahead` requests admitted now need to leave at the measured pace;
    /// `None` before anything has been measured (a wait too long for a `Duration` is
    /// [`Duration::MAX`]).
    pub(crate) fn expected_wait(&self, ahead: usize) -> Option<Duration> {
        let secs = ahead as f64 / self.rate()?;
        Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
    }
}

/// The `Retry-After` seconds for an expected `wait`: rounded up, at least `floor` (the
/// configured value, also the answer when nothing has been measured) and at most
/// [`MAX_RETRY_AFTER_SECS`] (or `floor`, when that is longer).
pub(crate) fn retry_after(wait: Option<Duration>, floor: u64) -> u64 {
    let Some(wait) = wait else { return floor };
    let ceil = wait
        .as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0));
    ceil.clamp(floor, MAX_RETRY_AFTER_SECS.max(floor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn nothing_measured_falls_back_to_the_configured_value() {
        let mut t = Throughput::default();
        assert_eq!(t.rate(), None);
        assert_eq!(t.expected_wait(17), None);
        assert_eq!(retry_after(t.expected_wait(17), 1), 1);
        assert_eq!(retry_after(t.expected_wait(17), 5), 5);
        // busy, but nothing has left yet: still nothing measured
        t.busy_from(Instant::now());
        assert_eq!(retry_after(t.expected_wait(17), 3), 3);
        // a request that left without busy time (no mark) measures no pace
        let mut t = Throughput::default();
        t.left(Instant::now(), true);
        assert_eq!(t.rate(), None);
    }

    #[test]
    fn the_wait_scales_with_the_requests_ahead() {
        // one worker, one request at a time, each 2 s: 0.5 requests per busy second
        let t0 = Instant::now();
        let mut t = Throughput::default();
        t.busy_from(t0);
        for i in 1..=5 {
            t.left(t0 + secs(2.0 * i as f64), false);
        }
        let rate = t.rate().unwrap();
        assert!((rate - 0.5).abs() < 1e-9, "{rate}");
        assert_eq!(t.expected_wait(1), Some(secs(2.0)));
        assert_eq!(retry_after(t.expected_wait(1), 1), 2);
        assert_eq!(retry_after(t.expected_wait(3), 1), 6);
        assert_eq!(retry_after(t.expected_wait(17), 1), 34);
        // a fractional wait is rounded up
        assert_eq!(retry_after(Some(secs(6.01)), 1), 7);
        assert_eq!(retry_after(Some(secs(6.0)), 1), 6);
    }

    #[test]
    fn a_batch_that_finishes_together_counts_every_request() {
        // 16 requests seated together, all done after 4 s: 4 per busy second
        let t0 = Instant::now();
        let mut t = Throughput::default();
        t.busy_from(t0);
        for i in 0..16 {
            t.left(t0 + secs(4.0), i == 15);
        }
        let rate = t.rate().unwrap();
        assert!((rate - 4.0).abs() < 1e-9, "{rate}");
        assert_eq!(retry_after(t.expected_wait(17), 1), 5);
    }

    #[test]
    fn idle_time_is_not_counted_and_recent_pace_weighs_most() {
        let t0 = Instant::now();
        let mut t = Throughput::default();
        // 1 s per request, then an hour idle, then 1 s per request again
        t.busy_from(t0);
        t.left(t0 + secs(1.0), true);
        let t1 = t0 + secs(3600.0);
        t.busy_from(t1);
        t.left(t1 + secs(1.0), true);
        assert!((t.rate().unwrap() - 1.0).abs() < 1e-9);
        // the server slows to 10 s per request: after six (60 busy seconds, two memories)
        // the pace is 0.108 per second, 8 % above the new 0.1 (the old pace has faded to
        // e^-2 of its weight): two requests ahead need 18.6 s
        let mut now = t1 + secs(10.0);
        t.busy_from(now);
        for _ in 0..6 {
            now += secs(10.0);
            t.left(now, false);
        }
        let rate = t.rate().unwrap();
        assert!(rate > 0.107 && rate < 0.109, "{rate}");
        assert_eq!(retry_after(t.expected_wait(2), 1), 19);
    }

    #[test]
    fn the_answer_is_clamped() {
        assert_eq!(retry_after(Some(Duration::ZERO), 1), 1);
        assert_eq!(retry_after(Some(secs(0.2)), 1), 1);
        assert_eq!(retry_after(Some(secs(0.2)), 4), 4);
        assert_eq!(retry_after(Some(secs(59.5)), 1), 60);
        assert_eq!(retry_after(Some(secs(3600.0)), 1), MAX_RETRY_AFTER_SECS);
        assert_eq!(retry_after(Some(Duration::MAX), 1), MAX_RETRY_AFTER_SECS);
        // a configured floor above the ceiling wins
        assert_eq!(retry_after(Some(secs(3600.0)), 90), 90);
        assert_eq!(retry_after(None, 90), 90);
        // a pace so slow that the wait overflows a Duration: the longest answer, no panic
        let t0 = Instant::now();
        let mut t = Throughput::default();
        t.busy_from(t0);
        t.left(t0 + secs(1e9), false);
        assert_eq!(t.expected_wait(usize::MAX), Some(Duration::MAX));
        assert_eq!(
            retry_after(t.expected_wait(usize::MAX), 1),
            MAX_RETRY_AFTER_SECS
        );
    }
}
