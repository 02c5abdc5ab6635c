//! A model's admission count ([`Admission`]): how many of its requests are admitted (waiting
//! in its queue or being generated), bounded, and the pace at which they leave
//! ([`Throughput`]), which a refusal turns into the queue's expected wait for `Retry-After`.
//! A request holds a [`Slot`] from its admission until it is finished or dropped.
use crate::queue_wait::{self, Throughput};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct State {
    admitted: usize,
    throughput: Throughput,
}

/// A model's admitted requests and the pace at which they leave.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    state: Mutex<State>,
}

/// A request that was not admitted: the queue was full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full {
    /// The `Retry-After` seconds: the queue's expected wait (see [`queue_wait::retry_after`]).
    pub retry_after: u64,
}

impl Admission {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Requests admitted now (waiting or being generated).
    #[cfg(test)]
    fn admitted(&self) -> usize {
        self.with(|s| s.admitted)
    }

    /// How long the requests admitted now need at the measured pace (unrounded, unclamped);
    /// `None` before anything has been measured.
    pub(crate) fn expected_wait(&self) -> Option<Duration> {
        self.with(|s| s.throughput.expected_wait(s.admitted))
    }

    /// The queue's expected wait now as `Retry-After` seconds, `floor` at least (and the
    /// answer before anything has been measured).
    #[cfg(test)]
    fn retry_after(&self, floor: u64) -> u64 {
        self.with(|s| queue_wait::retry_after(s.throughput.expected_wait(s.admitted), floor))
    }
}

/// One unit of a model's admission count: taken at submission, given back on drop.
#[derive(Debug)]
pub(crate) struct Slot(Arc<Admission>);

impl Slot {
    /// Takes a slot when fewer than `limit` are taken; otherwise says how long the queue
    /// expects to need (`Retry-After` seconds, `floor` at least).
    pub(crate) fn try_take(
        admission: &Arc<Admission>,
        limit: usize,
        floor: u64,
    ) -> Result<Self, Full> {
        admission.with(|s| {
            if s.admitted >= limit {
                let wait = s.throughput.expected_wait(s.admitted);
                return Err(Full {
                    retry_after: queue_wait::retry_after(wait, floor),
                });
            }
            if s.admitted == 0 {
                s.throughput.busy_from(Instant::now());
            }
            s.admitted += 1;
            Ok(Self(admission.clone()))
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.with(|s| {
            s.admitted = s.admitted.saturating_sub(1);
            s.throughput.left(Instant::now(), s.admitted == 0);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_a_refusal_reports_the_measured_wait() {
        let a = Arc::new(Admission::default());
        let first = Slot::try_take(&a, 2, 1).unwrap();
        let second = Slot::try_take(&a, 2, 1).unwrap();
        assert_eq!(a.admitted(), 2);
        // nothing has left yet: the configured value
        assert_eq!(Slot::try_take(&a, 2, 3).unwrap_err().retry_after, 3);
        std::thread::sleep(Duration::from_millis(300));
        drop(first);
        drop(second);
        assert_eq!(a.admitted(), 0);
        // two left after ~0.3 s busy: ~6.7 per second; 40 ahead need ~6 s
        let slots: Vec<_> = (0..40)
            .map(|_| Slot::try_take(&a, 40, 1).unwrap())
            .collect();
        let r = Slot::try_take(&a, 40, 1).unwrap_err().retry_after;
        assert!((6..=12).contains(&r), "{r}");
        assert_eq!(a.retry_after(1), r);
        let wait = a.expected_wait().unwrap().as_secs_f64();
        assert!(wait > 5.0 && wait <= r as f64, "{wait}");
        drop(slots);
        assert_eq!(a.admitted(), 0);
    }
}
