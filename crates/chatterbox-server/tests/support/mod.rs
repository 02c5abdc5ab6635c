//! Shared by the server tests: a fake model (chunks of a tone at a chosen pace, counting what
//! was pulled), the tiny English checkpoint built from the parity fixtures, a server on an
//! ephemeral loopback port, and a few HTTP helpers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)] // each test binary uses a part; a failing unwrap is a failing test

use chatterbox_pipeline::GenerateOptions;
use chatterbox_server::{
    BatchItem, ChunkIter, DeviceModels, ModelError, ModelId, RequestBatch, Server, ServerConfig,
    SpeechModel,
};
use chatterbox_testkit::fixtures_root;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A model that speaks `chunks` chunks of `chunk_len` samples, sleeping `delay` before each.
/// Text `fail` fails at once; `fail-late` after one chunk.
#[derive(Clone)]
pub struct Fake {
    pub id: ModelId,
    pub chunks: usize,
    pub chunk_len: usize,
    pub delay: Duration,
    /// Chunks handed out, over every request.
    pub pulled: Arc<AtomicUsize>,
    /// The voice file of the last request (`None`: built-in).
    pub last_voice: Arc<Mutex<Option<PathBuf>>>,
}

impl Fake {
    pub fn new(chunks: usize, chunk_len: usize, delay: Duration) -> Self {
        Self {
            id: ModelId::English,
            chunks,
            chunk_len,
            delay,
            pulled: Arc::new(AtomicUsize::new(0)),
            last_voice: Arc::new(Mutex::new(None)),
        }
    }

    pub fn device(&self) -> DeviceModels {
        DeviceModels::loaded("fake", vec![Box::new(self.clone())])
    }
}

impl SpeechModel for Fake {
    fn id(&self) -> ModelId {
        self.id
    }

    fn default_options(&self) -> GenerateOptions {
        GenerateOptions::english()
    }

    fn use_voice(&mut self, path: Option<&Path>) -> Result<(), ModelError> {
        if let Some(p) = path {
            let bytes = std::fs::read(p)?;
            if bytes != b"fake-voice" {
                return Err("not a fake voice".into());
            }
        }
        *self.last_voice.lock().unwrap() = path.map(Path::to_path_buf);
        Ok(())
    }

    fn save_voice(&mut self, audio: &chatterbox_dsp::Audio, path: &Path) -> Result<(), ModelError> {
        if audio.samples.is_empty() {
            return Err("empty clip".into());
        }
        std::fs::write(path, b"fake-voice")?;
        Ok(())
    }

    fn stream<'a>(
        &'a self,
        text: &str,
        _opts: &GenerateOptions,
    ) -> Result<ChunkIter<'a>, ModelError> {
        if text == "fail" {
            return Err("the fake model fails".into());
        }
        let late = text == "fail-late";
        let this = self.clone();
        Ok(Box::new((0..self.chunks).map(move |i| {
            std::thread::sleep(this.delay);
            if late && i == 1 {
                return Err("failed late".into());
            }
            this.pulled.fetch_add(1, Ordering::SeqCst);
            Ok((0..this.chunk_len)
                .map(|j| ((i * this.chunk_len + j) as f32 * 0.03).sin() * 0.4)
                .collect::<Vec<f32>>()
                .into())
        })))
    }
}

/// What a test's fake model speaks; [`Voiceless`] makes it a [`SpeechModel`].
pub trait Speaks: Send {
    /// The chunks of `text` (the request's options are not read).
    fn speak(&self, text: &str) -> Result<ChunkIter<'_>, ModelError>;

    /// As [`SpeechModel::slots`].
    fn slots(&self) -> usize {
        1
    }

    /// As [`SpeechModel::batch`].
    fn batch(&self) -> Option<Result<Box<dyn RequestBatch + '_>, ModelError>> {
        None
    }
}

/// A [`Speaks`] as the English model with no voices of its own: any voice file is taken (it
/// speaks as it always does), saving one fails.
pub struct Voiceless<M>(pub M);

impl<M: Speaks> SpeechModel for Voiceless<M> {
    fn id(&self) -> ModelId {
        ModelId::English
    }

    fn default_options(&self) -> GenerateOptions {
        GenerateOptions::english()
    }

    fn use_voice(&mut self, _path: Option<&Path>) -> Result<(), ModelError> {
        Ok(())
    }

    fn save_voice(&mut self, _: &chatterbox_dsp::Audio, _: &Path) -> Result<(), ModelError> {
        Err("this fake model has no voices".into())
    }

    fn stream<'a>(&'a self, text: &str, _: &GenerateOptions) -> Result<ChunkIter<'a>, ModelError> {
        self.0.speak(text)
    }

    fn slots(&self) -> usize {
        self.0.slots()
    }

    fn batch(&self) -> Option<Result<Box<dyn RequestBatch + '_>, ModelError>> {
        self.0.batch()
    }
}

/// A fake model that speaks requests together, one chunk per request and round, in a
/// [`Rounds`] batch.
pub trait RoundModel {
    /// What the batch keeps of a request.
    type Request: 'static;

    /// Requests spoken at once (1: no batch).
    fn slots(&self) -> usize;

    /// The sleep before each round.
    fn round_delay(&self) -> Duration;

    /// A request for `text` in the voice saved at `voice`, or why it is refused.
    fn admit(&self, voice: Option<&Path>, text: &str) -> Result<Self::Request, ModelError>;

    /// The request's item of a round: it leaves the batch with its last audio or a failure.
    fn round(&self, request: &mut Self::Request) -> BatchItem;

    /// As [`RequestBatch::save_voice`] (the default: it cannot).
    fn save_voice_between_rounds(
        &self,
        _: &chatterbox_dsp::Audio,
        _: &Path,
    ) -> Option<Result<(), ModelError>> {
        None
    }
}

/// The batch of a [`RoundModel`].
pub struct Rounds<'a, M: RoundModel> {
    model: &'a M,
    reqs: BTreeMap<u64, M::Request>,
    next: u64,
}

impl<'a, M: RoundModel> Rounds<'a, M> {
    /// The model's batch, as [`SpeechModel::batch`] gives it (`None` with one slot).
    pub fn of(model: &'a M) -> Option<Result<Box<dyn RequestBatch + 'a>, ModelError>> {
        (model.slots() > 1).then(|| {
            let b: Box<dyn RequestBatch + 'a> = Box::new(Self {
                model,
                reqs: BTreeMap::new(),
                next: 0,
            });
            Ok(b)
        })
    }
}

impl<M: RoundModel> RequestBatch for Rounds<'_, M> {
    fn has_room(&self) -> bool {
        self.reqs.len() < self.model.slots()
    }

    fn len(&self) -> usize {
        self.reqs.len()
    }

    fn add(
        &mut self,
        voice: Option<&Path>,
        text: &str,
        _opts: &GenerateOptions,
    ) -> Result<u64, ModelError> {
        let request = self.model.admit(voice, text)?;
        let id = self.next;
        self.next += 1;
        self.reqs.insert(id, request);
        Ok(id)
    }

    fn step(&mut self, emit: &mut dyn FnMut(u64, BatchItem)) {
        std::thread::sleep(self.model.round_delay());
        let mut gone = Vec::new();
        for (id, request) in &mut self.reqs {
            let item = self.model.round(request);
            if matches!(
                item,
                BatchItem::Failed(_) | BatchItem::Audio { last: true, .. }
            ) {
                gone.push(*id);
            }
            emit(*id, item);
        }
        for id in gone {
            self.reqs.remove(&id);
        }
    }

    fn cancel(&mut self, id: u64) {
        self.reqs.remove(&id);
    }

    fn save_voice(
        &mut self,
        audio: &chatterbox_dsp::Audio,
        path: &Path,
    ) -> Option<Result<(), ModelError>> {
        self.model.save_voice_between_rounds(audio, path)
    }
}

/// A running server on 127.0.0.1 and an ephemeral port.
pub struct TestServer {
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<Result<(), chatterbox_server::ServerError>>,
}

impl TestServer {
    pub async fn start(mut config: ServerConfig, devices: Vec<DeviceModels>) -> Self {
        config.addr = "127.0.0.1:0".parse().unwrap();
        let server = Server::bind(config, devices).await.unwrap();
        let base = format!("http://{}", server.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        let s = Self {
            base,
            stop: Some(tx),
            handle,
        };
        let client = reqwest::Client::new();
        for _ in 0..600 {
            if let Ok(r) = client.get(s.url("/ready")).send().await {
                if r.status() == 200 {
                    return s;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the server did not get ready in 30 s");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The body of a GET of `path`, as text.
    pub async fn get_text(&self, path: &str) -> String {
        let r = reqwest::get(self.url(path)).await.unwrap();
        r.text().await.unwrap()
    }

    /// Signals shutdown (without waiting).
    pub fn signal_stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Shuts down and waits for the server to stop.
    pub async fn stop(mut self) {
        self.signal_stop();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("the server did not stop in 30 s")
            .unwrap()
            .unwrap();
    }
}

/// POSTs a JSON speech request.
pub async fn speech(base: &TestServer, body: serde_json::Value) -> reqwest::Response {
    post_json(base.url("/v1/audio/speech"), &body).await
}

/// A POST of `body` as JSON to `url` on the client `c` (to keep its connection or add headers).
pub fn json_post(
    c: &reqwest::Client,
    url: String,
    body: &serde_json::Value,
) -> reqwest::RequestBuilder {
    c.post(url)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
}

/// POSTs `body` as JSON to `url` on a new client.
pub async fn post_json(url: String, body: &serde_json::Value) -> reqwest::Response {
    let c = reqwest::Client::new();
    json_post(&c, url, body).send().await.unwrap()
}

/// Uploads `wav` to the voice library of the server at `base` as voice `name`.
pub async fn upload_voice(base: &str, name: &str, wav: Vec<u8>) -> reqwest::Response {
    let file = reqwest::multipart::Part::bytes(wav).file_name("clip.wav");
    let form = reqwest::multipart::Form::new()
        .text("name", name.to_string())
        .part("file", file);
    reqwest::Client::new()
        .post(format!("{base}/v1/voices"))
        .multipart(form)
        .send()
        .await
        .unwrap()
}

/// Asserts an OpenAI error body with `status`; returns the error object.
pub async fn expect_error(r: reqwest::Response, status: u16) -> serde_json::Value {
    assert_eq!(r.status().as_u16(), status);
    let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    let e = v["error"].clone();
    assert!(e["message"].is_string(), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    e
}

/// A mono 16-bit WAV file of `samples` at `rate`.
pub fn wav_file(samples: &[f32], rate: u32) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
    for s in samples {
        w.write_sample((s.clamp(-1.0, 1.0) * 32767.0) as i16)
            .unwrap();
    }
    w.finalize().unwrap();
    out.into_inner()
}

fn pipeline_fixture(case: &str) -> HashMap<String, candle_core::Tensor> {
    candle_core::safetensors::load(
        fixtures_root().join(format!("pipeline/{case}.safetensors")),
        &candle_core::Device::Cpu,
    )
    .unwrap()
}

/// The reference clip of the english fixture (24 kHz).
pub fn ref_clip() -> Vec<f32> {
    pipeline_fixture("english")["in.ref_24k"]
        .to_dtype(candle_core::DType::F32)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
}

/// A fresh temporary directory, removed when the guard is dropped.
pub fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("chatterbox-server-test-{name}-"))
        .tempdir()
        .unwrap()
}

/// The tiny english fixture as a checkpoint directory (as the pipeline's fuzz tests build it),
/// with the fixture's `conds.pt` as the built-in voice (removed when the guard is dropped).
pub fn english_checkpoint(name: &str) -> tempfile::TempDir {
    let guard = temp_dir(name);
    let dir = guard.path();
    let t = pipeline_fixture("english");
    let write_part = |prefix: &str, file: &str| {
        let part: HashMap<String, candle_core::Tensor> = t
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
            .collect();
        candle_core::safetensors::save(&part, dir.join(file)).unwrap();
    };
    write_part("t3.", "t3_cfg.safetensors");
    write_part("s3gen.", "s3gen.safetensors");
    write_part("ve.", "ve.safetensors");
    let root = fixtures_root();
    std::fs::copy(
        root.join("text/assets/en/tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    std::fs::copy(root.join("pipeline/english_conds.pt"), dir.join("conds.pt")).unwrap();
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("pipeline/english.json")).unwrap())
            .unwrap();
    std::fs::write(
        dir.join(chatterbox_pipeline::CONFIG_FILE),
        meta["config"]["chatterbox"].to_string(),
    )
    .unwrap();
    guard
}

/// A server with `config` on a fresh tiny english checkpoint (named `name`; the guard keeps it
/// while the server runs), speaking up to `slots` requests at once (0: one at a time, as
/// [`tiny_english_device`]).
pub async fn tiny_english_server(
    name: &str,
    config: ServerConfig,
    slots: usize,
) -> (tempfile::TempDir, TestServer) {
    let dir = english_checkpoint(name);
    let device = tiny_english_device_batched(dir.path().to_path_buf(), slots, 1);
    (dir, TestServer::start(config, vec![device]).await)
}

/// A device with the tiny english model, loaded on its worker thread.
pub fn tiny_english_device(dir: PathBuf) -> DeviceModels {
    tiny_english_device_batched(dir, 0, 1)
}

/// [`tiny_english_device`] speaking up to `slots` requests at once (0: one at a time), the
/// chunks due sharing flow calls of up to `chunks_per_call`.
pub fn tiny_english_device_batched(
    dir: PathBuf,
    slots: usize,
    chunks_per_call: usize,
) -> DeviceModels {
    DeviceModels::new("cpu", move || {
        let tts = chatterbox_pipeline::ChatterboxTts::from_dir(
            &dir,
            &chatterbox_pipeline::Device::Cpu,
            chatterbox_pipeline::DType::F32,
        )?;
        let batching = chatterbox_pipeline::BatchOptions::default()
            .with_slots(slots)
            .with_positions(256)
            .with_bucket(32);
        let m: Box<dyn SpeechModel> = Box::new(
            chatterbox_server::PipelineModel::from(tts)
                .with_batching(batching)
                .with_chunks_per_call(chunks_per_call),
        );
        Ok(vec![m])
    })
}
