//! OpenAI's `speed` through the server with the real tiny English model over loopback (issue
//! 44): 0.25 to 4 is served by time-stretching the speech at the same pitch, the audio's length
//! `round(len / speed)` of the speed-1 audio in whole files and SSE streams, one at a time and
//! batched, the captions' times divided by it; outside the range a 400 naming `speed`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod support;

use base64::Engine as _;
use chatterbox_dsp::stretch::stretched_len;
use chatterbox_server::ServerConfig;
use serde_json::{json, Value};
use support::{expect_error, speech, TestServer};

fn config() -> ServerConfig {
    let mut c = ServerConfig::default();
    c.max_new_tokens = Some(12);
    c
}

fn req(speed: f64) -> Value {
    json!({"model": "chatterbox", "input": "Hello there. [pause 200ms] How are you?", "voice": "alloy",
           "response_format": "pcm", "seed": 3, "speed": speed})
}

fn b64(s: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s.as_str().unwrap())
        .unwrap()
}

/// The captioned answer: its 16-bit samples and its sentences' `(start, end)` in seconds.
async fn captioned(s: &TestServer, body: &Value) -> (usize, Vec<(f64, f64)>) {
    let r = reqwest::Client::new()
        .post(s.url("/v1/audio/captioned_speech"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    let spans = v["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["start_time"].as_f64().unwrap(),
                t["end_time"].as_f64().unwrap(),
            )
        })
        .collect();
    (b64(&v["audio"]).len() / 2, spans)
}

/// The SSE answer with timestamps: its samples and the sentences' `(start, end)`.
async fn sse(s: &TestServer, mut body: Value) -> (usize, Vec<(f64, f64)>) {
    body["stream_format"] = json!("sse");
    body["timestamps"] = json!(true);
    let r = speech(s, body).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let (mut bytes, mut spans) = (0, Vec::new());
    for e in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
        let e: Value = serde_json::from_str(e).unwrap();
        match e["type"].as_str().unwrap() {
            "speech.audio.delta" => bytes += b64(&e["audio"]).len(),
            "speech.audio.timestamps" => {
                for t in e["sentences"].as_array().unwrap() {
                    spans.push((
                        t["start_time"].as_f64().unwrap(),
                        t["end_time"].as_f64().unwrap(),
                    ));
                }
            }
            _ => {}
        }
    }
    (bytes / 2, spans)
}

async fn check_server(s: &TestServer) {
    let one = speech(s, req(1.0)).await.bytes().await.unwrap().len() / 2;
    let (n, one_spans) = captioned(s, &req(1.0)).await;
    assert_eq!(n, one);
    assert_eq!(one_spans.len(), 2);
    for speed in [0.25, 0.5, 2.0, 4.0] {
        let want = stretched_len(one, speed as f32);
        // length ~ 1/speed: exactly round(len / speed), in a whole file and in SSE
        let whole = speech(s, req(speed)).await.bytes().await.unwrap().len() / 2;
        assert_eq!(whole, want, "speed {speed}");
        let (n, spans) = captioned(s, &req(speed)).await;
        assert_eq!(n, want, "speed {speed}");
        let (streamed, streamed_spans) = sse(s, req(speed)).await;
        assert_eq!(streamed, want, "speed {speed}");
        assert_eq!(streamed_spans, spans, "speed {speed}");
        // every caption time divided by the speed; the last ends with the audio
        for ((a, b), (a1, b1)) in spans.iter().zip(&one_spans) {
            assert!(
                (a - a1 / speed).abs() < 0.0015,
                "speed {speed}: {a} vs {a1}"
            );
            assert!(
                (b - b1 / speed).abs() < 0.0015,
                "speed {speed}: {b} vs {b1}"
            );
        }
        let secs = want as f64 / 24_000.0;
        assert!((spans[1].1 - secs).abs() < 0.0006, "speed {speed}");
    }
    // outside OpenAI's range: a 400 naming the field and the range
    for bad in [json!(0.2), json!(4.5), json!(0), json!(-1), json!("fast")] {
        let mut body = req(1.0);
        body["speed"] = bad.clone();
        let e = expect_error(speech(s, body).await, 400).await;
        assert_eq!(e["param"], "speed", "{bad}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("speed"), "{bad}: {message}");
    }
    let e = expect_error(speech(s, req(4.5)).await, 400).await;
    assert!(e["message"].as_str().unwrap().contains("0.25 to 4"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speed_stretches_files_streams_and_captions() {
    let (_ckpt, s) = support::tiny_english_server("speed", config(), 0).await;
    check_server(&s).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speed_stretches_files_streams_and_captions_batched() {
    let (_ckpt, s) = support::tiny_english_server("speed-batched", config(), 4).await;
    check_server(&s).await;
    s.stop().await;
}
