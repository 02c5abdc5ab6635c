//! Speech cut at the token cap is told to the client: the tiny English model of the parity
//! fixtures (random weights: it practically never draws its stop token, so a small
//! `max_new_tokens` cuts every sentence) answers a whole file with `X-Chatterbox-Truncated:
//! true` and an SSE stream with `"truncated": true` in its `speech.audio.done` event, one
//! request at a time and batched; a raw audio stream cannot say it (its headers left with the
//! first audio) but is counted with the others in `chatterbox_speech_truncated_total`. Speech
//! that was not cut (a fake model's) carries no header and `"truncated": false`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod support;

use chatterbox_server::ServerConfig;
use serde_json::json;
use std::time::Duration;
use support::{speech, Fake, TestServer};

/// The cap: a few tokens, so every sentence of the tiny model is cut.
const CAP: usize = 8;

fn req(stream: Option<&str>) -> serde_json::Value {
    let mut b = json!({"model": "chatterbox", "input": "Hello there.", "voice": "alloy",
                       "response_format": "wav", "seed": 5});
    if let Some(sf) = stream {
        b["stream_format"] = json!(sf);
    }
    b
}

/// The `speech.audio.done` event of an SSE body.
fn done_event(text: &str) -> serde_json::Value {
    let events: Vec<serde_json::Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(events.len() >= 2, "{text}");
    assert!(events[..events.len() - 1]
        .iter()
        .all(|e| e["type"] == "speech.audio.delta"));
    let done = events.last().unwrap().clone();
    assert_eq!(done["type"], "speech.audio.done", "{text}");
    done
}

async fn truncated_total(s: &TestServer) -> String {
    let m = s.get_text("/metrics").await;
    m.lines()
        .find_map(|l| l.strip_prefix("chatterbox_speech_truncated_total "))
        .unwrap_or_else(|| panic!("no truncation counter in {m}"))
        .to_string()
}

/// Every framing of one request against `s`, which cuts it.
async fn check_cut(s: &TestServer) {
    let whole = speech(s, req(None)).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.headers()["x-chatterbox-truncated"], "true");
    let a = chatterbox_dsp::audio::decode(whole.bytes().await.unwrap().to_vec(), None).unwrap();
    assert!(!a.samples.is_empty(), "the cut speech is still served");

    let sse = speech(s, req(Some("sse"))).await;
    assert_eq!(sse.status(), 200);
    assert!(sse.headers().get("x-chatterbox-truncated").is_none());
    let done = done_event(&sse.text().await.unwrap());
    assert_eq!(done["truncated"], true, "{done}");
    assert_eq!(done["usage"]["input_tokens"], 12);

    let raw = speech(s, req(Some("audio"))).await;
    assert_eq!(raw.status(), 200);
    assert!(raw.headers().get("x-chatterbox-truncated").is_none());
    let bytes = raw.bytes().await.unwrap();
    let b = chatterbox_dsp::audio::decode(bytes.to_vec(), None).unwrap();
    assert_eq!(b.samples.len(), a.samples.len(), "same seed, same speech");
    // the three are counted, the raw stream included
    assert_eq!(truncated_total(s).await, "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_cut_at_the_cap_says_so() {
    let dir = support::english_checkpoint("truncation");
    let mut config = ServerConfig::default();
    config.max_new_tokens = Some(CAP);
    let s = TestServer::start(
        config.clone(),
        vec![support::tiny_english_device(dir.path().to_path_buf())],
    )
    .await;
    check_cut(&s).await;
    s.stop().await;

    // batched: the same, through the batch's chunks
    let s = TestServer::start(
        config,
        vec![support::tiny_english_device_batched(
            dir.path().to_path_buf(),
            2,
            chatterbox_pipeline::CHUNKS_PER_CALL,
        )],
    )
    .await;
    check_cut(&s).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_not_cut_carries_no_flag() {
    let fake = Fake::new(3, 1000, Duration::ZERO);
    let s = TestServer::start(ServerConfig::default(), vec![fake.device()]).await;
    let whole = speech(&s, req(None)).await;
    assert_eq!(whole.status(), 200);
    assert!(whole.headers().get("x-chatterbox-truncated").is_none());
    let done = done_event(&speech(&s, req(Some("sse"))).await.text().await.unwrap());
    assert_eq!(done["truncated"], false, "{done}");
    assert_eq!(truncated_total(&s).await, "0");
    s.stop().await;
}
