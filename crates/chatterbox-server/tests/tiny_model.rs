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
    let (_ckpt, s) = support::tiny_english_server("formats", config(None), 0).await;
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
    let clip = wav_file(&support::ref_clip(), 24_000);
    let r = support::upload_voice(&s.base, "narrator", clip).await;
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
    let list = s.get_text("/v1/voices").await;
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

/// Requests of different voices, texts and seeds sent at once to a server that batches them
/// (3 slots for 5 requests: some wait, some join a running batch) get the audio a server
/// answering one request at a time gives: exactly its bytes when each stream's flow runs alone,
/// and within the pipeline's waveform tolerance (1e-3 of the peak, plus the 16-bit step) when
/// the chunks due share flow calls (the default); a voice saved meanwhile waits for the batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batching_server_answers_like_one_request_at_a_time() {
    for chunks_per_call in [1, chatterbox_pipeline::CHUNKS_PER_CALL] {
        batching_server_matches_one_at_a_time(chunks_per_call).await;
    }
}

async fn batching_server_matches_one_at_a_time(chunks_per_call: usize) {
    let dir = support::english_checkpoint("batch-ckpt");
    let voices = support::temp_dir("batch-voices");
    let batched = TestServer::start(
        config(Some(voices.path().to_path_buf())),
        vec![support::tiny_english_device_batched(
            dir.path().to_path_buf(),
            3,
            chunks_per_call,
        )],
    )
    .await;
    let clip = wav_file(&support::ref_clip(), 24_000);
    let r = support::upload_voice(&batched.base, "narrator", clip.clone()).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let bodies: Vec<serde_json::Value> = (0..5u64)
        .map(|i| {
            let voice = if i % 2 == 0 { "alloy" } else { "narrator" };
            let text = [
                "Hello there.",
                "How are you today?",
                "Fine.",
                "A longer one, then.",
                "Bye.",
            ];
            let mut b = req("wav", voice);
            b["input"] = json!(text[i as usize]);
            b["seed"] = json!(10 + i);
            b
        })
        .collect();
    let sent = bodies.iter().map(|b| {
        let b = b.clone();
        let s = &batched;
        async move { speech(s, b).await }
    });
    // a second voice saved while the batch runs: answered once the running requests are done
    let saving = async {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let r = support::upload_voice(&batched.base, "second", clip.clone()).await;
        r.status()
    };
    let (responses, saved) = tokio::join!(futures_util::future::join_all(sent), saving);
    assert_eq!(saved, 201);
    let mut got = Vec::new();
    for r in responses {
        assert_eq!(r.status(), 200);
        got.push(r.bytes().await.unwrap());
    }
    batched.stop().await;

    let solo = TestServer::start(
        config(Some(voices.path().to_path_buf())),
        vec![support::tiny_english_device(dir.path().to_path_buf())],
    )
    .await;
    for (i, (b, g)) in bodies.iter().zip(&got).enumerate() {
        let want = speech(&solo, b.clone()).await.bytes().await.unwrap();
        assert!(want.len() > 44, "request {i}: empty audio");
        if chunks_per_call == 1 {
            assert_eq!(*g, want, "request {i}: batched != one at a time");
            continue;
        }
        let decode = |b: &[u8]| chatterbox_dsp::audio::decode(b.to_vec(), None).unwrap();
        let (a, w) = (decode(g), decode(&want));
        assert_eq!(a.samples.len(), w.samples.len(), "request {i}: length");
        let peak = w.samples.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a
            .samples
            .iter()
            .zip(&w.samples)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            worst <= 1e-3 * peak + 1.0 / 32768.0,
            "request {i}: batched differs by {worst:.2e} (peak {peak:.2e})"
        );
    }
    solo.stop().await;
}
