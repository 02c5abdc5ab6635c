//! Prometheus metrics in the text exposition format: requests by status, speech latency and
//! time-to-first-audio histograms, audio and generation seconds (their ratio is the real-time
//! factor), queue depth and jobs running.
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Histogram bucket bounds, seconds.
const BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// A histogram of durations.
#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (c, b) in self.counts.iter_mut().zip(BUCKETS) {
            if secs <= b {
                *c += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (c, b) in self.counts.iter().zip(BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.count);
    }
}

#[derive(Debug, Default)]
struct Inner {
    by_status: BTreeMap<u16, u64>,
    latency: Histogram,
    ttfb: Histogram,
    audio_secs: f64,
    generation_secs: f64,
}

/// The server's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A response with `status` was sent.
    pub fn request(&self, status: u16) {
        self.with(|m| *m.by_status.entry(status).or_default() += 1);
    }

    /// A speech request's first audio was ready `d` after it arrived.
    pub fn first_audio(&self, d: Duration) {
        self.with(|m| m.ttfb.observe(d.as_secs_f64()));
    }

    /// A speech request finished: `total` from arrival to its last byte, `audio` seconds of
    /// speech.
    pub fn speech_done(&self, total: Duration, audio_secs: f64) {
        self.with(|m| {
            m.latency.observe(total.as_secs_f64());
            m.audio_secs += audio_secs;
            m.generation_secs += total.as_secs_f64();
        });
    }

    /// The text exposition, with the engine's gauges.
    pub fn render(&self, queue_depth: usize, running: usize) -> String {
        let mut out = String::new();
        self.with(|m| {
            let _ = writeln!(
                out,
                "# HELP chatterbox_requests_total HTTP responses by status.\n\
                 # TYPE chatterbox_requests_total counter"
            );
            for (s, n) in &m.by_status {
                let _ = writeln!(out, "chatterbox_requests_total{{status=\"{s}\"}} {n}");
            }
            m.latency.render(
                "chatterbox_speech_duration_seconds",
                "Speech requests from arrival to the last byte.",
                &mut out,
            );
            m.ttfb.render(
                "chatterbox_speech_time_to_first_audio_seconds",
                "Speech requests from arrival to the first audio.",
                &mut out,
            );
            let _ = writeln!(
                out,
                "# HELP chatterbox_audio_seconds_total Seconds of speech served.\n\
                 # TYPE chatterbox_audio_seconds_total counter\n\
                 chatterbox_audio_seconds_total {}\n\
                 # HELP chatterbox_speech_seconds_total Wall seconds of completed speech requests \
                 (divided by chatterbox_audio_seconds_total: the real-time factor).\n\
                 # TYPE chatterbox_speech_seconds_total counter\n\
                 chatterbox_speech_seconds_total {}",
                m.audio_secs, m.generation_secs
            );
        });
        let _ = writeln!(
            out,
            "# HELP chatterbox_queue_depth Requests waiting for a worker.\n\
             # TYPE chatterbox_queue_depth gauge\nchatterbox_queue_depth {queue_depth}\n\
             # HELP chatterbox_jobs_running Requests being generated.\n\
             # TYPE chatterbox_jobs_running gauge\nchatterbox_jobs_running {running}"
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_buckets() {
        let m = Metrics::default();
        m.request(200);
        m.request(200);
        m.request(429);
        m.first_audio(Duration::from_millis(30));
        m.speech_done(Duration::from_secs(2), 1.5);
        let t = m.render(3, 1);
        assert!(t.contains("chatterbox_requests_total{status=\"200\"} 2"));
        assert!(t.contains("chatterbox_requests_total{status=\"429\"} 1"));
        assert!(t.contains("chatterbox_speech_time_to_first_audio_seconds_bucket{le=\"0.05\"} 1"));
        assert!(t.contains("chatterbox_speech_time_to_first_audio_seconds_bucket{le=\"0.025\"} 0"));
        assert!(t.contains("chatterbox_queue_depth 3"));
        assert!(t.contains("chatterbox_audio_seconds_total 1.5"));
    }
}
