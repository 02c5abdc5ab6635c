//! Health that tells the truth, with fake models (no GPU): a generation failing with a sticky
//! CUDA error (by its text, as candle and cudarc report it) marks its worker failed: `/ready`
//! answers 503 naming the device and the error, `/metrics` shows the worker unhealthy and why,
//! and new requests for its model get 503 instead of waiting for a dead device (or go to a
//! healthy worker holding the model); a job that panics is counted and leaves the gauges of
//! running and queued requests at their true values, one at a time or batched.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod support;

use chatterbox_server::{
    BatchItem, ChunkIter, DeviceModels, ModelError, RequestBatch, ServerConfig,
};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{expect_error, speech, RoundModel, Rounds, Speaks, TestServer, Voiceless};

/// What a cudarc driver error looks like inside candle's error, under the pipeline's.
#[derive(Debug, thiserror::Error)]
#[error("T3 decode step failed")]
struct StepFailed(#[source] DriverError);

#[derive(Debug, thiserror::Error)]
#[error("DriverError(CUDA_ERROR_ILLEGAL_ADDRESS, \"an illegal memory access was encountered\")")]
struct DriverError;

/// Chunks of a request whose text is not a trigger.
const CHUNKS: usize = 10;
const CHUNK: usize = 2400;

/// A model whose text says what happens: `crash` fails with a sticky CUDA error (when `sick`;
/// a healthy one speaks it), `panic` panics, `panic-cuda` panics with a CUDA error in its
/// message; anything else is [`CHUNKS`] chunks, `delay` apart. With `slots` > 1 it batches.
/// A trigger fires after the request's first chunk, once `gate` is open.
#[derive(Clone)]
struct Flaky {
    sick: bool,
    slots: usize,
    delay: Duration,
    /// Requests that reached the model (streams opened, requests added to a batch).
    calls: Arc<AtomicUsize>,
    gate: Arc<AtomicBool>,
}

impl Flaky {
    fn new(sick: bool, slots: usize, delay: Duration) -> Self {
        Self {
            sick,
            slots,
            delay,
            calls: Arc::new(AtomicUsize::new(0)),
            gate: Arc::new(AtomicBool::new(true)),
        }
    }

    fn device(&self, label: &str) -> DeviceModels {
        DeviceModels::loaded(label, vec![Box::new(Voiceless(self.clone()))])
    }

    fn trigger(&self, text: &str) -> Option<Result<(), ModelError>> {
        if matches!(text, "crash" | "panic" | "panic-cuda") {
            let t0 = Instant::now();
            while !self.gate.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        match text {
            "crash" if self.sick => Some(Err(Box::new(StepFailed(DriverError)))),
            "panic" => panic!("the fake model panics"),
            "panic-cuda" => {
                panic!("cuda error: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure")
            }
            _ => None,
        }
    }
}

fn chunk(i: usize) -> Vec<f32> {
    (0..CHUNK)
        .map(|j| ((i * CHUNK + j) as f32 * 0.02).sin() * 0.3)
        .collect()
}

impl Speaks for Flaky {
    fn speak(&self, text: &str) -> Result<ChunkIter<'_>, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let text = text.to_string();
        Ok(Box::new((0..CHUNKS).map(move |i| {
            std::thread::sleep(self.delay);
            if i == 1 {
                // after the first audio
                if let Some(Err(e)) = self.trigger(&text) {
                    return Err(e);
                }
            }
            Ok(chunk(i).into())
        })))
    }

    fn slots(&self) -> usize {
        self.slots.max(1)
    }

    fn batch(&self) -> Option<Result<Box<dyn RequestBatch + '_>, ModelError>> {
        Rounds::of(self)
    }
}

/// A [`Flaky`]'s batch: one chunk per request and round; a trigger fires in the round after
/// the request's first chunk.
impl RoundModel for Flaky {
    /// Text and chunks made.
    type Request = (String, usize);

    fn slots(&self) -> usize {
        self.slots
    }

    fn round_delay(&self) -> Duration {
        self.delay
    }

    fn admit(&self, _voice: Option<&Path>, text: &str) -> Result<Self::Request, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok((text.to_string(), 0))
    }

    fn round(&self, (text, made): &mut Self::Request) -> BatchItem {
        if *made == 1 {
            if let Some(Err(e)) = self.trigger(text) {
                return BatchItem::Failed(e);
            }
        }
        let last = *made + 1 == CHUNKS;
        let samples = chunk(*made);
        *made += 1;
        BatchItem::Audio {
            samples,
            last,
            truncated: false,
        }
    }
}

fn req(text: &str) -> serde_json::Value {
    json!({"model": "chatterbox", "input": text, "voice": "alloy", "response_format": "pcm"})
}

fn streamed(text: &str) -> serde_json::Value {
    let mut b = req(text);
    b["stream_format"] = json!("audio");
    b
}

async fn get(s: &TestServer, path: &str) -> (u16, String) {
    let r = reqwest::get(s.url(path)).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The value of the series `name` (with its labels) in `/metrics`.
async fn metric(s: &TestServer, series: &str) -> Option<f64> {
    let (_, text) = get(s, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Polls `/metrics` until `series` reads `want` (the worker settles its gauges just after it
/// answers); panics after 3 s.
async fn await_metric(s: &TestServer, series: &str, want: f64) {
    let t0 = Instant::now();
    loop {
        let got = metric(s, series).await;
        if got == Some(want) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{series} is {got:?}, not {want}:\n{}",
            get(s, "/metrics").await.1
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a failed device's server says: `/ready` 503 naming it and the error, `/metrics` the
/// worker unhealthy and why, `/health` still 200.
async fn check_reports_the_fault(s: &TestServer, worker: usize, device: &str, error: &str) {
    let (status, body) = get(s, "/ready").await;
    assert_eq!(status, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "unavailable");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains(device) && msg.contains(error), "{msg}");
    let labels = format!("{{worker=\"{worker}\",device=\"{device}\"");
    assert_eq!(
        metric(s, &format!("chatterbox_worker_healthy{labels}}}")).await,
        Some(0.0)
    );
    assert_eq!(
        metric(
            s,
            &format!("chatterbox_worker_fault_info{labels},error=\"{error}\"}}")
        )
        .await,
        Some(1.0)
    );
    assert_eq!(get(s, "/health").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sticky_cuda_error_takes_the_worker_out_of_service() {
    let model = Flaky::new(true, 1, Duration::from_millis(5));
    let s = TestServer::start(ServerConfig::default(), vec![model.device("gpu0")]).await;
    assert_eq!(
        metric(
            &s,
            "chatterbox_worker_healthy{worker=\"0\",device=\"gpu0\"}"
        )
        .await,
        Some(1.0)
    );
    let (_, m) = get(&s, "/metrics").await;
    assert!(!m.contains("chatterbox_worker_fault_info{"), "{m}");
    assert_eq!(speech(&s, req("fine")).await.status(), 200);

    // the failure reaches its client as any failure does: audio had started, so a whole file
    // is a 500
    expect_error(speech(&s, req("crash")).await, 500).await;
    check_reports_the_fault(&s, 0, "gpu0", "CUDA_ERROR_ILLEGAL_ADDRESS").await;
    // the model is not asked again: new requests are told at once
    let calls = model.calls.load(Ordering::SeqCst);
    assert_eq!(calls, 2);
    for body in [req("fine"), streamed("fine")] {
        let t0 = Instant::now();
        let e = expect_error(speech(&s, body).await, 503).await;
        assert!(t0.elapsed() < Duration::from_secs(1));
        assert_eq!(e["code"], "unavailable");
        assert!(e["message"].as_str().unwrap().contains("restarted"), "{e}");
    }
    assert_eq!(model.calls.load(Ordering::SeqCst), calls);
    assert_eq!(metric(&s, "chatterbox_jobs_running").await, Some(0.0));
    assert_eq!(metric(&s, "chatterbox_queue_depth").await, Some(0.0));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_device_leaves_its_model_to_the_healthy_one() {
    let sick = Flaky::new(true, 1, Duration::from_millis(5));
    let well = Flaky::new(false, 1, Duration::from_millis(5));
    let s = TestServer::start(
        ServerConfig::default(),
        vec![sick.device("gpu0"), well.device("gpu1")],
    )
    .await;
    // whichever worker takes a "crash" speaks it if healthy: ask until the sick one took one
    let t0 = Instant::now();
    while sick.calls.load(Ordering::SeqCst) == 0 {
        let status = speech(&s, req("crash")).await.status().as_u16();
        assert!(status == 200 || status == 500, "{status}");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the sick worker got no request"
        );
    }
    await_metric(
        &s,
        "chatterbox_worker_healthy{worker=\"0\",device=\"gpu0\"}",
        0.0,
    )
    .await;
    check_reports_the_fault(&s, 0, "gpu0", "CUDA_ERROR_ILLEGAL_ADDRESS").await;
    assert_eq!(
        metric(
            &s,
            "chatterbox_worker_healthy{worker=\"1\",device=\"gpu1\"}"
        )
        .await,
        Some(1.0)
    );
    // the healthy device serves every request now, the failed one none
    let before = (
        sick.calls.load(Ordering::SeqCst),
        well.calls.load(Ordering::SeqCst),
    );
    for _ in 0..4 {
        let r = speech(&s, req("crash")).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.bytes().await.unwrap().len(), CHUNKS * CHUNK * 2);
    }
    assert_eq!(sick.calls.load(Ordering::SeqCst), before.0);
    assert_eq!(well.calls.load(Ordering::SeqCst), before.1 + 4);
    s.stop().await;
}

/// A batching [`Flaky`] (`sick` or not), a server with it on the device `label`, and two
/// streams in its batch, past their first audio.
async fn two_in_a_batch(
    sick: bool,
    label: &str,
) -> (Flaky, TestServer, reqwest::Response, reqwest::Response) {
    let model = Flaky::new(sick, 4, Duration::from_millis(60));
    // seated by slot: two streams in the batch at once, not a measured pace
    let config = ServerConfig::default().with_capacity_admission(false);
    let s = TestServer::start(config, vec![model.device(label)]).await;
    let mut a = speech(&s, streamed("fine")).await;
    assert_eq!(a.status(), 200);
    assert!(a.chunk().await.unwrap().is_some());
    let mut b = speech(&s, streamed("fine")).await;
    assert_eq!(b.status(), 200);
    assert!(b.chunk().await.unwrap().is_some());
    assert_eq!(metric(&s, "chatterbox_jobs_running").await, Some(2.0));
    (model, s, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sticky_cuda_error_in_a_batch_stops_the_batch_and_the_worker() {
    let (model, s, mut a, mut b) = two_in_a_batch(true, "gpu0").await;
    // a third joins and fails on the device
    expect_error(speech(&s, req("crash")).await, 500).await;
    // the two streams cannot finish: they are cut (a truncated body, never a whole file)
    for r in [&mut a, &mut b] {
        let mut bytes = 0;
        let end = loop {
            match r.chunk().await {
                Ok(Some(c)) => bytes += c.len(),
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        assert!(end.is_err(), "a stream ended whole after the device failed");
        assert!(bytes < CHUNKS * CHUNK * 2);
    }
    check_reports_the_fault(&s, 0, "gpu0", "CUDA_ERROR_ILLEGAL_ADDRESS").await;
    expect_error(speech(&s, req("fine")).await, 503).await;
    await_metric(&s, "chatterbox_jobs_running", 0.0).await;
    assert_eq!(metric(&s, "chatterbox_queue_depth").await, Some(0.0));
    assert_eq!(model.calls.load(Ordering::SeqCst), 3);
    s.stop().await;
}

/// After one panic: no request runs or waits, the panic is counted, and the worker is ready.
async fn check_one_panic_cleared(s: &TestServer) {
    await_metric(s, "chatterbox_jobs_running", 0.0).await;
    assert_eq!(metric(s, "chatterbox_queue_depth").await, Some(0.0));
    assert_eq!(metric(s, "chatterbox_worker_panics_total").await, Some(1.0));
    assert_eq!(get(s, "/ready").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_job_is_counted_and_leaves_the_gauges_right() {
    let model = Flaky::new(false, 1, Duration::from_millis(5));
    model.gate.store(false, Ordering::SeqCst);
    let mut config = ServerConfig::default();
    config.queue_capacity = 4;
    let s = TestServer::start(config, vec![model.device("cpu")]).await;
    assert_eq!(
        metric(&s, "chatterbox_worker_panics_total").await,
        Some(0.0)
    );
    // one request running (past its first audio) and one queued behind it, then the running
    // one panics
    let mut running = speech(&s, streamed("panic")).await;
    assert_eq!(running.status(), 200);
    assert!(running.chunk().await.unwrap().is_some());
    let queued = tokio::spawn({
        let url = s.url("/v1/audio/speech");
        async move { support::post_json(url, &req("fine")).await }
    });
    await_metric(&s, "chatterbox_queue_depth", 1.0).await;
    assert_eq!(metric(&s, "chatterbox_jobs_running").await, Some(1.0));
    model.gate.store(true, Ordering::SeqCst);
    let mut cut = false;
    while !cut {
        cut = running.chunk().await.map_or(true, |c| c.is_none());
    }
    // the queued request is served next, in full
    let r = queued.await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().len(), CHUNKS * CHUNK * 2);
    // a panic is no device fault: the worker stays in service
    check_one_panic_cleared(&s).await;
    assert_eq!(
        metric(&s, "chatterbox_worker_healthy{worker=\"0\",device=\"cpu\"}").await,
        Some(1.0)
    );
    assert_eq!(speech(&s, req("fine")).await.status(), 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_batch_leaves_the_gauges_right() {
    let (_model, s, mut a, mut b) = two_in_a_batch(false, "cpu").await;
    // a third request joins and makes the batch's step panic: every request in it ends
    expect_error(speech(&s, req("panic")).await, 500).await;
    for r in [&mut a, &mut b] {
        let mut end = Ok(Some(bytes::Bytes::new()));
        while matches!(end, Ok(Some(_))) {
            end = r.chunk().await;
        }
    }
    check_one_panic_cleared(&s).await;
    // the worker batches again
    let r = speech(&s, req("fine")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().len(), CHUNKS * CHUNK * 2);

    // a panic whose message names a sticky CUDA error is a device fault too
    expect_error(speech(&s, req("panic-cuda")).await, 500).await;
    await_metric(&s, "chatterbox_worker_panics_total", 2.0).await;
    check_reports_the_fault(&s, 0, "cpu", "CUDA_ERROR_LAUNCH_FAILED").await;
    expect_error(speech(&s, req("fine")).await, 503).await;
    await_metric(&s, "chatterbox_jobs_running", 0.0).await;
    s.stop().await;
}
