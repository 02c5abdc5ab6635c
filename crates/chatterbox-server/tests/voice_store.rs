//! The voice library keeps a voice's clip and derives each model's conditionals from it: a
//! voice uploaded under one model set speaks under another after a restart; parallel uploads of
//! one name leave one consistent voice; a kill during an upload leaves the old voice whole;
//! names the server maps elsewhere are refused; the earlier flat layout is still read; an
//! upload does not hold up speech while a batch runs. Fakes on loopback, and the tiny English
//! model for the exact equality of a voice analysed at upload and on first use.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod support;
#[path = "support/voice_fakes.rs"]
mod voice_fakes;

use chatterbox_server::{DeviceModels, ModelId, ServerConfig, SpeechModel};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::{expect_error, speech, upload_voice, wav_file, TestServer};
use voice_fakes::{digest, voice_text, StoreFake, LONG_STEPS};

fn config(dir: &Path) -> ServerConfig {
    let mut c = ServerConfig::default();
    c.voices_dir = Some(dir.to_path_buf());
    c
}

/// A server on the voice library `dir` with `fakes` on one device.
async fn serve_fakes(dir: &Path, fakes: &[&StoreFake]) -> TestServer {
    let models: Vec<Box<dyn SpeechModel>> = fakes
        .iter()
        .map(|f| Box::new((*f).clone()) as Box<dyn SpeechModel>)
        .collect();
    TestServer::start(config(dir), vec![DeviceModels::loaded("fakes", models)]).await
}

/// A distinct clip: `secs` of a tone at `hz`, as a 16-bit WAV at 24 kHz.
fn clip_wav(secs: f32, hz: f32) -> Vec<u8> {
    let n = (secs * 24_000.0) as usize;
    let samples: Vec<f32> = (0..n)
        .map(|i| (i as f32 * hz * std::f32::consts::TAU / 24_000.0).sin() * 0.4)
        .collect();
    wav_file(&samples, 24_000)
}

/// The clip the library keeps of an uploaded file.
fn kept(wav: &[u8]) -> chatterbox_dsp::Audio {
    chatterbox_dsp::audio::decode(wav.to_vec(), None).unwrap()
}

fn say(model: ModelId, voice: &str, input: &str) -> serde_json::Value {
    json!({"model": model.name(), "input": input, "voice": voice, "response_format": "pcm"})
}

/// Speaks `input` in `voice` under `model`, which must answer 200, and reads the answer whole.
async fn speak(s: &TestServer, model: ModelId, voice: &str, input: &str) {
    let r = speech(s, say(model, voice, input)).await;
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
}

/// The streamed request `long` in the built-in voice under `model`, answered 200.
async fn stream_long(s: &TestServer, model: ModelId) -> reqwest::Response {
    let mut long = say(model, "alloy", "long");
    long["stream_format"] = json!("audio");
    let r = speech(s, long).await;
    assert_eq!(r.status(), 200);
    r
}

async fn json_of(r: reqwest::Response) -> serde_json::Value {
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
}

async fn list(s: &TestServer) -> serde_json::Value {
    let text = s.get_text("/v1/voices").await;
    serde_json::from_str(&text).unwrap()
}

/// The live version directory of voice `name` in the library `dir`.
fn version(dir: &Path, name: &str) -> PathBuf {
    let current = std::fs::read_to_string(dir.join(name).join("current")).unwrap();
    dir.join(name).join(current.trim())
}

/// Entries of `dir` (one level), sorted, less the lock file (`.lock`: the library's commit
/// lock, a staging directory's lock), which stays.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|e| e != ".lock")
        .collect();
    v.sort();
    v
}

/// Asserts voice `name` is whole: its clip is `clip`, and `models` (exactly) have files
/// analysed from that clip.
fn assert_whole(dir: &Path, name: &str, clip: &chatterbox_dsp::Audio, models: &[ModelId]) {
    let v = version(dir, name);
    let stored = chatterbox_dsp::audio::load(v.join("clip.wav")).unwrap();
    assert_eq!(digest(&stored), digest(clip), "the clip is the upload's");
    let mut want: Vec<String> = models
        .iter()
        .map(|m| format!("{}.safetensors", m.name()))
        .collect();
    want.push("clip.wav".into());
    want.sort();
    assert_eq!(entries(&v), want);
    for m in models {
        let text = std::fs::read_to_string(v.join(format!("{}.safetensors", m.name()))).unwrap();
        assert_eq!(
            text,
            voice_text(*m, clip),
            "{m}: analysed from the same clip"
        );
    }
}

/// Asserts that `fake`'s last request spoke with the conditionals for `fake`'s model in the
/// live version of voice `name` in the library `dir`.
fn assert_spoke_with(fake: &StoreFake, dir: &Path, name: &str) {
    let file = version(dir, name).join(format!("{}.safetensors", fake.id.name()));
    assert_eq!(fake.last_voice.lock().unwrap().as_deref(), Some(&*file));
}

/// Copies a directory tree.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// Waits (5 s at most) until `fake` has logged `entry`.
async fn wait_for(fake: &StoreFake, entry: &str) {
    wait_for_nth(fake, entry, 1).await;
}

/// Waits (5 s at most) until `fake` has logged `entry` `n` times.
async fn wait_for_nth(fake: &StoreFake, entry: &str, n: usize) {
    let t0 = Instant::now();
    while fake.log().iter().filter(|e| *e == entry).count() < n {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no {entry:?} in {:?}",
            fake.log()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_uploaded_under_one_model_set_speaks_under_another_after_a_restart() {
    let dir = support::temp_dir("store-restart");
    let english = StoreFake::new(ModelId::English);
    let s = TestServer::start(config(dir.path()), vec![english.device()]).await;
    let wav = clip_wav(2.0, 220.0);
    let r = upload_voice(&s.base, "amy", wav.clone()).await;
    assert_eq!(r.status(), 201);
    let body: serde_json::Value = json_of(r).await;
    assert_eq!(body["models"], json!(["chatterbox"]));
    assert_eq!(body["replaced"], false);
    s.stop().await;
    assert_whole(dir.path(), "amy", &kept(&wav), &[ModelId::English]);

    // another model set: Turbo one request at a time, multilingual in batches
    let turbo = StoreFake::new(ModelId::Turbo);
    let mtl = StoreFake::batching(ModelId::Multilingual, 3);
    let s = serve_fakes(dir.path(), &[&turbo, &mtl]).await;
    let l = list(&s).await;
    assert_eq!(l["data"][0]["id"], "amy");
    assert_eq!(l["data"][0]["models"], json!(["chatterbox"]));
    assert_eq!(l["data"][0]["clip"], true);
    let v = version(dir.path(), "amy");
    let turbo_file = v.join("chatterbox-turbo.safetensors");
    assert!(!turbo_file.exists());
    speak(&s, ModelId::Turbo, "amy", "hello").await;
    assert_eq!(turbo.analyses(), 1, "derived on first use");
    assert_eq!(
        turbo.last_voice.lock().unwrap().as_deref(),
        Some(&*turbo_file)
    );
    // stored for the next time
    speak(&s, ModelId::Turbo, "amy", "again").await;
    assert_eq!(turbo.analyses(), 1, "not analysed twice");
    // a batching model derives it too
    speak(&s, ModelId::Multilingual, "amy", "hola").await;
    assert_eq!(mtl.analyses(), 1);
    assert_whole(
        dir.path(),
        "amy",
        &kept(&wav),
        &[ModelId::English, ModelId::Multilingual, ModelId::Turbo],
    );
    let l = list(&s).await;
    assert_eq!(
        l["data"][0]["models"],
        json!(["chatterbox", "chatterbox-multilingual", "chatterbox-turbo"])
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_uploads_of_one_name_leave_one_consistent_voice() {
    let dir = support::temp_dir("store-parallel");
    let mut english = StoreFake::new(ModelId::English);
    english.analysis_delay = Duration::from_millis(30);
    let mut turbo = StoreFake::batching(ModelId::Turbo, 2);
    turbo.analysis_delay = Duration::from_millis(20);
    let s = TestServer::start(config(dir.path()), vec![english.device(), turbo.device()]).await;
    let wavs: Vec<Vec<u8>> = (0..3)
        .map(|i| clip_wav(1.0, 200.0 + 50.0 * i as f32))
        .collect();
    for round in 0..2 {
        let sent = wavs.iter().map(|w| upload_voice(&s.base, "amy", w.clone()));
        let responses = futures_util::future::join_all(sent).await;
        let mut replaced = Vec::new();
        for r in responses {
            assert_eq!(r.status(), 201);
            let b: serde_json::Value = json_of(r).await;
            replaced.push(b["replaced"].as_bool().unwrap());
        }
        // one after the other: only the very first upload found no voice
        let fresh = replaced.iter().filter(|r| !**r).count();
        assert_eq!(fresh, usize::from(round == 0), "{replaced:?}");
        let stored =
            chatterbox_dsp::audio::load(version(dir.path(), "amy").join("clip.wav")).unwrap();
        let which = wavs
            .iter()
            .position(|w| digest(&kept(w)) == digest(&stored))
            .expect("the clip is one of the uploads");
        assert_whole(
            dir.path(),
            "amy",
            &kept(&wavs[which]),
            &[ModelId::English, ModelId::Turbo],
        );
        // one version, nothing staged
        assert_eq!(entries(&dir.path().join("amy")).len(), 2);
        assert_eq!(entries(dir.path()), ["amy"]);
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_an_upload_leaves_the_old_voice_whole() {
    let dir = support::temp_dir("store-kill");
    let english = StoreFake::new(ModelId::English);
    let s = TestServer::start(config(dir.path()), vec![english.device()]).await;
    let old = clip_wav(1.0, 300.0);
    assert_eq!(
        upload_voice(&s.base, "amy", old.clone()).await.status(),
        201
    );
    // the next upload is held in its analysis: what a kill now would leave on disk is
    // copied aside
    english.gate.close();
    let new = clip_wav(1.5, 400.0);
    let uploading = {
        let (base, new) = (s.base.clone(), new.clone());
        tokio::spawn(async move { upload_voice(&base, "amy", new).await.status() })
    };
    wait_for_nth(&english, "analysing:chatterbox", 2).await;
    let killed = support::temp_dir("store-killed");
    copy_dir(dir.path(), killed.path());
    english.gate.open();
    assert_eq!(uploading.await.unwrap(), 201);
    s.stop().await;
    assert_whole(dir.path(), "amy", &kept(&new), &[ModelId::English]);

    // the copy: the old voice, the new upload's staging; and, as kills at the commit's later
    // steps leave, the new upload moved in as a version no pointer names and a pointer
    // being written
    let staged: Vec<String> = entries(killed.path())
        .into_iter()
        .filter(|e| e.starts_with(".upload-"))
        .collect();
    assert_eq!(staged.len(), 1, "{:?}", entries(killed.path()));
    let staging = killed.path().join(&staged[0]);
    assert!(staging.join("clip.wav").is_file());
    copy_dir(&staging, &killed.path().join("amy/v-9-crashed"));
    std::fs::write(
        killed.path().join("amy/.current-v-9-crashed"),
        "v-9-crashed\n",
    )
    .unwrap();
    // and a first upload of another name, moved in but never pointed to
    copy_dir(&staging, &killed.path().join("bob/v-9-crashed"));

    let english = StoreFake::new(ModelId::English);
    let s = TestServer::start(config(killed.path()), vec![english.device()]).await;
    assert_whole(killed.path(), "amy", &kept(&old), &[ModelId::English]);
    assert_eq!(entries(killed.path()), ["amy"], "staging and bob are gone");
    assert_eq!(
        entries(&killed.path().join("amy")).len(),
        2,
        "current and one version"
    );
    let l = list(&s).await;
    assert_eq!(l["data"].as_array().unwrap().len(), 1);
    speak(&s, ModelId::English, "amy", "hello").await;
    assert_spoke_with(&english, killed.path(), "amy");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_names_are_refused_and_a_reupload_replaces() {
    let dir = support::temp_dir("store-reserved");
    let english = StoreFake::new(ModelId::English);
    let mut c = config(dir.path());
    c.voice_aliases
        .insert("narrator".to_string(), "amy".to_string());
    let s = TestServer::start(c, vec![english.device()]).await;
    for name in ["alloy", "default", "shimmer", "verse", "narrator"] {
        let e = expect_error(upload_voice(&s.base, name, clip_wav(1.0, 200.0)).await, 400).await;
        assert_eq!(e["param"], "name", "{name}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("reserved"), "{name}: {msg}");
    }
    assert!(entries(dir.path()).is_empty());
    // the rule is the server's mapping, which is exact: `Alloy` is a library voice
    let r = upload_voice(&s.base, "Alloy", clip_wav(1.0, 200.0)).await;
    assert_eq!(r.status(), 201);
    speak(&s, ModelId::English, "Alloy", "hi").await;
    assert!(english.last_voice.lock().unwrap().is_some());
    // a re-upload replaces the voice, and says so
    let second = clip_wav(1.2, 250.0);
    let r = upload_voice(&s.base, "Alloy", second.clone()).await;
    assert_eq!(r.status(), 201);
    let b: serde_json::Value = json_of(r).await;
    assert_eq!(b["replaced"], true);
    assert_whole(dir.path(), "Alloy", &kept(&second), &[ModelId::English]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clip_longer_than_the_decode_limit_is_a_400_and_the_server_still_serves() {
    let dir = support::temp_dir("store-too-long");
    let english = StoreFake::new(ModelId::English);
    let s = TestServer::start(config(dir.path()), vec![english.device()]).await;
    // a 1 s WAV whose header claims 3 hours (what a decompression bomb looks like up front)
    let mut wav = clip_wav(1.0, 200.0);
    let at = wav.windows(4).position(|w| w == b"data").unwrap() + 4;
    let claimed: u32 = 3 * 3600 * 24_000 * 2;
    wav[at..at + 4].copy_from_slice(&claimed.to_le_bytes());
    let riff = claimed + at as u32 - 4; // the RIFF chunk holds everything after its size field
    wav[4..8].copy_from_slice(&riff.to_le_bytes());
    let t0 = Instant::now();
    let e = expect_error(upload_voice(&s.base, "bomb", wav).await, 400).await;
    assert_eq!(e["param"], "file");
    let msg = e["message"].as_str().unwrap();
    let limit = format!("{} s", chatterbox_dsp::audio::MAX_DECODED_SECONDS);
    assert!(msg.contains(&limit), "{msg}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(entries(dir.path()).is_empty());
    // and the server goes on: the same name with a real clip is stored
    assert_eq!(
        upload_voice(&s.base, "bomb", clip_wav(1.0, 200.0))
            .await
            .status(),
        201
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flat_layout_is_still_read() {
    let dir = support::temp_dir("store-flat");
    let flat = dir.path().join("old.chatterbox.safetensors");
    std::fs::write(&flat, "fake-voice chatterbox from-an-earlier-server").unwrap();
    let english = StoreFake::new(ModelId::English);
    let turbo = StoreFake::new(ModelId::Turbo);
    let s = serve_fakes(dir.path(), &[&english, &turbo]).await;
    let l = list(&s).await;
    assert_eq!(l["data"][0]["id"], "old");
    assert_eq!(l["data"][0]["models"], json!(["chatterbox"]));
    assert_eq!(l["data"][0]["clip"], false);
    speak(&s, ModelId::English, "old", "hello").await;
    assert_eq!(english.last_voice.lock().unwrap().as_deref(), Some(&*flat));
    // no clip: another model cannot derive it
    let e = expect_error(speech(&s, say(ModelId::Turbo, "old", "hello")).await, 404).await;
    assert_eq!(e["code"], "voice_not_found");
    // deleted as before
    let r = reqwest::Client::new()
        .delete(s.url("/v1/voices/old"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(entries(dir.path()).is_empty());
    s.stop().await;
}

/// A speech request sent after a voice upload joins the batch while an earlier long request
/// is still speaking: the analysis runs between two rounds instead of waiting for the batch
/// to drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_does_not_hold_up_speech_during_a_batch() {
    let dir = support::temp_dir("store-batch");
    let mut fake = StoreFake::batching(ModelId::English, 4);
    fake.step_delay = Duration::from_millis(50);
    fake.analysis_delay = Duration::from_millis(100);
    // seated by slot: the fake's rounds (50 ms for 10 ms of audio) are slower than real time,
    // so admission by capacity would keep the short request queued behind the long one
    let cfg = config(dir.path()).with_capacity_admission(false);
    let s = TestServer::start(cfg, vec![fake.device()]).await;
    let mut a = stream_long(&s, ModelId::English).await;
    let first = a.chunk().await.unwrap();
    assert!(first.as_ref().is_some_and(|c| !c.is_empty()));
    let uploading = {
        let base = s.base.clone();
        tokio::spawn(async move {
            upload_voice(&base, "amy", clip_wav(1.0, 200.0))
                .await
                .status()
        })
    };
    // the analysis starts while the long request speaks
    wait_for(&fake, "analysing:chatterbox").await;
    let r = speech(&s, say(ModelId::English, "alloy", "short")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().len(), 240 * 2);
    assert_eq!(uploading.await.unwrap(), 201);
    let mut rest = first.map_or(0, |c| c.len());
    while let Some(c) = a.chunk().await.unwrap() {
        rest += c.len();
    }
    assert_eq!(rest, LONG_STEPS * 240 * 2, "the long request is whole");
    assert!(
        fake.at("analysed:chatterbox") < fake.at("done:long"),
        "{:?}",
        fake.log()
    );
    assert!(fake.at("analysing:chatterbox") < fake.at("admitted:short"));
    assert!(
        fake.at("done:short") < fake.at("done:long"),
        "{:?}",
        fake.log()
    );
    // and the voice speaks in the batch
    speak(&s, ModelId::English, "amy", "short").await;
    assert_spoke_with(&fake, dir.path(), "amy");
    s.stop().await;
}

/// A batch that cannot analyse makes voice work wait for it to drain (no admission
/// meanwhile), and nothing is lost: the upload is stored, and a voice the model has no
/// conditionals for yet is derived once the batch is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_cannot_analyse_drains_first() {
    let dir = support::temp_dir("store-drain");
    let first = StoreFake::new(ModelId::English);
    let s = TestServer::start(config(dir.path()), vec![first.device()]).await;
    assert_eq!(
        upload_voice(&s.base, "amy", clip_wav(1.0, 200.0))
            .await
            .status(),
        201
    );
    s.stop().await;

    let mut fake = StoreFake::batching(ModelId::Turbo, 4);
    fake.batch_analyses = false;
    fake.step_delay = Duration::from_millis(20);
    let s = TestServer::start(config(dir.path()), vec![fake.device()]).await;
    let mut a = stream_long(&s, ModelId::Turbo).await;
    a.chunk().await.unwrap();
    speak(&s, ModelId::Turbo, "amy", "short").await;
    while a.chunk().await.unwrap().is_some() {}
    assert!(
        fake.at("done:long") < fake.at("analysing:chatterbox-turbo"),
        "{:?}",
        fake.log()
    );
    assert!(fake.at("analysed:chatterbox-turbo") < fake.at("done:short"));
    assert!(version(dir.path(), "amy")
        .join("chatterbox-turbo.safetensors")
        .is_file());
    s.stop().await;
}

/// With the tiny English model: a voice whose conditionals are derived from the kept clip on
/// first use speaks exactly as the one analysed at upload (same seed, same bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_derived_on_first_use_speaks_as_the_one_analysed_at_upload() {
    let ckpt = support::english_checkpoint("store-tiny");
    let dir = support::temp_dir("store-tiny-voices");
    let mut c = config(dir.path());
    c.max_new_tokens = Some(30);
    let s = TestServer::start(
        c.clone(),
        vec![support::tiny_english_device(ckpt.path().to_path_buf())],
    )
    .await;
    let r = upload_voice(&s.base, "narrator", wav_file(&support::ref_clip(), 24_000)).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let body = json!({"model": "chatterbox", "input": "Hello there.", "voice": "narrator",
                      "response_format": "wav", "seed": 3});
    let at_upload = speech(&s, body.clone()).await;
    assert_eq!(at_upload.status(), 200);
    let at_upload = at_upload.bytes().await.unwrap();
    s.stop().await;
    // as if the model had not been loaded at upload
    let conds = version(dir.path(), "narrator").join("chatterbox.safetensors");
    let analysed = std::fs::read(&conds).unwrap();
    std::fs::remove_file(&conds).unwrap();

    let s = TestServer::start(
        c,
        vec![support::tiny_english_device(ckpt.path().to_path_buf())],
    )
    .await;
    let derived = speech(&s, body).await;
    assert_eq!(derived.status(), 200);
    assert_eq!(derived.bytes().await.unwrap(), at_upload);
    assert_eq!(
        std::fs::read(&conds).unwrap(),
        analysed,
        "the same conditionals"
    );
    s.stop().await;
}

/// With the tiny English model: a voice analysed by a running batch (between rounds, on a
/// clone of the model) is the voice the model analyses alone, and the batch's requests go on.
#[test]
fn a_batch_analyses_a_voice_as_the_model_does() {
    let ckpt = support::english_checkpoint("store-batch-analysis");
    let tts = chatterbox_pipeline::ChatterboxTts::from_dir(
        ckpt.path(),
        &chatterbox_pipeline::Device::Cpu,
        chatterbox_pipeline::DType::F32,
    )
    .unwrap();
    let batching = chatterbox_pipeline::BatchOptions::default()
        .with_slots(2)
        .with_positions(256)
        .with_bucket(32);
    let mut model = chatterbox_server::PipelineModel::from(tts).with_batching(batching);
    let clip = chatterbox_dsp::Audio::new(support::ref_clip(), 24_000);
    let out = support::temp_dir("store-batch-analysis-out");
    let (in_batch, alone) = (
        out.path().join("a.safetensors"),
        out.path().join("b.safetensors"),
    );
    let mut opts = model.default_options();
    opts.max_new_tokens = 30;
    opts.seed = Some(1);
    {
        let mut batch = model.batch().unwrap().unwrap();
        batch.add(None, "Hello there.", &opts).unwrap();
        batch.step(&mut |_, _| {});
        batch.save_voice(&clip, &in_batch).unwrap().unwrap();
        assert_eq!(batch.len(), 1, "the request is still in the batch");
        let mut last = false;
        for _ in 0..200 {
            if last {
                break;
            }
            batch.step(&mut |_, item| {
                if let chatterbox_server::BatchItem::Audio { last: true, .. } = item {
                    last = true;
                }
            });
        }
        assert!(last, "the request finished");
    }
    model.save_voice(&clip, &alone).unwrap();
    assert_eq!(
        std::fs::read(&in_batch).unwrap(),
        std::fs::read(&alone).unwrap()
    );
}
