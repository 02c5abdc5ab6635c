//! Timestamps and markup through the server with the real tiny English model (issue 44): the
//! SSE `speech.audio.timestamps` events with `"timestamps": true`, one-at-a-time and batched;
//! `/v1/audio/captioned_speech` (and Kokoro's `/dev/captioned_speech`) answering the file and
//! its timings together; a `[pause 500ms]` as half a second of silence; bad markup a 400; a
//! request's `lexicon` naming one of the server's pronunciation lexicons.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod support;

use base64::Engine as _;
use chatterbox_server::ServerConfig;
use serde_json::{json, Value};
use support::{expect_error, speech, TestServer};

const TEXT: &str = "Hello there. [pause 500ms] How are you?";
const WORDS: [&str; 5] = ["Hello", "there.", "How", "are", "you?"];

fn config() -> ServerConfig {
    let mut c = ServerConfig::default();
    c.max_new_tokens = Some(12);
    c
}

fn req(format: &str) -> Value {
    json!({"model": "chatterbox", "input": TEXT, "voice": "alloy",
           "response_format": format, "seed": 3})
}

/// Checks sentences (with words) against the text and the audio's length in seconds; `measured`:
/// whether some words are timed from T3's alignment heads (one request at a time) or all are
/// estimated (a batch).
fn check_sentences(sentences: &[Value], secs: f64, measured: bool) {
    let texts: Vec<&str> = sentences
        .iter()
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Hello there.", "How are you?"]);
    let mut words = Vec::new();
    let mut estimated = Vec::new();
    let mut last = 0.0;
    for s in sentences {
        let (a, b) = (
            s["start_time"].as_f64().unwrap(),
            s["end_time"].as_f64().unwrap(),
        );
        assert!(a >= last && b > a && b <= secs + 0.0005, "{s}");
        for w in s["words"].as_array().unwrap() {
            estimated.push(w["estimated"].as_bool().unwrap());
            let (ws, we) = (
                w["start_time"].as_f64().unwrap(),
                w["end_time"].as_f64().unwrap(),
            );
            assert!(ws >= a - 0.0005 && we > ws && we <= b + 0.0005, "{w}");
            words.push(w["word"].as_str().unwrap().to_string());
        }
        last = b;
    }
    assert_eq!(words, WORDS);
    assert_eq!(estimated.iter().any(|e| !e), measured, "{estimated:?}");
    assert!((last - secs).abs() < 0.0006, "ends at {last}, audio {secs}");
    // the 500 ms pause and the halves of the two crossfades around it lie between them
    let gap =
        sentences[1]["start_time"].as_f64().unwrap() - sentences[0]["end_time"].as_f64().unwrap();
    assert!((gap - 0.55).abs() < 0.0015, "gap {gap}");
}

/// The SSE events of a response, parsed.
async fn events(r: reqwest::Response) -> Vec<Value> {
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

async fn check_server(s: &TestServer, measured: bool) {
    // the captioned answer: the file and its timings together, at both paths
    let mut whole = None;
    for path in ["/v1/audio/captioned_speech", "/dev/captioned_speech"] {
        let r = support::post_json(s.url(path), &req("pcm")).await;
        assert_eq!(r.status(), 200);
        let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        assert_eq!(v["audio_format"], "pcm");
        assert_eq!(
            v["truncated"], true,
            "12 tokens cut the tiny model's speech"
        );
        let pcm = base64::engine::general_purpose::STANDARD
            .decode(v["audio"].as_str().unwrap())
            .unwrap();
        let samples: Vec<i16> = pcm
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect();
        let secs = samples.len() as f64 / 24_000.0;
        check_sentences(v["sentences"].as_array().unwrap(), secs, measured);
        let flat: Vec<&str> = v["timestamps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["word"].as_str().unwrap())
            .collect();
        assert_eq!(flat, WORDS);
        // half a second of exact silence (and S3Gen's own 20 ms at the next sentence's start)
        let (mut run, mut longest) = (0usize, 0usize);
        for &v in &samples {
            run = if v == 0 { run + 1 } else { 0 };
            longest = longest.max(run);
        }
        assert!((12_000..13_000).contains(&longest), "{longest}");
        // the same audio as /v1/audio/speech
        let plain = speech(s, req("pcm")).await.bytes().await.unwrap();
        assert_eq!(plain.to_vec(), pcm);
        whole = Some((v["sentences"].clone(), samples.len()));
    }
    let (sentences, _) = whole.unwrap();

    // SSE with timestamps: the same sentences in `speech.audio.timestamps` events, each after
    // the audio it ends in, before `done`
    let mut body = req("pcm");
    body["stream_format"] = json!("sse");
    body["timestamps"] = json!(true);
    let ev = events(speech(s, body.clone()).await).await;
    let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"speech.audio.delta"));
    assert_eq!(kinds.last(), Some(&"speech.audio.done"));
    let mut audio = Vec::new();
    let mut streamed = Vec::new();
    for e in &ev {
        match e["type"].as_str().unwrap() {
            "speech.audio.delta" => audio.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(e["audio"].as_str().unwrap())
                    .unwrap(),
            ),
            "speech.audio.timestamps" => {
                let ended = e["sentences"].as_array().unwrap();
                assert!(!ended.is_empty());
                // a sentence's timing comes once its audio has started to arrive
                let sent = audio.len() as f64 / 2.0 / 24_000.0;
                for t in ended {
                    assert!(t["start_time"].as_f64().unwrap() < sent, "{t} after {sent}");
                }
                streamed.extend(ended.iter().cloned());
            }
            _ => {}
        }
    }
    check_sentences(&streamed, audio.len() as f64 / 2.0 / 24_000.0, measured);
    assert_eq!(streamed.len(), sentences.as_array().unwrap().len());
    // without the flag: no timestamps events
    body["timestamps"] = json!(false);
    let ev = events(speech(s, body).await).await;
    assert!(ev.iter().all(|e| e["type"] != "speech.audio.timestamps"));

    // timestamps need SSE; bad markup is the request's fault
    let mut body = req("wav");
    body["timestamps"] = json!(true);
    let e = expect_error(speech(s, body).await, 400).await;
    assert_eq!(e["param"], "timestamps");
    let mut body = req("wav");
    body["timestamps"] = json!("yes");
    expect_error(speech(s, body).await, 400).await;
    let mut body = req("wav");
    body["input"] = json!("Hello [pause 2h] there.");
    let e = expect_error(speech(s, body).await, 400).await;
    assert!(e["message"].as_str().unwrap().contains("markup"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamps_and_captioned_speech() {
    let (_ckpt, s) = support::tiny_english_server("captions", config(), 0).await;
    // one request at a time: words timed from T3's alignment heads
    check_server(&s, true).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamps_and_captioned_speech_batched() {
    let (_ckpt, s) = support::tiny_english_server("captions-batched", config(), 4).await;
    // a batch estimates words
    check_server(&s, false).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_names_a_lexicon() {
    let mut c = config();
    c.lexicons.insert(
        "names".into(),
        std::sync::Arc::new(chatterbox_pipeline::Lexicon::parse("gif = hello there").unwrap()),
    );
    let (_ckpt, s) = support::tiny_english_server("captions-lexicon", c, 0).await;
    let body = |input: &str, lexicon: Option<&str>| {
        let mut b = req("pcm");
        b["input"] = json!(input);
        if let Some(l) = lexicon {
            b["lexicon"] = json!(l);
        }
        b
    };
    // the tiny random model's audio hardly depends on the text: the captions show what was
    // spoken
    let spoken = |b: Value| {
        let url = s.url("/v1/audio/captioned_speech");
        async move {
            let r = support::post_json(url, &b).await;
            assert_eq!(r.status(), 200);
            let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
            v["sentences"][0]["text"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(
        spoken(body("A gif.", Some("names"))).await,
        "A hello there."
    );
    assert_eq!(spoken(body("A gif.", None)).await, "A gif.");
    let r = speech(&s, body("A gif.", Some("names"))).await;
    assert_eq!(r.status(), 200);
    let e = expect_error(speech(&s, body("A gif.", Some("other"))).await, 400).await;
    assert_eq!(e["param"], "lexicon");
    assert!(e["message"].as_str().unwrap().contains("names"), "{e}");
    s.stop().await;
}
