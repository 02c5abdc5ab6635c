//! The bench's HTTP clients: streaming speech requests and what each gave, the load levels'
//! concurrent clients, the readiness poll and the voice uploads.
use chatterbox_pipeline::S3GEN_SR;
use chatterbox_server::{ModelId, SAMPLE_RATE};
use chatterbox_testkit::{speech_like, underrun_margin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one request gave.
#[derive(Debug)]
pub struct Outcome {
    /// ms from sending to the first body byte.
    pub ttfb: f64,
    /// ms from sending to the end of the body.
    pub latency: f64,
    /// Seconds of audio received.
    pub audio_s: f64,
    /// Worst playback margin (ms; < 0: underrun).
    pub margin: f64,
    /// Why the request failed, if it did.
    pub error: Option<String>,
    /// The status of an answer other than 200.
    pub status: Option<u16>,
    /// The `Retry-After` seconds of an answer other than 200, when it had one.
    pub retry_after: Option<f64>,
    /// The answer was the server's `no_speech` 500 (T3 drew its stop token first for this
    /// text and seed: a random-weights draw, as the reference would fail).
    pub no_speech: bool,
    /// A `no_speech` answer that the same request sent alone gave again: the model's answer
    /// for this text and seed, not a fault of the batch. Counted in `*_no_speech`, not in
    /// `*_errors`.
    pub no_speech_alone: bool,
}

impl Outcome {
    /// A request that failed after starting at `t0`.
    pub fn failed(t0: Instant, why: String) -> Self {
        Self {
            ttfb: f64::NAN,
            latency: t0.elapsed().as_secs_f64() * 1e3,
            audio_s: 0.0,
            margin: f64::NAN,
            error: Some(why),
            status: None,
            retry_after: None,
            no_speech: false,
            no_speech_alone: false,
        }
    }

    /// Whether this outcome is an error of the serving (not a `no_speech` answer reproduced
    /// alone).
    pub fn is_error(&self) -> bool {
        self.error.is_some() && !self.no_speech_alone
    }

    /// Whether the server refused the request (429, or 503 while loading, draining or at its
    /// connection limit): back-pressure, not a fault.
    pub fn is_refusal(&self) -> bool {
        matches!(self.status, Some(429 | 503))
    }
}

/// Sends one streaming speech request and reads its body piece by piece.
pub async fn request(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Outcome {
    let t0 = Instant::now();
    let sent = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await;
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => return Outcome::failed(t0, format!("send: {e}")),
    };
    let status = resp.status();
    if status != reqwest::StatusCode::OK {
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.trim().parse::<f64>().ok());
        let text = resp.text().await.unwrap_or_default();
        let code = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        let mut o = Outcome::failed(t0, format!("{status}: {}", text.trim()));
        o.no_speech = code.as_deref() == Some("no_speech");
        (o.status, o.retry_after) = (Some(status.as_u16()), retry_after);
        return o;
    }
    let mut pieces = Vec::new();
    let mut bytes = 0usize;
    loop {
        match resp.chunk().await {
            Ok(Some(b)) if b.is_empty() => {}
            Ok(Some(b)) => {
                let at = t0.elapsed().as_secs_f64() * 1e3;
                let start = bytes / 2;
                bytes += b.len();
                pieces.push((at, start, bytes / 2 - start));
            }
            Ok(None) => break,
            Err(e) => return Outcome::failed(t0, format!("broken body after {bytes} bytes: {e}")),
        }
    }
    let latency = t0.elapsed().as_secs_f64() * 1e3;
    let error = if bytes == 0 {
        Some("empty body".to_string())
    } else if !bytes.is_multiple_of(2) {
        Some(format!("odd body length {bytes} (s16le)"))
    } else {
        None
    };
    Outcome {
        ttfb: pieces.first().map_or(f64::NAN, |p| p.0),
        latency,
        audio_s: (bytes / 2) as f64 / f64::from(SAMPLE_RATE),
        margin: underrun_margin(&pieces, SAMPLE_RATE),
        error,
        status: None,
        retry_after: None,
        no_speech: false,
        no_speech_alone: false,
    }
}

/// Sends each `no_speech` answer of `out` (requests numbered from `first`) again, alone; marks
/// those that give `no_speech` again (the model's answer for that text and seed). Returns how
/// many did.
pub async fn confirm_no_speech(
    url: &str,
    model: ModelId,
    out: &mut [Outcome],
    first: usize,
    input: fn(usize) -> String,
) -> usize {
    let client = reqwest::Client::new();
    let mut n = 0;
    for (k, o) in out.iter_mut().enumerate().filter(|(_, o)| o.no_speech) {
        let i = first + k;
        let alone = request(&client, url, body(model, &input(i), i)).await;
        if alone.no_speech {
            o.no_speech_alone = true;
            n += 1;
        } else {
            o.error = Some(format!(
                "no_speech in the load, but alone {} ({:.2} s of audio)",
                alone.error.as_deref().unwrap_or("speech"),
                alone.audio_s
            ));
        }
    }
    n
}

/// The JSON body of request `i`, with the `speed` of `CHATTERBOX_SERVE_SPEED` when it is set.
pub fn body(model: ModelId, input: &str, i: usize) -> Vec<u8> {
    serde_json::to_vec(&json_body(model, input, i)).unwrap_or_default()
}

/// [`body`] as JSON: a streaming request (`stream_format: "audio"`).
pub fn json_body(model: ModelId, input: &str, i: usize) -> serde_json::Value {
    let mut body = serde_json::json!({
        "model": model.name(),
        "input": input,
        "voice": "alloy",
        "response_format": "pcm",
        "stream_format": "audio",
        "seed": i,
    });
    if let Some(speed) = speed() {
        body["speed"] = speed.into();
    }
    body
}

/// `CHATTERBOX_SERVE_SPEED`: OpenAI's `speed` sent with every request (unset: none, the exact
/// path), read once.
fn speed() -> Option<f64> {
    static SPEED: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    *SPEED.get_or_init(|| {
        std::env::var("CHATTERBOX_SERVE_SPEED")
            .ok()
            .and_then(|s| s.parse().ok())
    })
}

/// `clients` concurrent clients send `total` requests (`input(i)` for request `i`, numbered
/// from `first`); the outcomes in request order and the wall seconds.
pub async fn run_level(
    url: &str,
    model: ModelId,
    clients: usize,
    total: usize,
    first: usize,
    input: fn(usize) -> String,
) -> (Vec<Outcome>, f64) {
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (next, url) = (next.clone(), url.to_string());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut out = Vec::new();
            loop {
                let k = next.fetch_add(1, Ordering::AcqRel);
                if k >= total {
                    return out;
                }
                let i = first + k;
                out.push((k, request(&client, &url, body(model, &input(i), i)).await));
            }
        }));
    }
    let mut all = Vec::with_capacity(total);
    for t in tasks {
        match t.await {
            Ok(out) => all.extend(out),
            Err(e) => eprintln!("client task failed: {e}"),
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    all.sort_by_key(|o| o.0);
    (all.into_iter().map(|o| o.1).collect(), wall)
}

/// Polls `/ready` until it answers 200 (the model loaded and its voice prepared).
pub async fn wait_ready(base: &str, server: &tokio::task::JoinHandle<()>) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let t0 = Instant::now();
    loop {
        anyhow::ensure!(!server.is_finished(), "the server stopped while loading");
        if let Ok(r) = client.get(format!("{base}/ready")).send().await {
            if r.status() == reqwest::StatusCode::OK {
                eprintln!("ready after {:.1} s", t0.elapsed().as_secs_f64());
                return Ok(());
            }
        }
        // A failed load leaves the server up but never ready: give up after a long while.
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(1800),
            "the server is not ready after 30 minutes (did the model load fail?)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// While `on`, uploads a 10 s voice to `url` every `every_s` seconds (four names in turn);
/// each upload's time to its 201 in ms, or its error.
pub async fn upload_voices(
    url: String,
    every_s: f64,
    on: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<Result<f64, String>> {
    let mut out = Vec::new();
    let wav = {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: S3GEN_SR,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut bytes = std::io::Cursor::new(Vec::new());
        let written = hound::WavWriter::new(&mut bytes, spec).and_then(|mut w| {
            for v in speech_like(S3GEN_SR, 10.0) {
                w.write_sample((v.clamp(-1.0, 1.0) * 32767.0) as i16)?;
            }
            w.finalize()
        });
        if let Err(e) = written {
            return vec![Err(format!("cannot write the voice clip: {e}"))];
        }
        bytes.into_inner()
    };
    let client = reqwest::Client::new();
    let mut k = 0usize;
    while on.load(Ordering::Acquire) {
        let form = reqwest::multipart::Form::new()
            .text("name", format!("bench-upload-{}", k % 4))
            .part(
                "file",
                reqwest::multipart::Part::bytes(wav.clone()).file_name("clip.wav"),
            );
        let t0 = Instant::now();
        let r = match client.post(&url).multipart(form).send().await {
            Ok(r) if r.status() == reqwest::StatusCode::CREATED => {
                Ok(t0.elapsed().as_secs_f64() * 1e3)
            }
            Ok(r) => Err(format!(
                "{}: {}",
                r.status(),
                r.text().await.unwrap_or_default()
            )),
            Err(e) => Err(e.to_string()),
        };
        out.push(r);
        k += 1;
        tokio::time::sleep(Duration::from_secs_f64(every_s)).await;
    }
    out
}
