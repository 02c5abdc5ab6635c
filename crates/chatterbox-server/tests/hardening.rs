//! Serving you can trust (issue 40, section 2), over loopback against fake models: a
//! misconfigured key refuses to start, the bearer scheme is case-insensitive, every error is
//! OpenAI's JSON (500s without paths or request text), out-of-range options are refused and
//! ignored ones are named, the logs put each answer at the level it deserves, slow or hostile
//! clients are cut off in bounded time while others are served, connections beyond the limit
//! get 503, and a draining server answers new requests 503 instead of refusing connections.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod support;

use chatterbox_server::{
    ChunkIter, DeviceModels, ModelError, ModelId, Server, ServerConfig, ServerError, SpeechModel,
};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use support::{expect_error, json_post, speech, Fake, Speaks, TestServer, Voiceless};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn req(format: &str) -> serde_json::Value {
    json!({"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": format})
}

fn addr(s: &TestServer) -> String {
    s.base.trim_start_matches("http://").to_string()
}

/// Reads what the server sends on `conn` until it closes or fails (at most `limit`).
/// Asserts an OpenAI error with `status`, of the type `kind` and the code `code`; returns the
/// error object.
async fn expect_kind(
    r: reqwest::Response,
    status: u16,
    kind: &str,
    code: &str,
) -> serde_json::Value {
    let e = expect_error(r, status).await;
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some(kind), Some(code))
    );
    e
}

async fn read_until_closed(conn: &mut (impl AsyncReadExt + Unpin), limit: Duration) -> Vec<u8> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the server kept the connection open past {limit:?}"
    );
    got
}

/// A model whose failures carry a file path and the request's text (as a real model's errors
/// may): text starting with `late` fails after one chunk, any other text at once.
struct Leaky;

impl Speaks for Leaky {
    fn speak(&self, text: &str) -> Result<ChunkIter<'_>, ModelError> {
        let detail = format!("cannot read /srv/secret/t3_cfg.safetensors while speaking {text:?}");
        if !text.starts_with("late") {
            return Err(detail.into());
        }
        let mut first = true;
        Ok(Box::new(std::iter::from_fn(move || {
            if std::mem::take(&mut first) {
                Some(Ok(vec![0.1; 2400].into()))
            } else {
                Some(Err(detail.clone().into()))
            }
        })))
    }
}

/// Every log line of this test binary at info and above (installed on first use).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn captured_logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let c = Captured::default();
        let _ = tracing_subscriber::fmt()
            .with_writer(c.clone())
            .with_ansi(false)
            .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
            .try_init();
        c
    })
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_or_unusable_api_key_refuses_to_start() {
    for key in ["", "   ", " sk-1", "sk-1\n"] {
        let fake = Fake::new(1, 100, Duration::ZERO);
        let mut config = ServerConfig::default();
        config.addr = "127.0.0.1:0".parse().unwrap();
        config.api_key = Some(key.to_string());
        match Server::bind(config, vec![fake.device()]).await {
            Err(ServerError::Config(why)) => assert!(why.contains("API key"), "{key:?}: {why}"),
            Err(e) => panic!("{key:?}: {e}"),
            Ok(_) => panic!("{key:?}: a server started with an unusable key"),
        }
    }
    let e = Server::bind(
        ServerConfig::default().with_api_key(Some(String::new())),
        vec![Fake::new(1, 100, Duration::ZERO).device()],
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_case_insensitive_and_401_is_openai_json() {
    let fake = Fake::new(1, 100, Duration::ZERO);
    let mut config = ServerConfig::default();
    config.api_key = Some("sk-1".into());
    let s = TestServer::start(config, vec![fake.device()]).await;
    let c = reqwest::Client::new();
    let get = |auth: &'static str| {
        c.get(s.url("/v1/models"))
            .header("authorization", auth)
            .send()
    };
    for ok in ["Bearer sk-1", "bearer sk-1", "BEARER sk-1", "bEaReR   sk-1"] {
        assert_eq!(get(ok).await.unwrap().status(), 200, "{ok}");
    }
    for bad in ["Bearer sk-2", "Basic sk-1", "Bearersk-1", "sk-1"] {
        let e = expect_error(get(bad).await.unwrap(), 401).await;
        assert_eq!(e["type"], "invalid_request_error", "{bad}");
        assert_eq!(e["code"], "invalid_api_key", "{bad}");
        assert!(e["param"].is_null());
    }
    let r = json_post(&c, s.url("/v1/audio/speech"), &req("wav"))
        .header("authorization", "bearer sk-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(!r.bytes().await.unwrap().is_empty());
    assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_openai_json_and_500s_keep_their_detail_to_the_log() {
    let fake = Fake::new(20, 2400, Duration::from_millis(50));
    let mut config = ServerConfig::default();
    config.queue_capacity = 0;
    config.max_json_bytes = 4096;
    let s = TestServer::start(config.clone(), vec![fake.device()]).await;
    let c = reqwest::Client::new();

    // 404: unknown route, with the method and path
    let r = c.get(s.url("/v1/nothing")).send().await.unwrap();
    assert!(r.headers().contains_key("x-request-id"));
    let e = expect_kind(r, 404, "invalid_request_error", "not_found").await;
    assert!(
        e["message"].as_str().unwrap().contains("GET /v1/nothing"),
        "{e}"
    );

    // 405: a known path with the wrong method, JSON and `Allow` kept
    let r = c.get(s.url("/v1/audio/speech")).send().await.unwrap();
    assert_eq!(r.headers()["allow"], "POST");
    assert_eq!(r.headers()["content-type"], "application/json");
    expect_kind(r, 405, "invalid_request_error", "method_not_allowed").await;
    let r = c.post(s.url("/health")).send().await.unwrap();
    assert!(r.headers()["allow"].to_str().unwrap().contains("GET"));
    expect_error(r, 405).await;

    // 413
    let big = json!({"model": "tts-1", "input": "a".repeat(5000), "response_format": "wav"});
    expect_kind(
        speech(&s, big).await,
        413,
        "invalid_request_error",
        "payload_too_large",
    )
    .await;

    // 429 while the only worker is busy and nothing may wait
    let mut body = req("pcm");
    body["stream_format"] = json!("audio");
    let mut busy = speech(&s, body).await;
    assert_eq!(busy.status(), 200);
    assert!(busy.chunk().await.unwrap().is_some());
    let r = speech(&s, req("wav")).await;
    assert_eq!(r.headers()["retry-after"], "1");
    expect_kind(r, 429, "rate_limit_error", "queue_full").await;
    drop(busy);
    s.stop().await;

    // 500: the model's error names a file and the text; the client gets neither
    let s = TestServer::start(
        config,
        vec![DeviceModels::loaded(
            "leaky",
            vec![Box::new(Voiceless(Leaky))],
        )],
    )
    .await;
    let mut body = req("wav");
    body["input"] = json!("Top secret words.");
    let r = speech(&s, body).await;
    assert!(r.headers().contains_key("x-request-id"));
    let text = String::from_utf8(r.bytes().await.unwrap().to_vec()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["type"], "server_error", "{text}");
    for leak in ["/srv", "secret", "safetensors", "Top secret words"] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
    // ... nor in an SSE error event after the first audio
    let mut body = req("wav");
    body["input"] = json!("late secret words.");
    body["stream_format"] = json!("sse");
    let text = speech(&s, body).await.text().await.unwrap();
    assert!(text.contains("\"type\":\"error\""), "{text}");
    assert!(text.contains("server_error"), "{text}");
    for leak in ["/srv", "secret", "safetensors"] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
    assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_options_are_refused_and_ignored_ones_are_named() {
    let english = Fake::new(1, 100, Duration::ZERO);
    let mut turbo = Fake::new(1, 100, Duration::ZERO);
    turbo.id = ModelId::Turbo;
    let devices = vec![DeviceModels::loaded(
        "fake",
        vec![Box::new(english.clone()), Box::new(turbo.clone())],
    )];
    let s = TestServer::start(ServerConfig::default(), devices).await;
    for (field, value) in [
        ("exaggeration", json!(99)),
        ("exaggeration", json!(-1)),
        ("cfg_weight", json!(1.5)),
        ("temperature", json!(0)),
        ("temperature", json!(50)),
        ("top_p", json!(0)),
        ("top_p", json!(2)),
        ("min_p", json!(1.1)),
        ("repetition_penalty", json!(0.5)),
        ("repetition_penalty", json!(3)),
        ("seed", json!(-3)),
        ("seed", json!(0.5)),
    ] {
        let mut body = req("wav");
        body[field] = value.clone();
        let e = expect_error(speech(&s, body).await, 400).await;
        assert_eq!(e["param"], field, "{field} = {value}");
        assert_eq!(e["code"], "invalid_value");
        assert!(e["message"].as_str().unwrap().contains(field), "{e}");
    }
    // the ends of every range are served
    let mut body = req("wav");
    for (field, value) in [
        ("exaggeration", 2.0),
        ("cfg_weight", 1.0),
        ("temperature", 0.05),
        ("top_p", 1.0),
        ("min_p", 0.0),
        ("repetition_penalty", 2.0),
    ] {
        body[field] = json!(value);
    }
    body["model"] = json!("chatterbox");
    let r = speech(&s, body.clone()).await;
    assert_eq!(r.status(), 200);
    assert!(
        r.headers().get("x-chatterbox-ignored-options").is_none(),
        "English uses them all"
    );
    // Turbo names what it ignores, only what the request set, for files and streams alike
    body["model"] = json!("chatterbox-turbo");
    let r = speech(&s, body.clone()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-chatterbox-ignored-options"],
        "cfg_weight, exaggeration, min_p"
    );
    let mut only = req("wav");
    only["model"] = json!("chatterbox-turbo");
    only["exaggeration"] = json!(0.7);
    only["temperature"] = json!(0.6);
    only["stream_format"] = json!("sse");
    let r = speech(&s, only.clone()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-chatterbox-ignored-options"], "exaggeration");
    assert!(r.text().await.unwrap().contains("speech.audio.done"));
    only.as_object_mut().unwrap().remove("exaggeration");
    let r = speech(&s, only).await;
    assert!(r.headers().get("x-chatterbox-ignored-options").is_none());
    assert_eq!(turbo.pulled.load(Ordering::SeqCst), 3);
    assert_eq!(english.pulled.load(Ordering::SeqCst), 1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_put_each_answer_at_its_level_without_the_text() {
    let logs = captured_logs();
    // a device that takes a while to load: the start-up's `/ready` polls get 503
    let fake = Fake::new(40, 2400, Duration::from_millis(50));
    let model = fake.clone();
    let slow = DeviceModels::new("slow", move || {
        std::thread::sleep(Duration::from_millis(600));
        let m: Box<dyn SpeechModel> = Box::new(model);
        Ok(vec![m])
    });
    let mut config = ServerConfig::default();
    config.queue_capacity = 0;
    let s = TestServer::start(config, vec![slow]).await;
    let marker = "Unmistakable-log-marker-7781";
    let mut body = req("wav");
    body["input"] = json!(marker);
    body["voice"] = json!("nobody-here");
    expect_error(speech(&s, body).await, 404).await;
    let mut body = req("pcm");
    body["input"] = json!(marker);
    body["stream_format"] = json!("audio");
    let mut busy = speech(&s, body.clone()).await;
    assert!(busy.chunk().await.unwrap().is_some());
    expect_error(speech(&s, body).await, 429).await;
    drop(busy);
    s.stop().await;

    let lines = logs.lines();
    let with = |what: &str| {
        lines
            .iter()
            .filter(move |l| l.contains(what))
            .collect::<Vec<_>>()
    };
    assert!(!with("status=404").is_empty(), "{lines:#?}");
    assert!(!with("status=429").is_empty(), "{lines:#?}");
    for l in with("status=404") {
        assert!(l.contains(" INFO "), "a 404 is logged at info: {l}");
    }
    for l in with("status=429") {
        assert!(l.contains(" WARN "), "a 429 is logged at warn: {l}");
    }
    // the start-up polled `/ready` while loading: 503s, none of them an error in the log
    // (matched by their field: a timestamp's microseconds can read 503 too)
    for l in with("status=503") {
        assert!(!l.contains("ERROR"), "a 503 logged as an error: {l}");
    }
    for l in with("/ready") {
        assert!(
            !l.contains("ERROR") && !l.contains(" WARN "),
            "a /ready poll: {l}"
        );
    }
    assert!(
        with(marker).is_empty(),
        "the text was logged: {:#?}",
        with(marker)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_is_cut_at_the_deadline_while_another_client_is_served() {
    let fake = Fake::new(2, 2400, Duration::from_millis(20));
    let mut config = ServerConfig::default();
    config.body_deadline = Duration::from_secs(1);
    let s = TestServer::start(config, vec![fake.device()]).await;
    let t0 = Instant::now();
    let mut conn = TcpStream::connect(addr(&s)).await.unwrap();
    conn.write_all(
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 1000\r\n\r\n{",
    )
    .await
    .unwrap();
    let (mut rd, mut wr) = conn.into_split();
    // a byte every 100 ms: never a pause the body timeout (30 s) would notice
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if wr.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        wr
    });
    // another client is served meanwhile
    let r = speech(&s, req("wav")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().len(), 44 + 2 * 2400 * 2);
    let answer = read_until_closed(&mut rd, Duration::from_secs(8)).await;
    let took = t0.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(6),
        "{took:?}"
    );
    trickle.abort();
    assert_eq!(speech(&s, req("wav")).await.status(), 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_get_503_and_the_server_still_serves() {
    let fake = Fake::new(1, 100, Duration::ZERO);
    let mut config = ServerConfig::default();
    config.max_connections = 2;
    let s = TestServer::start(config, vec![fake.device()]).await;
    // TestServer::start's client has gone: give the server a moment to see its connection close
    tokio::time::sleep(Duration::from_millis(200)).await;
    let c = reqwest::Client::new();
    let first = TcpStream::connect(addr(&s)).await.unwrap();
    let second = TcpStream::connect(addr(&s)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = c.get(s.url("/health")).send().await.unwrap();
    assert_eq!(r.headers()["retry-after"], "1");
    expect_kind(r, 503, "server_error", "too_many_connections").await;
    // one leaves: the next is served
    drop(first);
    let t0 = Instant::now();
    let c = reqwest::Client::new();
    loop {
        let r = c.get(s.url("/health")).send().await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 503);
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "no connection was freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // (on the same connection: `second` and this one are the two allowed)
    let r = json_post(&c, s.url("/v1/audio/speech"), &req("wav"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().len(), 44 + 100 * 2);
    let m = c
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("chatterbox_connections_refused_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(refused >= 1, "{m}");
    drop(second);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_a_stream_is_dropped_and_its_generation_stops() {
    // 400 chunks of 0.5 s (24 kB of PCM each, 9.6 MB in all), one every 10 ms
    let chunks = 400;
    let fake = Fake::new(chunks, 12_000, Duration::from_millis(10));
    let mut config = ServerConfig::default();
    config.write_timeout = Duration::from_millis(500);
    let s = TestServer::start(config, vec![fake.device()]).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut conn = socket.connect(addr(&s).parse().unwrap()).await.unwrap();
    let mut body = req("pcm");
    body["stream_format"] = json!("audio");
    let body = serde_json::to_vec(&body).unwrap();
    conn.write_all(
        format!(
            "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    conn.write_all(&body).await.unwrap();
    // never read: once the socket buffers are full the server's writes block, and after the
    // write timeout it drops the connection, which stops the generation
    let t0 = Instant::now();
    let mut last = (0, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let pulled = fake.pulled.load(Ordering::SeqCst);
        if pulled != last.0 {
            last = (pulled, Instant::now());
        } else if pulled > 0 && last.1.elapsed() > Duration::from_millis(600) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "the generation went on: {pulled}"
        );
    }
    assert!(
        last.0 < chunks,
        "every chunk was generated: the client was not dropped"
    );
    // what the client gets is cut short
    let got = read_until_closed(&mut conn, Duration::from_secs(5)).await;
    assert!(got.len() < chunks * 12_000 * 2, "{} bytes", got.len());
    assert!(got.starts_with(b"HTTP/1.1 200"));
    // and the server still serves (the first chunk is enough to know)
    let mut again = req("pcm");
    again["stream_format"] = json!("audio");
    let mut r = speech(&s, again).await;
    assert_eq!(r.status(), 200);
    assert!(!r.chunk().await.unwrap().unwrap().is_empty());
    drop(r);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_answers_new_requests_503_until_in_flight_ones_finish() {
    let fake = Fake::new(8, 2400, Duration::from_millis(100));
    let mut s = TestServer::start(ServerConfig::default(), vec![fake.device()]).await;
    let address = addr(&s);
    let mut body = req("pcm");
    body["stream_format"] = json!("audio");
    let r = speech(&s, body).await;
    assert_eq!(r.status(), 200);
    s.signal_stop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // new connections are accepted and answered: 503 for the API and /ready, 200 for /health
    for _ in 0..3 {
        let c = reqwest::Client::new();
        let r = c
            .post(s.url("/v1/audio/speech"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&req("pcm")).unwrap())
            .send()
            .await
            .expect("a connection during the drain is answered, not refused");
        assert_eq!(r.headers()["retry-after"], "1");
        let e = expect_error(r, 503).await;
        assert_eq!(e["code"], "unavailable");
        let r = c.get(s.url("/ready")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
    }
    // the request in flight gets all of its audio
    assert_eq!(r.bytes().await.unwrap().len(), 8 * 2400 * 2);
    s.stop().await;
    // then the listener is closed
    assert!(TcpStream::connect(&address).await.is_err());
}
