//! Prometheus metrics in the text exposition format: requests by status, requests refused
//! by reason, speech latency and time-to-first-audio histograms, audio and generation
//! seconds (their ratio is the real-time factor), speech cut at the token cap, queue depth,
//! each model's queue's expected wait, jobs running, each worker's health and the jobs that
//! panicked, the process's resident memory and each GPU's memory.
use crate::refusal::Refusal;
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
    connections_refused: u64,
    refused: [u64; Refusal::ALL.len()],
    truncated: u64,
}

/// What `/metrics` reads at each scrape.
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    /// Requests waiting for a worker.
    pub queue_depth: usize,
    /// Requests being generated.
    pub running: usize,
    /// Per model (its API name), how long the requests admitted for it need at the pace
    /// measured, in seconds; models not measured yet are left out.
    pub expected_waits: Vec<(&'static str, f64)>,
    /// The process's resident set, when the platform tells.
    pub resident_bytes: Option<u64>,
    /// Used and total memory of the devices that report it, by label.
    pub devices: Vec<(String, chatterbox_pipeline::DeviceMemory)>,
    /// Each worker's device label and, when it has stopped serving, why (the
    /// `chatterbox_worker_fault_info` error: a sticky CUDA error's name, or `load_failed`).
    pub workers: Vec<(String, Option<&'static str>)>,
    /// Jobs (and model loaders) that panicked on a worker.
    pub panics: u64,
    /// Per worker (index, device label) and batched model (its API name), the live streams
    /// its measured costs keep fed; pairs not measured yet are left out.
    pub batch_capacity: Vec<(usize, String, &'static str, usize)>,
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

    /// A connection was refused for the connection limit (answered 503 without reaching the
    /// router, so not in the responses by status; counted as a refusal too).
    pub fn connection_refused(&self) {
        self.with(|m| {
            m.connections_refused += 1;
            m.refused[Refusal::TooManyConnections.index()] += 1;
        });
    }

    /// A request was turned away before any work, for `reason`.
    pub(crate) fn refused(&self, reason: Refusal) {
        self.with(|m| m.refused[reason.index()] += 1);
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

    /// A speech request's audio was cut at the token cap (`max_new_tokens`).
    pub fn speech_truncated(&self) {
        self.with(|m| m.truncated += 1);
    }

    /// The text exposition, with the gauges read now.
    pub(crate) fn render(&self, g: &Gauges) -> String {
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
            let _ = writeln!(
                out,
                "# HELP chatterbox_requests_refused_total Requests turned away before any work, \
                 by reason: queue_full (429, Retry-After the queue's expected wait), \
                 too_many_connections (503, before the router), draining, loading and \
                 device_failed (503).\n\
                 # TYPE chatterbox_requests_refused_total counter"
            );
            for (r, n) in Refusal::ALL.iter().zip(m.refused) {
                let _ = writeln!(
                    out,
                    "chatterbox_requests_refused_total{{reason=\"{}\"}} {n}",
                    r.name()
                );
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
            let _ = writeln!(
                out,
                "# HELP chatterbox_connections_refused_total Connections refused (503) for the \
                 connection limit.\n\
                 # TYPE chatterbox_connections_refused_total counter\n\
                 chatterbox_connections_refused_total {}",
                m.connections_refused
            );
            let _ = writeln!(
                out,
                "# HELP chatterbox_speech_truncated_total Speech requests served whose speech was \
                 cut at the token cap (max_new_tokens) in some sentence.\n\
                 # TYPE chatterbox_speech_truncated_total counter\n\
                 chatterbox_speech_truncated_total {}",
                m.truncated
            );
        });
        let _ = writeln!(
            out,
            "# HELP chatterbox_queue_depth Requests waiting for a worker.\n\
             # TYPE chatterbox_queue_depth gauge\nchatterbox_queue_depth {}\n\
             # HELP chatterbox_jobs_running Requests being generated.\n\
             # TYPE chatterbox_jobs_running gauge\nchatterbox_jobs_running {}",
            g.queue_depth, g.running
        );
        let _ = writeln!(
            out,
            "# HELP chatterbox_queue_expected_wait_seconds How long the requests admitted for a \
             model (waiting and being generated) need at the pace its requests have been leaving; \
             a 429's Retry-After is this rounded up, at least the configured value (1 s) and at \
             most 60 s (absent before any request has left).\n\
             # TYPE chatterbox_queue_expected_wait_seconds gauge"
        );
        for (model, secs) in &g.expected_waits {
            let _ = writeln!(
                out,
                "chatterbox_queue_expected_wait_seconds{{model=\"{}\"}} {secs}",
                escape(model)
            );
        }
        let _ = writeln!(
            out,
            "# HELP chatterbox_worker_healthy Whether a device worker serves its models (0: its \
             device failed, or its models did not load; chatterbox_worker_fault_info says why).\n\
             # TYPE chatterbox_worker_healthy gauge"
        );
        for (i, (label, fault)) in g.workers.iter().enumerate() {
            let _ = writeln!(
                out,
                "chatterbox_worker_healthy{{worker=\"{i}\",device=\"{}\"}} {}",
                escape(label),
                u8::from(fault.is_none())
            );
        }
        let _ = writeln!(
            out,
            "# HELP chatterbox_worker_fault_info Why a worker stopped serving: the CUDA error that \
             left its device unusable (restart the server), or load_failed.\n\
             # TYPE chatterbox_worker_fault_info gauge"
        );
        for (i, (label, fault)) in g.workers.iter().enumerate() {
            if let Some(error) = fault {
                let _ = writeln!(
                    out,
                    "chatterbox_worker_fault_info{{worker=\"{i}\",device=\"{}\",error=\"{}\"}} 1",
                    escape(label),
                    escape(error)
                );
            }
        }
        if !g.batch_capacity.is_empty() {
            let _ = writeln!(
                out,
                "# HELP chatterbox_batch_capacity_streams Live streams at speed 1 that a worker's \
                 batch of a model keeps fed, by its measured costs (a forecast round within 60 % \
                 of a token's audio): admission by capacity seats up to this many, up to the \
                 slots, and queues the rest.\n\
                 # TYPE chatterbox_batch_capacity_streams gauge"
            );
            for (i, label, model, n) in &g.batch_capacity {
                let _ = writeln!(
                    out,
                    "chatterbox_batch_capacity_streams{{worker=\"{i}\",device=\"{}\",\
                     model=\"{}\"}} {n}",
                    escape(label),
                    escape(model)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP chatterbox_worker_panics_total Jobs that panicked on a worker (each answered \
             with an error; the worker goes on).\n\
             # TYPE chatterbox_worker_panics_total counter\n\
             chatterbox_worker_panics_total {}",
            g.panics
        );
        if let Some(rss) = g.resident_bytes {
            let _ = writeln!(
                out,
                "# HELP process_resident_memory_bytes Resident memory size in bytes.\n\
                 # TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {rss}"
            );
        }
        if !g.devices.is_empty() {
            for (name, help, pick) in [
                (
                    "chatterbox_device_memory_used_bytes",
                    "Memory in use on the device, by every process (total - free).",
                    (|m: &chatterbox_pipeline::DeviceMemory| m.used_bytes) as fn(&_) -> u64,
                ),
                (
                    "chatterbox_device_memory_total_bytes",
                    "The device's memory.",
                    |m: &chatterbox_pipeline::DeviceMemory| m.total_bytes,
                ),
            ] {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
                for (label, m) in &g.devices {
                    let _ = writeln!(out, "{name}{{device=\"{}\"}} {}", escape(label), pick(m));
                }
            }
        }
        out
    }
}

/// A label value with the exposition format's escapes.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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
        m.connection_refused();
        m.refused(Refusal::QueueFull);
        m.refused(Refusal::QueueFull);
        m.first_audio(Duration::from_millis(30));
        m.speech_done(Duration::from_secs(2), 1.5);
        m.speech_truncated();
        let t = m.render(&Gauges {
            queue_depth: 3,
            running: 1,
            expected_waits: vec![("chatterbox-turbo", 5.5)],
            resident_bytes: Some(123_456),
            devices: vec![(
                "cuda:0".into(),
                chatterbox_pipeline::DeviceMemory {
                    used_bytes: 5,
                    total_bytes: 80,
                },
            )],
            workers: vec![
                ("cuda:0".into(), Some("CUDA_ERROR_ILLEGAL_ADDRESS")),
                ("cuda:1".into(), None),
            ],
            panics: 2,
            batch_capacity: vec![(1, "cuda:1".into(), "chatterbox", 14)],
        });
        assert!(t.contains("chatterbox_requests_total{status=\"200\"} 2"));
        assert!(t.contains("chatterbox_requests_total{status=\"429\"} 1"));
        assert!(t.contains("chatterbox_speech_time_to_first_audio_seconds_bucket{le=\"0.05\"} 1"));
        assert!(t.contains("chatterbox_speech_time_to_first_audio_seconds_bucket{le=\"0.025\"} 0"));
        assert!(t.contains("chatterbox_queue_depth 3"));
        assert!(t.contains("\nchatterbox_connections_refused_total 1\n"));
        assert!(
            t.contains("\nchatterbox_requests_refused_total{reason=\"too_many_connections\"} 1\n")
        );
        assert!(t.contains("\nchatterbox_requests_refused_total{reason=\"queue_full\"} 2\n"));
        assert!(t.contains("\nchatterbox_requests_refused_total{reason=\"draining\"} 0\n"));
        assert_eq!(t.matches("chatterbox_requests_refused_total{").count(), 5);
        assert!(t.contains("chatterbox_audio_seconds_total 1.5"));
        assert!(t.contains("chatterbox_jobs_running 1\n"));
        assert!(t.contains(
            "\nchatterbox_queue_expected_wait_seconds{model=\"chatterbox-turbo\"} 5.5\n"
        ));
        assert_eq!(
            t.matches("chatterbox_queue_expected_wait_seconds{").count(),
            1
        );
        assert!(t.contains("process_resident_memory_bytes 123456\n"));
        assert!(t.contains("chatterbox_device_memory_used_bytes{device=\"cuda:0\"} 5\n"));
        assert!(t.contains("chatterbox_device_memory_total_bytes{device=\"cuda:0\"} 80\n"));
        assert!(t.contains("\nchatterbox_speech_truncated_total 1\n"));
        assert!(t.contains("\nchatterbox_worker_healthy{worker=\"0\",device=\"cuda:0\"} 0\n"));
        assert!(t.contains("\nchatterbox_worker_healthy{worker=\"1\",device=\"cuda:1\"} 1\n"));
        assert!(t.contains(
            "\nchatterbox_worker_fault_info{worker=\"0\",device=\"cuda:0\",\
             error=\"CUDA_ERROR_ILLEGAL_ADDRESS\"} 1\n"
        ));
        assert_eq!(t.matches("chatterbox_worker_fault_info{").count(), 1);
        assert!(t.contains("\nchatterbox_worker_panics_total 2\n"));
        assert!(t.contains(
            "\nchatterbox_batch_capacity_streams{worker=\"1\",device=\"cuda:1\",\
             model=\"chatterbox\"} 14\n"
        ));
        assert_eq!(t.matches("chatterbox_batch_capacity_streams{").count(), 1);
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
