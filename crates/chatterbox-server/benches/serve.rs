//! `cargo xtask bench serve --threads 2 --no-reference`: the load test of issue 22. The server
//! runs in-process on 127.0.0.1 (an ephemeral port) with one worker, on a full-size random
//! checkpoint, driven by concurrent loopback HTTP clients (tokio + reqwest); JSON records go to
//! `CHATTERBOX_BENCH_OUT` (else stdout). There is no reference side (no
//! `parity/bench/serve.py`).
//!
//! Variant: `CHATTERBOX_SERVE_VARIANT` = `turbo` (default) | `english`. Checkpoint:
//! `CHATTERBOX_SERVE_CKPT`, else `/tmp/chatterbox-bench-<variant>`, written on first use by
//! `parity/checkpoints.py --size full` (the parity venv). The built-in voice is the 10 s
//! speech-like clip of `pipeline.rs`, prepared on the worker before `/ready` answers 200 (the
//! requests ask for `voice=alloy`, which maps to it). `CHATTERBOX_BENCH_DEVICE=cuda` (with
//! `--features cuda`) serves from GPU 0 with bf16 T3 and flow; `CHATTERBOX_SERVE_GPUS=N`
//! from GPUs 0..N, one worker each (the GPU memory sampled is GPU 0's).
//! `CHATTERBOX_SERVE_BATCH=S` serves up to `S` requests at once per worker through one batched
//! T3 decoder (continuous batching, issue 27); 0 (default) one at a time.
//! `CHATTERBOX_SERVE_FLOW_ROWS=R`: chunks per batched flow call (default
//! `chatterbox_pipeline::FLOW_ROWS`; 1: each stream's flow alone).
//!
//! Request length: random weights rarely draw the stop token, so every request runs to its
//! token cap. The bench wraps the model in a [`SpeechModel`] that caps `max_new_tokens` at a
//! value the bench sets between phases (what `ServerConfig::max_new_tokens` does, without
//! reloading the model): `CHATTERBOX_SERVE_TOKENS` (default 125: 5 s of audio at 25 tokens a
//! second) for the load levels, `CHATTERBOX_SERVE_MEMORY_TOKENS` (default 20) for the memory
//! phase. English drops the ~20% of random draws that are not speech tokens, so its requests
//! are shorter (`*_audio_s` says how long).
//!
//! Requests: `POST /v1/audio/speech` with a short varied English sentence (one text chunk),
//! `response_format=pcm` (s16le, 24 kHz), `stream_format=audio`, seed = the request's index.
//! One request is sent first as a warm-up and not counted.
//!
//! Load levels: for each `N` in `CHATTERBOX_SERVE_CLIENTS` (default `1,2,4,8`), `N` clients
//! (each its own connection pool) take requests from a shared counter until
//! `CHATTERBOX_SERVE_REQUESTS` (default 40) have been sent. Per request: the time to the first
//! body byte (`ttfb`), the time to the last (`latency`), the audio received (bytes / 2 / 24 kHz)
//! and the playback margin: a listener starts playing at the first byte; the bytes of a piece
//! arriving at `t` are due at `t_first + offset / 24 kHz`; the worst margin over the later
//! pieces (ms; negative: the audio ran dry, an underrun), as `stream.rs`'s `underrun_margin`.
//! Records, prefixed `c<N>_`: `ttfb_p50`, `ttfb_p95`, `latency_p50`, `latency_p95` (ms),
//! `rtf` (audio seconds delivered / wall seconds of the level: > 1 keeps up), `audio_s` (mean
//! per request), `audio_min_s` (the shortest request's), `errors` (non-200 answers, broken or
//! empty bodies, bodies of an odd length), `no_speech` (the server's `no_speech` 500: T3
//! drew its stop token first for that text and seed, as random weights do for a few; each is
//! sent again alone after the level and counted here, not as an error, only when it gives
//! `no_speech` again: the model's answer, not a fault of the batch), `underruns` (requests whose margin went negative),
//! `worst_margin` (ms). Then `max_clients_without_underrun`: the largest `N` with no underrun and no error (0: none).
//!
//! Memory phase: `CHATTERBOX_SERVE_MEMORY_CLIENTS` (default 8) clients send
//! `CHATTERBOX_SERVE_MEMORY_REQUESTS` (default 1000) short requests; memory is sampled after a
//! warm-up round of one request per client and after the last request: the process's resident
//! set (`chatterbox_pipeline::resident_memory_bytes`) and, on CUDA, the device's used memory (total - free as the driver reports
//! it), in MB (10^6 bytes). Records: `mem_rss_{loaded,before,after,growth}_mb`,
//! `mem_gpu_used_{loaded,before,after,growth}_mb` (CUDA only), `mem_errors`, `mem_no_speech`,
//! `mem_wall_s`,
//! `mem_ttfb_p50` and `mem_ttfb_p95` (ms, with the voice uploads below running when they are on).
//!
//! Watermark: `CHATTERBOX_SERVE_WATERMARK` = `random` (Perth's architecture with seeded
//! random weights: the shipped model's work per chunk) or the path of Perth's weights
//! (`perth_net_250000.pth.tar`); unset, none (the default `chatterbox serve` watermarks).
//! Voice uploads: with `CHATTERBOX_SERVE_UPLOAD_EVERY_S=S`, a client uploads a 10 s voice
//! (`POST /v1/voices`, one of four names) every `S` seconds while the memory phase runs, each
//! analysed by the worker between the speech requests' work. Records: `mem_uploads`,
//! `mem_upload_errors` (must be 0), `mem_upload_p95_ms`.
//!
//! Every value is stored in the records' `*_ms` fields (one sample); the shape names its unit.
//! The run fails (after writing its records) on any error, or when the RSS grows by more than
//! `CHATTERBOX_SERVE_MAX_GROWTH_MB` (default 64) over the memory phase.
use anyhow::Context as _;
use candle_core::Device;
use chatterbox_pipeline::{
    perth_watermarker, Audio, ChatterboxTts, ChatterboxTurboTts, GenerateOptions, VoiceClip,
    Watermarker, FLOW_ROWS, S3GEN_SR, S3_SR,
};
use chatterbox_server::{
    BatchItem, ChunkIter, DeviceModels, ModelError, ModelId, PipelineModel, RequestBatch, Server,
    ServerConfig, SpeechModel, SAMPLE_RATE,
};
use chatterbox_testkit::{
    bench_dtype, checkpoint_dir, device_name, env_f64, env_usize, full_size_checkpoint,
    speech_like, test_device, underrun_margin, BenchRun, MemorySample,
};
use chatterbox_watermark::PerthWatermarker;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sentence templates (`{p}` a person, `{c}` a place, `{t}` a thing, `{n}` a number): one
/// text chunk each, 50 to 80 characters.
const TEMPLATES: [&str; 16] = [
    "{p} walked to {c} early in the morning and bought {n} loaves of bread.",
    "Nobody expected the {t} to last for {n} years, but it never broke.",
    "In {c}, the trains leave every {n} minutes, even on a quiet Sunday.",
    "{p} said the {t} was far too heavy to carry up the stairs alone.",
    "We counted {n} birds on the roof before the rain began to fall.",
    "Have you ever seen a {t} as old as the one in the museum of {c}?",
    "After the storm, the road to {c} was closed for {n} days.",
    "When the lights went out, {p} lit {n} candles and kept on reading.",
    "Please remember to bring the {t} when you come back from {c}.",
    "The recipe asks for {n} eggs, a cup of milk and a pinch of salt.",
    "Why would anyone leave a {t} in the middle of the garden path?",
    "{p} wrote {n} letters that winter and posted every one of them.",
    "The bus to {c} was late again, by almost {n} minutes.",
    "If the weather holds, we will sail to {c} in {n} days.",
    "{p} found the {t} under a pile of newspapers in the attic.",
    "From the top of the hill you can see {c} and the sea beyond it.",
];
const PEOPLE: [&str; 8] = [
    "Anna",
    "Marco",
    "Doctor Patel",
    "Kenji",
    "Lucia",
    "Fatima",
    "Oliver",
    "the captain",
];
const PLACES: [&str; 8] = [
    "Lisbon",
    "the harbour",
    "Oslo",
    "the old town",
    "Nairobi",
    "the valley",
    "Kyoto",
    "the island",
];
const THINGS: [&str; 8] = [
    "lamp",
    "bicycle",
    "violin",
    "suitcase",
    "kettle",
    "map",
    "telescope",
    "radio",
];
/// Short inputs of the memory phase.
const SHORT: [&str; 8] = [
    "Hello there.",
    "Good morning!",
    "See you soon.",
    "Thank you.",
    "Is it raining?",
    "Not today.",
    "Right away.",
    "Well done!",
];

/// Sentence `i` of a deterministic sequence (fillers drawn by a 64-bit hash of `i`).
fn sentence(i: usize) -> String {
    let mut x = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut draw = |n: usize| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((x >> 33) % n as u64) as usize
    };
    TEMPLATES[i % TEMPLATES.len()]
        .replace("{p}", PEOPLE[draw(PEOPLE.len())])
        .replace("{c}", PLACES[draw(PLACES.len())])
        .replace("{t}", THINGS[draw(THINGS.len())])
        .replace("{n}", &(2 + draw(97)).to_string())
}

/// The served model, its `max_new_tokens` capped at a value the bench changes between phases.
struct Capped {
    inner: PipelineModel,
    cap: Arc<AtomicUsize>,
}

impl SpeechModel for Capped {
    fn id(&self) -> ModelId {
        self.inner.id()
    }
    fn default_options(&self) -> GenerateOptions {
        self.inner.default_options()
    }
    fn use_voice(&mut self, path: Option<&Path>) -> Result<(), ModelError> {
        self.inner.use_voice(path)
    }
    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Result<(), ModelError> {
        self.inner.save_voice(audio, path)
    }
    fn stream<'a>(
        &'a self,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<ChunkIter<'a>, ModelError> {
        self.inner.stream(text, &self.capped(opts))
    }
    fn concurrency(&self) -> usize {
        self.inner.concurrency()
    }
    fn batch(&self) -> Option<Result<Box<dyn RequestBatch + '_>, ModelError>> {
        Some(self.inner.batch()?.map(|inner| {
            Box::new(CappedBatch {
                inner,
                cap: self.cap.clone(),
            }) as Box<dyn RequestBatch + '_>
        }))
    }
}

impl Capped {
    fn capped(&self, opts: &GenerateOptions) -> GenerateOptions {
        let mut o = opts.clone();
        o.max_new_tokens = o
            .max_new_tokens
            .min(self.cap.load(Ordering::Acquire).max(1));
        o
    }
}

/// [`Capped`]'s batch: the same cap on what is added.
struct CappedBatch<'a> {
    inner: Box<dyn RequestBatch + 'a>,
    cap: Arc<AtomicUsize>,
}

impl RequestBatch for CappedBatch<'_> {
    fn has_room(&self) -> bool {
        self.inner.has_room()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn add(
        &mut self,
        voice: Option<&Path>,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<u64, ModelError> {
        let mut o = opts.clone();
        o.max_new_tokens = o
            .max_new_tokens
            .min(self.cap.load(Ordering::Acquire).max(1));
        self.inner.add(voice, text, &o)
    }
    fn step(&mut self, emit: &mut dyn FnMut(u64, BatchItem)) {
        self.inner.step(emit)
    }
    fn cancel(&mut self, id: u64) {
        self.inner.cancel(id)
    }
    fn timings(&self) -> Option<chatterbox_pipeline::BatchTimings> {
        self.inner.timings()
    }
    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Option<Result<(), ModelError>> {
        self.inner.save_voice(audio, path)
    }
}

/// One memory reading, after the device has finished its queued work.
fn sample(dev: &Device) -> MemorySample {
    // orders the memory reading after the work queued so far (measurement only)
    let _ = dev.synchronize();
    let gpu = chatterbox_pipeline::device_memory(dev).map(|m| m.used_bytes);
    MemorySample::from_bytes(chatterbox_pipeline::resident_memory_bytes(), gpu)
}

/// What one request gave.
#[derive(Debug)]
struct Outcome {
    /// ms from sending to the first body byte.
    ttfb: f64,
    /// ms from sending to the end of the body.
    latency: f64,
    /// Seconds of audio received.
    audio_s: f64,
    /// Worst playback margin (ms; < 0: underrun).
    margin: f64,
    /// Why the request failed, if it did.
    error: Option<String>,
    /// The answer was the server's `no_speech` 500 (T3 drew its stop token first for this
    /// text and seed: a random-weights draw, as the reference would fail).
    no_speech: bool,
    /// A `no_speech` answer that the same request sent alone gave again: the model's answer
    /// for this text and seed, not a fault of the batch. Counted in `*_no_speech`, not in
    /// `*_errors`.
    no_speech_alone: bool,
}

impl Outcome {
    fn failed(t0: Instant, why: String) -> Self {
        Self {
            ttfb: f64::NAN,
            latency: t0.elapsed().as_secs_f64() * 1e3,
            audio_s: 0.0,
            margin: f64::NAN,
            error: Some(why),
            no_speech: false,
            no_speech_alone: false,
        }
    }

    /// Whether this outcome is an error of the serving (not a `no_speech` answer reproduced
    /// alone).
    fn is_error(&self) -> bool {
        self.error.is_some() && !self.no_speech_alone
    }
}

/// Sends one streaming speech request and reads its body piece by piece.
async fn request(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Outcome {
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
        let text = resp.text().await.unwrap_or_default();
        let code = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        let mut o = Outcome::failed(t0, format!("{status}: {}", text.trim()));
        o.no_speech = code.as_deref() == Some("no_speech");
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
        no_speech: false,
        no_speech_alone: false,
    }
}

/// Sends each `no_speech` answer of `out` (requests numbered from `first`) again, alone; marks
/// those that give `no_speech` again (the model's answer for that text and seed). Returns how
/// many did.
async fn confirm_no_speech(
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

/// The JSON body of request `i`.
fn body(model: ModelId, input: &str, i: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "model": model.name(),
        "input": input,
        "voice": "alloy",
        "response_format": "pcm",
        "stream_format": "audio",
        "seed": i,
    }))
    .unwrap_or_default()
}

/// `clients` concurrent clients send `total` requests (`input(i)` for request `i`, numbered
/// from `first`); the outcomes in request order and the wall seconds.
async fn run_level(
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

/// Nearest-rank percentile `p` (0..=1) of `v`; NaN when empty.
fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let k = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[k - 1]
}

/// Prints up to three errors of `out`; returns how many there were (`no_speech` answers that
/// the request alone gave again are not errors).
fn count_errors(label: &str, out: &[Outcome]) -> usize {
    let errors: Vec<&String> = out
        .iter()
        .filter(|o| o.is_error())
        .filter_map(|o| o.error.as_ref())
        .collect();
    for e in errors.iter().take(3) {
        eprintln!("{label}: error: {e}");
    }
    errors.len()
}

/// The load levels' records; the number of errors and the largest level without underrun.
fn report_level(
    bench: &mut BenchRun,
    clients: usize,
    out: &[Outcome],
    wall: f64,
    tokens: usize,
) -> (usize, bool) {
    let ok: Vec<&Outcome> = out.iter().filter(|o| o.error.is_none()).collect();
    let ttfb: Vec<f64> = ok.iter().map(|o| o.ttfb).collect();
    let lat: Vec<f64> = ok.iter().map(|o| o.latency).collect();
    let audio: f64 = ok.iter().map(|o| o.audio_s).sum();
    let errors = count_errors(&format!("c{clients}"), out);
    let no_speech = out.iter().filter(|o| o.no_speech_alone).count();
    let underruns = ok.iter().filter(|o| o.margin < 0.0).count();
    let worst = ok.iter().map(|o| o.margin).fold(f64::INFINITY, f64::min);
    let n = out.len();
    let what = format!("{n} requests, {clients} clients, pcm stream, cap {tokens} tokens");
    let p = format!("c{clients}");
    bench.push_value(
        &format!("{p}_ttfb_p50"),
        format!("ms to first body byte, p50, {what}"),
        percentile(&ttfb, 0.5),
    );
    bench.push_value(
        &format!("{p}_ttfb_p95"),
        format!("ms to first body byte, p95, {what}"),
        percentile(&ttfb, 0.95),
    );
    bench.push_value(
        &format!("{p}_latency_p50"),
        format!("ms to last body byte, p50, {what}"),
        percentile(&lat, 0.5),
    );
    bench.push_value(
        &format!("{p}_latency_p95"),
        format!("ms to last body byte, p95, {what}"),
        percentile(&lat, 0.95),
    );
    bench.push_value(
        &format!("{p}_rtf"),
        format!("audio s delivered / wall s ({audio:.1} / {wall:.1}; > 1 keeps up), {what}"),
        audio / wall,
    );
    bench.push_value(
        &format!("{p}_audio_s"),
        format!("seconds of audio per request, mean (not ms), {what}"),
        if ok.is_empty() {
            f64::NAN
        } else {
            audio / ok.len() as f64
        },
    );
    bench.push_value(
        &format!("{p}_audio_min_s"),
        format!("seconds of audio of the shortest request (not ms), {what}"),
        ok.iter().map(|o| o.audio_s).fold(f64::NAN, f64::min),
    );
    bench.push_value(
        &format!("{p}_errors"),
        format!("count: non-200, broken or empty bodies (must be 0), {what}"),
        errors as f64,
    );
    bench.push_value(
        &format!("{p}_no_speech"),
        format!("count: no_speech answers that the request alone gave again, {what}"),
        no_speech as f64,
    );
    bench.push_value(
        &format!("{p}_underruns"),
        format!("count: requests whose playback from the first byte ran dry, {what}"),
        underruns as f64,
    );
    bench.push_value(
        &format!("{p}_worst_margin"),
        format!("ms, worst playback margin over requests (< 0: underrun), {what}"),
        if worst.is_finite() { worst } else { f64::NAN },
    );
    (errors, underruns == 0 && errors == 0)
}

fn parse_clients(s: &str) -> anyhow::Result<Vec<usize>> {
    let v = s
        .split(',')
        .map(|x| x.trim().parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("CHATTERBOX_SERVE_CLIENTS={s:?}: {e}"))?;
    anyhow::ensure!(
        v.iter().all(|&n| n > 0),
        "CHATTERBOX_SERVE_CLIENTS: zero clients"
    );
    Ok(v)
}

/// Polls `/ready` until it answers 200 (the model loaded and its voice prepared).
async fn wait_ready(base: &str, server: &tokio::task::JoinHandle<()>) -> anyhow::Result<()> {
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
async fn upload_voices(
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

async fn bench_main() -> anyhow::Result<()> {
    let threads = env_usize("CHATTERBOX_BENCH_THREADS", 1);
    let gpus = env_usize("CHATTERBOX_SERVE_GPUS", 1).max(1);
    let dev = test_device("CHATTERBOX_BENCH_DEVICE")?;
    let dtype = bench_dtype(&dev);
    let (devs, device) = if dev.is_cuda() && gpus > 1 {
        // the other GPUs of the host, after the one the variable names (GPU 0 for `cuda`)
        let rest = (1..gpus).map(chatterbox_cuda::open);
        let devs = std::iter::once(Ok(dev.clone())).chain(rest);
        (
            devs.collect::<Result<Vec<_>, _>>()?,
            format!("cuda x{gpus}"),
        )
    } else {
        (vec![dev.clone()], device_name(&dev).to_string())
    };
    let variant = std::env::var("CHATTERBOX_SERVE_VARIANT").unwrap_or_else(|_| "turbo".into());
    let clients = parse_clients(
        &std::env::var("CHATTERBOX_SERVE_CLIENTS").unwrap_or_else(|_| "1,2,4,8".into()),
    )?;
    let requests = env_usize("CHATTERBOX_SERVE_REQUESTS", 40).max(1);
    let tokens = env_usize("CHATTERBOX_SERVE_TOKENS", 125).max(1);
    let mem_requests = env_usize("CHATTERBOX_SERVE_MEMORY_REQUESTS", 1000);
    let mem_clients = env_usize("CHATTERBOX_SERVE_MEMORY_CLIENTS", 8).max(1);
    let mem_tokens = env_usize("CHATTERBOX_SERVE_MEMORY_TOKENS", 20).max(1);
    let max_growth = env_f64("CHATTERBOX_SERVE_MAX_GROWTH_MB", 64.0);
    let upload_every = env_f64("CHATTERBOX_SERVE_UPLOAD_EVERY_S", 0.0);
    let watermark = std::env::var("CHATTERBOX_SERVE_WATERMARK").ok();

    let (model, exaggeration, marker) = match variant.as_str() {
        "turbo" => (ModelId::Turbo, 0.0, "t3_turbo_v1.safetensors"),
        "english" => (ModelId::English, 0.5, "t3_cfg.safetensors"),
        v => anyhow::bail!("CHATTERBOX_SERVE_VARIANT={v:?}: turbo or english"),
    };
    let dir = full_size_checkpoint(
        checkpoint_dir("CHATTERBOX_SERVE_CKPT", &variant),
        &variant,
        marker,
    )?;
    let cap = Arc::new(AtomicUsize::new(tokens));
    let batching = chatterbox_pipeline::BatchOptions::default()
        .with_slots(env_usize("CHATTERBOX_SERVE_BATCH", 0))
        .with_positions(tokens.max(mem_tokens) + 512);
    let loader = |dev: Device| {
        let (dir, cap, batching) = (dir.clone(), cap.clone(), batching.clone());
        let watermark = watermark.clone();
        move || -> Result<Vec<Box<dyn SpeechModel>>, ModelError> {
            let t0 = Instant::now();
            let clip = VoiceClip::from_parts(speech_like(S3GEN_SR, 10.0), speech_like(S3_SR, 10.0));
            let marker: Option<Arc<dyn Watermarker>> = match watermark.as_deref() {
                None => None,
                Some("random") => Some(Arc::new(PerthWatermarker::random(0x5eed, &dev)?)),
                Some(path) => Some(perth_watermarker(Path::new(path), &dev)?),
            };
            let inner = if model == ModelId::Turbo {
                let mut tts = ChatterboxTurboTts::from_dir(&dir, false, &dev, dtype)?
                    .with_watermarker(marker);
                tts.prepare_conditionals_from_clip(&clip, exaggeration)?;
                PipelineModel::from(tts)
            } else {
                let mut tts = ChatterboxTts::from_dir(&dir, &dev, dtype)?.with_watermarker(marker);
                tts.prepare_conditionals_from_clip(&clip, exaggeration)?;
                PipelineModel::from(tts)
            };
            eprintln!(
                "loaded {} from {} and prepared the voice in {:.1} s",
                model.name(),
                dir.display(),
                t0.elapsed().as_secs_f64()
            );
            let inner = inner
                .with_batching(batching)
                .with_flow_rows(env_usize("CHATTERBOX_SERVE_FLOW_ROWS", FLOW_ROWS));
            Ok(vec![Box::new(Capped { inner, cap })])
        }
    };
    let mut config = ServerConfig::default();
    config.addr = ([127, 0, 0, 1], 0).into();
    config.queue_capacity = clients
        .iter()
        .copied()
        .chain([mem_clients])
        .max()
        .unwrap_or(8)
        + 8;
    // A slow device must not turn a deep queue into 504s: the bench measures, not times out.
    config.request_timeout = Duration::from_secs(3600);
    let voices =
        std::env::temp_dir().join(format!("chatterbox-serve-bench-{}", std::process::id()));
    if upload_every > 0.0 {
        config.voices_dir = Some(voices.clone());
    }
    let workers = devs
        .iter()
        .enumerate()
        .map(|(i, d)| DeviceModels::new(format!("{device}:{i}"), loader(d.clone())))
        .collect();
    let server = Server::bind(config, workers).await?;
    let base = format!("http://{}", server.local_addr()?);
    let url = format!("{base}/v1/audio/speech");
    eprintln!("serving {} on {base} ({device})", model.name());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        if let Err(e) = server
            .run(async {
                let _ = stop_rx.await;
            })
            .await
        {
            eprintln!("server: {e}");
        }
    });
    wait_ready(&base, &handle).await?;
    let loaded = sample(&dev);

    let mut bench = BenchRun::new("serve", &device, threads, 32);
    let (warm, _) = run_level(&url, model, 1, 1, 1_000_000, sentence).await;
    if let Some(w) = warm.first() {
        eprintln!(
            "warm-up: ttfb {:.1} ms, latency {:.1} ms, {:.2} s of audio{}",
            w.ttfb,
            w.latency,
            w.audio_s,
            w.error
                .as_ref()
                .map_or(String::new(), |e| format!(", error: {e}"))
        );
    }

    let mut errors = 0;
    let mut best = 0;
    for &n in &clients {
        let (mut out, wall) = run_level(&url, model, n, requests, 0, sentence).await;
        confirm_no_speech(&url, model, &mut out, 0, sentence).await;
        let o = &out;
        eprintln!(
            "c{n}: {} requests in {wall:.1} s, ttfb p50 {:.0} ms, latency p50 {:.0} ms, \
             {:.1} s of audio",
            o.len(),
            percentile(&o.iter().map(|x| x.ttfb).collect::<Vec<_>>(), 0.5),
            percentile(&o.iter().map(|x| x.latency).collect::<Vec<_>>(), 0.5),
            o.iter().map(|x| x.audio_s).sum::<f64>()
        );
        let (e, clean) = report_level(&mut bench, n, &out, wall, tokens);
        errors += e;
        if clean {
            best = best.max(n);
        }
    }
    bench.push_value(
        "max_clients_without_underrun",
        format!(
            "count: largest concurrency of {clients:?} with no underrun and no error \
             ({requests} requests, cap {tokens} tokens)"
        ),
        best as f64,
    );

    // Memory: many short requests.
    cap.store(mem_tokens, Ordering::Release);
    let short = |i: usize| SHORT[i % SHORT.len()].to_string();
    let (mut warm, _) = run_level(&url, model, mem_clients, mem_clients, 2_000_000, short).await;
    let mut no_speech = confirm_no_speech(&url, model, &mut warm, 2_000_000, short).await;
    let warm_errors = count_errors("memory warm-up", &warm);
    let before = sample(&dev);
    eprintln!(
        "memory: loaded RSS {:.0} MB{}; before RSS {:.0} MB{}",
        loaded.rss,
        loaded.gpu_text(),
        before.rss,
        before.gpu_text()
    );
    let uploading = Arc::new(std::sync::atomic::AtomicBool::new(upload_every > 0.0));
    let uploader = tokio::spawn(upload_voices(
        format!("{base}/v1/voices"),
        upload_every,
        uploading.clone(),
    ));
    let (mut out, wall) = run_level(&url, model, mem_clients, mem_requests, 3_000_000, short).await;
    uploading.store(false, Ordering::Release);
    let uploads = uploader.await.unwrap_or_default();
    no_speech += confirm_no_speech(&url, model, &mut out, 3_000_000, short).await;
    let after = sample(&dev);
    let mem_errors = warm_errors + count_errors("memory", &out);
    let upload_errors = uploads.iter().filter(|u| u.is_err()).count();
    for e in uploads.iter().filter_map(|u| u.as_ref().err()).take(3) {
        eprintln!("upload: error: {e}");
    }
    errors += mem_errors + upload_errors;
    let what = format!(
        "{mem_requests} requests, {mem_clients} clients, cap {mem_tokens} tokens, MB (10^6 bytes)"
    );
    bench.push_value(
        "mem_rss_loaded_mb",
        format!("RSS once ready, {what}"),
        loaded.rss,
    );
    bench.push_value(
        "mem_rss_before_mb",
        format!("RSS after the load levels and a warm-up round, {what}"),
        before.rss,
    );
    bench.push_value(
        "mem_rss_after_mb",
        format!("RSS after the requests, {what}"),
        after.rss,
    );
    let growth = after.rss - before.rss;
    bench.push_value(
        "mem_rss_growth_mb",
        format!("RSS after - before, {what}"),
        growth,
    );
    if let (Some(l), Some(b), Some(a)) = (loaded.gpu, before.gpu, after.gpu) {
        let what = format!("device used memory (total - free), {what}");
        bench.push_value("mem_gpu_used_loaded_mb", format!("once ready, {what}"), l);
        bench.push_value("mem_gpu_used_before_mb", format!("before, {what}"), b);
        bench.push_value("mem_gpu_used_after_mb", format!("after, {what}"), a);
        bench.push_value(
            "mem_gpu_used_growth_mb",
            format!("after - before, {what}"),
            a - b,
        );
    }
    bench.push_value(
        "mem_errors",
        format!("count: non-200, broken or empty bodies (must be 0), {what}"),
        mem_errors as f64,
    );
    bench.push_value(
        "mem_no_speech",
        format!("count: no_speech answers that the request alone gave again, {what}"),
        no_speech as f64,
    );
    bench.push_value(
        "mem_wall_s",
        format!("seconds (not ms) for the requests, {what}"),
        wall,
    );
    let ttfb: Vec<f64> = out
        .iter()
        .filter(|o| o.error.is_none())
        .map(|o| o.ttfb)
        .collect();
    bench.push_value(
        "mem_ttfb_p50",
        format!("ms to first body byte, p50, {what}"),
        percentile(&ttfb, 0.5),
    );
    bench.push_value(
        "mem_ttfb_p95",
        format!("ms to first body byte, p95, {what}"),
        percentile(&ttfb, 0.95),
    );
    if upload_every > 0.0 {
        let what = format!("voice uploads every {upload_every} s during the memory phase");
        let ms: Vec<f64> = uploads
            .iter()
            .filter_map(|u| u.as_ref().ok().copied())
            .collect();
        bench.push_value(
            "mem_uploads",
            format!("count: {what}"),
            uploads.len() as f64,
        );
        bench.push_value(
            "mem_upload_errors",
            format!("count: failed uploads (must be 0), {what}"),
            upload_errors as f64,
        );
        bench.push_value(
            "mem_upload_p95_ms",
            format!("ms from request to 201, p95, {what}"),
            percentile(&ms, 0.95),
        );
        let _ = std::fs::remove_dir_all(&voices);
    }

    let _ = stop_tx.send(());
    if tokio::time::timeout(Duration::from_secs(60), handle)
        .await
        .is_err()
    {
        eprintln!("the server did not stop within 60 s");
    }
    bench.emit()?;
    anyhow::ensure!(errors == 0, "{errors} requests failed");
    anyhow::ensure!(
        growth <= max_growth,
        "RSS grew by {growth:.1} MB over {mem_requests} requests \
         (> CHATTERBOX_SERVE_MAX_GROWTH_MB = {max_growth})"
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // RUST_LOG=chatterbox_server=info shows the workers' logs (e.g. where a batch's time went)
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?
        .block_on(bench_main())
}
