//! Honest back-pressure over loopback (issue 43): a full queue answers 429 with a
//! `Retry-After` that is the queue's expected wait at the pace the server has kept (the
//! configured value before anything has finished), a client that waits that long is then
//! admitted, and every refusal is counted in `/metrics` by reason.
//!
//! A fake model of known pace (8 chunks of 50 ms: 0.4 s a request, one at a time) behind a
//! queue of 7: 8 requests admitted at once need about 3.2 s. Its requests wait at a gate
//! before their first chunk, so that the test fills the queue before anything leaves it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod support;

use chatterbox_server::{ChunkIter, DeviceModels, ModelError, ServerConfig};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{expect_error, speech, Speaks, TestServer, Voiceless};

/// Requests admitted at once: the one worker's and the queue's.
const ADMITTED: usize = 8;

/// The queue's expected wait in `/metrics`.
const WAIT: &str = "chatterbox_queue_expected_wait_seconds{model=\"chatterbox\"}";

/// A model that speaks 8 chunks of 100 samples, 50 ms each, once its gate is open.
#[derive(Clone)]
struct Gated {
    open: Arc<AtomicBool>,
}

impl Gated {
    fn device(&self) -> DeviceModels {
        DeviceModels::loaded("gated", vec![Box::new(Voiceless(self.clone()))])
    }

    fn set(&self, open: bool) {
        self.open.store(open, Ordering::SeqCst);
    }
}

impl Speaks for Gated {
    fn speak(&self, _: &str) -> Result<ChunkIter<'_>, ModelError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.open.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(Box::new((0..8).map(|i| {
            std::thread::sleep(Duration::from_millis(50));
            Ok((0..100)
                .map(|j| ((i * 100 + j) as f32 * 0.03).sin() * 0.4)
                .collect::<Vec<f32>>()
                .into())
        })))
    }
}

fn req() -> serde_json::Value {
    json!({"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"})
}

/// A metric's value in `/metrics` (the whole name with its labels), if it is there.
async fn metric_if_any(s: &TestServer, name: &str) -> Option<f64> {
    let text = reqwest::get(s.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// A metric's value in `/metrics` (the whole name with its labels).
async fn metric(s: &TestServer, name: &str) -> f64 {
    metric_if_any(s, name)
        .await
        .unwrap_or_else(|| panic!("{name} not in /metrics"))
}

/// Starts `ADMITTED` whole-file requests and waits until the server holds all of them
/// (queued or running); returns their tasks (each yields its status).
async fn fill(s: &TestServer) -> Vec<tokio::task::JoinHandle<u16>> {
    let tasks: Vec<_> = (0..ADMITTED)
        .map(|_| {
            let url = s.url("/v1/audio/speech");
            tokio::spawn(async move {
                let r = reqwest::Client::new()
                    .post(url)
                    .header("content-type", "application/json")
                    .body(serde_json::to_vec(&req()).unwrap())
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                r.bytes().await.unwrap();
                status
            })
        })
        .collect();
    holds(s, ADMITTED).await;
    tasks
}

/// Waits until the server holds `n` requests (queued or running; a request stops counting
/// once its job, and so its place in the queue, is gone, which may be a moment after its
/// client has read the whole answer).
async fn holds(s: &TestServer, n: usize) {
    let t0 = Instant::now();
    loop {
        let held =
            metric(s, "chatterbox_queue_depth").await + metric(s, "chatterbox_jobs_running").await;
        if held as usize == n {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the server holds {held} requests, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A request to the full queue: 429 `queue_full`; returns its `Retry-After` seconds.
async fn refused(s: &TestServer) -> u64 {
    let r = speech(s, req()).await;
    let retry_after = r.headers()["retry-after"].to_str().unwrap().to_string();
    let e = expect_error(r, 429).await;
    assert_eq!(e["code"], "queue_full");
    retry_after
        .parse()
        .unwrap_or_else(|_| panic!("Retry-After {retry_after:?} is not whole seconds"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_says_how_long_it_needs_and_refusals_are_counted() {
    let gated = Gated {
        open: Arc::new(AtomicBool::new(false)),
    };
    let mut config = ServerConfig::default();
    config.queue_capacity = ADMITTED - 1;
    let s = TestServer::start(config, vec![gated.device()]).await;
    let refusals = "chatterbox_requests_refused_total{reason=\"queue_full\"}";
    assert_eq!(metric(&s, refusals).await, 0.0);

    // nothing has finished yet: the configured value (1 s)
    let t0 = Instant::now();
    let first = fill(&s).await;
    for _ in 0..3 {
        assert_eq!(refused(&s).await, 1);
    }
    assert_eq!(
        metric_if_any(&s, WAIT).await,
        None,
        "nothing has been measured"
    );
    gated.set(true);
    for t in first {
        assert_eq!(t.await.unwrap(), 200);
    }
    let drained = t0.elapsed().as_secs_f64();
    assert!(drained > 3.0, "8 requests of 0.4 s took {drained:.2} s");

    // the server has seen its pace (about 8 requests in `drained` seconds): a full queue
    // again needs about as long, rounded up
    holds(&s, 0).await;
    gated.set(false);
    let second = fill(&s).await;
    let retry_after = refused(&s).await;
    let refused_at = Instant::now();
    // what the 429 was made from (nothing has left since: the same)
    let wait = metric(&s, WAIT).await;
    assert_eq!(wait.ceil() as u64, retry_after, "{wait}");
    gated.set(true);
    println!(
        "8 requests drained in {drained:.2} s; a full queue answers Retry-After: {retry_after}"
    );
    assert!((1..=60).contains(&retry_after));
    assert!(
        retry_after as f64 >= drained - 1.0 && retry_after as f64 <= drained + 2.0,
        "Retry-After {retry_after} for a queue that drained in {drained:.2} s"
    );
    assert!(retry_after >= 3, "{retry_after}");
    // a client that waits as long is admitted
    tokio::time::sleep_until((refused_at + Duration::from_secs(retry_after)).into()).await;
    let r = speech(&s, req()).await;
    assert_eq!(
        r.status(),
        200,
        "refused again after Retry-After {retry_after}"
    );
    r.bytes().await.unwrap();
    for t in second {
        assert_eq!(t.await.unwrap(), 200);
    }

    // every refusal is counted by reason, beside the responses by status
    assert_eq!(metric(&s, refusals).await, 4.0);
    assert_eq!(
        metric(&s, "chatterbox_requests_total{status=\"429\"}").await,
        4.0
    );
    assert_eq!(
        metric(
            &s,
            "chatterbox_requests_refused_total{reason=\"too_many_connections\"}"
        )
        .await,
        0.0
    );
    s.stop().await;
}
