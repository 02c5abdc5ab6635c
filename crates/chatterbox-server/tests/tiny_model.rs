//! The server with the real tiny English model built from the committed parity fixtures: every
//! format decodes back, streaming works, and the voice library (analysed by the model) survives
//! a restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod support;

use chatterbox_server::ServerConfig;
use serde_json::json;
use support::{expect_error, speech, wav_file, TestServer};

/// Few speech tokens per request: the tiny model's tokens are random, so this bounds each
/// request's time.
const MAX_TOKENS: usize = 30;

fn config(voices: Option<std::path::PathBuf>) -> ServerConfig {
    let mut c = ServerConfig::default();
    c.max_new_tokens = Some(MAX_TOKENS);
    c.voices_dir = voices;
    c
}

fn req(format: &str, voice: &str) -> serde_json::Value {
    json!({"model": "chatterbox", "input": "Hello there.", "voice": voice,
           "response_format": format, "seed": 3})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_format_decodes_back() {
    let dir = support::english_checkpoint("formats");
    let s = TestServer::start(
        config(None),
        vec![support::tiny_english_device(dir.path().to_path_buf())],
    )
    .await;
    let wav = speech(&s, req("wav", "alloy")).await;
    assert_eq!(wav.status(), 200);
    let a = chatterbox_dsp::audio::decode(wav.bytes().await.unwrap().to_vec(), None).unwrap();
    assert_eq!(a.sample_rate, 24_000);
    assert!(!a.samples.is_empty());
    let flac = speech(&s, req("flac", "alloy"))
        .await
        .bytes()
        .await
        .unwrap();
    let b = chatterbox_dsp::audio::decode(flac.to_vec(), None).unwrap();
    assert_eq!(
        b.samples, a.samples,
        "the same seed, the same 16-bit samples"
    );
    let pcm = speech(&s, req("pcm", "alloy")).await.bytes().await.unwrap();
    assert_eq!(pcm.len(), a.samples.len() * 2);
    let mut streamed = req("wav", "alloy");
    streamed["stream_format"] = json!("audio");
    let mut r = speech(&s, streamed).await;
    let mut bytes = Vec::new();
    while let Some(c) = r.chunk().await.unwrap() {
        bytes.extend_from_slice(&c);
    }
    let c = chatterbox_dsp::audio::decode(bytes, None).unwrap();
    assert!(!c.samples.is_empty());
    let mut sse = req("pcm", "alloy");
    sse["stream_format"] = json!("sse");
    let text = speech(&s, sse).await.text().await.unwrap();
    assert!(text.contains("speech.audio.delta") && text.contains("speech.audio.done"));
    // an unknown language is the request's fault
    let mut body = req("wav", "alloy");
    body["cfg_weight"] = json!(0.0);
    assert_eq!(speech(&s, body).await.status(), 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_voice_library_survives_a_restart() {
    let dir = support::english_checkpoint("voices-ckpt");
    let voices = support::temp_dir("voices-lib");
    let s = TestServer::start(
        config(Some(voices.path().to_path_buf())),
        vec![support::tiny_english_device(dir.path().to_path_buf())],
    )
    .await;
    let form = reqwest::multipart::Form::new()
        .text("name", "narrator")
        .part(
            "file",
            reqwest::multipart::Part::bytes(wav_file(&support::ref_clip(), 24_000))
                .file_name("ref.wav"),
        );
    let r = reqwest::Client::new()
        .post(s.url("/v1/voices"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let cloned = speech(&s, req("wav", "narrator")).await;
    assert_eq!(cloned.status(), 200);
    let cloned = cloned.bytes().await.unwrap();
    let builtin = speech(&s, req("wav", "alloy")).await.bytes().await.unwrap();
    assert_ne!(cloned, builtin, "the library voice is not the built-in one");
    s.stop().await;

    let s = TestServer::start(
        config(Some(voices.path().to_path_buf())),
        vec![support::tiny_english_device(dir.path().to_path_buf())],
    )
    .await;
    let list = reqwest::get(s.url("/v1/voices"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(list.contains("\"narrator\""), "{list}");
    let again = speech(&s, req("wav", "narrator"))
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(again, cloned, "the same voice and seed after the restart");
    let r = reqwest::Client::new()
        .delete(s.url("/v1/voices/narrator"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    expect_error(speech(&s, req("wav", "narrator")).await, 404).await;
    s.stop().await;
}
