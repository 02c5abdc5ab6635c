//! Refusals: requests turned away before any work, each for a [`Refusal`] reason (the
//! `reason` label of `chatterbox_requests_refused_total`), and [`RefusalLog`], which warns
//! about them without flooding the log when many come at once.
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Why a request was turned away before any work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Refusal {
    /// 429: the model's queue was full.
    QueueFull,
    /// 503: more connections were open than `max_connections`.
    TooManyConnections,
    /// 503: the server is shutting down.
    Draining,
    /// 503: the models are still loading.
    Loading,
    /// 503: every device holding the model has failed.
    DeviceFailed,
}

impl Refusal {
    /// Every reason, in the order `/metrics` lists them.
    pub(crate) const ALL: [Self; 5] = [
        Self::QueueFull,
        Self::TooManyConnections,
        Self::Draining,
        Self::Loading,
        Self::DeviceFailed,
    ];

    /// The `reason` label.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::TooManyConnections => "too_many_connections",
            Self::Draining => "draining",
            Self::Loading => "loading",
            Self::DeviceFailed => "device_failed",
        }
    }

    /// The reason's place in [`Refusal::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The shortest time between two warnings for the same reason; the refusals in between are
/// logged at debug and counted in the next warning (`suppressed`).
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Default, Clone, Copy)]
struct Since {
    last: Option<Instant>,
    suppressed: u64,
}

/// A refused request, as its log line names it (never its text).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused<'a> {
    /// The request id.
    pub request: u64,
    /// The method.
    pub method: &'a str,
    /// The path (clipped for the log).
    pub path: &'a str,
    /// The status answered (429 or 503).
    pub status: u16,
    /// The `Retry-After` seconds given.
    pub retry_after: Option<u64>,
}

/// Warns about each refusal at most every [`WARN_EVERY`] per reason.
#[derive(Debug, Default)]
pub(crate) struct RefusalLog {
    by_reason: Mutex<[Since; Refusal::ALL.len()]>,
}

impl RefusalLog {
    /// Logs the refusal of `r` for `reason`, with the `Retry-After` it was given: a warning,
    /// or a debug line when a warning for the reason was logged less than [`WARN_EVERY`]
    /// ago. Returns, when it warned, how many refusals for the reason it had logged at debug
    /// since the last warning.
    pub(crate) fn refused(&self, reason: Refusal, r: Refused<'_>) -> Option<u64> {
        self.refused_at(reason, r, Instant::now())
    }

    fn refused_at(&self, reason: Refusal, r: Refused<'_>, now: Instant) -> Option<u64> {
        let suppressed = {
            let mut all = self
                .by_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let s = &mut all[reason.index()];
            if s.last
                .is_some_and(|t| now.saturating_duration_since(t) < WARN_EVERY)
            {
                s.suppressed += 1;
                None
            } else {
                let n = s.suppressed;
                *s = Since {
                    last: Some(now),
                    suppressed: 0,
                };
                Some(n)
            }
        };
        let reason = reason.name();
        let Refused {
            request,
            method,
            path,
            status,
            retry_after,
        } = r;
        match suppressed {
            Some(suppressed) => tracing::warn!(
                request,
                method,
                path,
                status,
                reason,
                retry_after,
                suppressed,
                "request refused (suppressed: refusals for the same reason logged at debug \
                 since the last warning)"
            ),
            None => tracing::debug!(
                request,
                method,
                path,
                status,
                reason,
                retry_after,
                "request refused"
            ),
        }
        suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_metric_labels_in_order() {
        let names: Vec<_> = Refusal::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            [
                "queue_full",
                "too_many_connections",
                "draining",
                "loading",
                "device_failed"
            ]
        );
        for (i, r) in Refusal::ALL.into_iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }

    #[test]
    fn a_flood_warns_once_a_second_per_reason() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let r = |request, retry_after| Refused {
            request,
            method: "POST",
            path: "/v1/audio/speech",
            status: 429,
            retry_after: Some(retry_after),
        };
        let full = Refusal::QueueFull;
        assert_eq!(log.refused_at(full, r(1, 6), at(0)), Some(0));
        let warned = (1..100)
            .filter_map(|i| log.refused_at(full, r(i, 6), at(i * 5)))
            .count();
        assert_eq!(warned, 0);
        // another reason has its own warning
        assert_eq!(
            log.refused_at(Refusal::Draining, r(200, 1), at(500)),
            Some(0)
        );
        // a second on: the next warns, and counts the 99 in between
        assert_eq!(log.refused_at(full, r(300, 7), at(1000)), Some(99));
        assert_eq!(log.refused_at(full, r(301, 7), at(1001)), None);
    }
}
