//! The HTTP protocol against fake models on a loopback server: formats, streaming, SSE,
//! errors and their JSON, overload (429), disconnects, timeouts, the key, metrics, the voice
//! endpoints, graceful shutdown, and generated malformed requests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod support;

use chatterbox_server::{DeviceModels, ServerConfig};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::{expect_error, speech, upload_voice, wav_file, Fake, TestServer};

fn req(format: &str) -> serde_json::Value {
    json!({"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": format})
}

fn decode(bytes: &[u8]) -> chatterbox_dsp::Audio {
    chatterbox_dsp::audio::decode(bytes.to_vec(), None).unwrap()
}

/// An Ogg Opus file's pre-skip, end granule and number of audio packets (the headers checked).
fn ogg_opus(bytes: &[u8]) -> (u64, u64, usize) {
    let mut r = ogg::reading::PacketReader::new(std::io::Cursor::new(bytes.to_vec()));
    let head = r.read_packet_expected().unwrap();
    assert_eq!(&head.data[..8], b"OpusHead");
    assert_eq!(head.data[9], 1, "mono");
    let pre_skip = u64::from(u16::from_le_bytes([head.data[10], head.data[11]]));
    assert_eq!(&r.read_packet_expected().unwrap().data[..8], b"OpusTags");
    let (mut end, mut packets) = (0, 0);
    while let Some(p) = r.read_packet().unwrap() {
        packets += 1;
        if p.last_in_stream() {
            end = p.absgp_page();
        }
    }
    (pre_skip, end, packets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_ready_models_and_every_format() {
    let fake = Fake::new(3, 1000, Duration::ZERO);
    let s = TestServer::start(ServerConfig::default(), vec![fake.device()]).await;
    let c = reqwest::Client::new();
    assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
    let models: serde_json::Value = serde_json::from_str(&s.get_text("/v1/models").await).unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["chatterbox", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]);

    for (format, ctype) in [
        ("wav", "audio/wav"),
        ("flac", "audio/flac"),
        ("pcm", "audio/pcm"),
    ] {
        for stream in [None, Some("audio")] {
            let mut body = req(format);
            if let Some(sf) = stream {
                body["stream_format"] = json!(sf);
            }
            let r = speech(&s, body).await;
            assert_eq!(r.status(), 200, "{format} {stream:?}");
            assert_eq!(r.headers()["content-type"], ctype);
            let bytes = r.bytes().await.unwrap();
            if format == "pcm" {
                assert_eq!(bytes.len(), 3000 * 2);
            } else {
                let a = decode(&bytes);
                assert_eq!((a.samples.len(), a.sample_rate), (3000, 24_000), "{format}");
            }
        }
    }
    for stream in [None, Some("audio")] {
        let mut body = req("opus");
        if let Some(sf) = stream {
            body["stream_format"] = json!(sf);
        }
        let r = speech(&s, body).await;
        assert_eq!(r.status(), 200, "opus {stream:?}");
        assert_eq!(r.headers()["content-type"], "audio/ogg");
        let (pre_skip, end, packets) = ogg_opus(&r.bytes().await.unwrap());
        // granules count 48 kHz samples: the end granule says exactly 3000 samples at 24 kHz
        assert_eq!(end - pre_skip, 6000, "opus {stream:?}");
        assert!(packets >= 3000 / 480, "{packets} packets");
    }
    if cfg!(feature = "mp3") {
        for stream in [None, Some("audio")] {
            let mut body = req("mp3");
            if let Some(sf) = stream {
                body["stream_format"] = json!(sf);
            }
            let r = speech(&s, body).await;
            assert_eq!(r.headers()["content-type"], "audio/mpeg");
            let a = decode(&r.bytes().await.unwrap());
            assert!(
                (a.samples.len() as i64 - 3000).abs() < 3000,
                "{}",
                a.samples.len()
            );
        }
    } else {
        expect_error(speech(&s, req("mp3")).await, 400).await;
    }
    // the whole-file WAV has its exact sizes
    let bytes = speech(&s, req("wav")).await.bytes().await.unwrap();
    assert_eq!(u32::from_le_bytes(bytes[40..44].try_into().unwrap()), 6000);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_delivers_chunks_before_the_end_and_sse_events_parse() {
    let fake = Fake::new(4, 2400, Duration::from_millis(150));
    let s = TestServer::start(ServerConfig::default(), vec![fake.device()]).await;
    let mut body = req("wav");
    body["stream_format"] = json!("audio");
    let t0 = Instant::now();
    let mut r = speech(&s, body).await;
    assert_eq!(r.status(), 200);
    let mut arrivals = Vec::new();
    let mut all = Vec::new();
    while let Some(c) = r.chunk().await.unwrap() {
        arrivals.push(t0.elapsed());
        all.extend_from_slice(&c);
    }
    assert!(arrivals.len() > 1, "{arrivals:?}");
    // the first bytes came well before the last chunk was generated
    assert!(arrivals[0] + Duration::from_millis(300) < arrivals[arrivals.len() - 1]);
    assert_eq!(&all[40..44], &[0xff; 4], "unknown-length WAV header");
    assert_eq!(decode(&all).samples.len(), 4 * 2400);

    let mut body = req("flac");
    body["stream_format"] = json!("sse");
    let r = speech(&s, body).await;
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = String::from_utf8(r.bytes().await.unwrap().to_vec()).unwrap();
    let events: Vec<serde_json::Value> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    let (last, deltas) = events.split_last().unwrap();
    assert_eq!(last["type"], "speech.audio.done");
    assert!(last["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(deltas.len() > 1);
    let mut audio = Vec::new();
    for d in deltas {
        assert_eq!(d["type"], "speech.audio.delta");
        use base64::Engine as _;
        audio.extend(
            base64::engine::general_purpose::STANDARD
                .decode(d["audio"].as_str().unwrap())
                .unwrap(),
        );
    }
    assert_eq!(decode(&audio).samples.len(), 4 * 2400);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_their_status_and_json() {
    let fake = Fake::new(2, 100, Duration::ZERO);
    let voices = support::temp_dir("errors-voices");
    let mut config = ServerConfig::default();
    config.max_json_bytes = 8 * 1024;
    config.voices_dir = Some(voices.path().to_path_buf());
    let s = TestServer::start(config, vec![fake.device()]).await;
    let c = reqwest::Client::new();
    let post = |body: Vec<u8>| {
        c.post(s.url("/v1/audio/speech"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    expect_error(post(b"{not json".to_vec()).await.unwrap(), 400).await;
    for (field, value, param) in [
        ("response_format", json!("aac"), "response_format"),
        ("response_format", json!("ogg"), "response_format"),
        ("stream_format", json!("chunks"), "stream_format"),
        ("input", json!("x".repeat(4097)), "input"),
        ("temperature", json!(-1), "temperature"),
        ("speed", json!(4.5), "speed"),
    ] {
        let mut body = req("wav");
        body[field] = value;
        let e = expect_error(speech(&s, body).await, 400).await;
        assert_eq!(e["param"], param);
    }
    if !cfg!(feature = "mp3") {
        let e = expect_error(speech(&s, req("mp3")).await, 400).await;
        assert_eq!(e["param"], "response_format");
    }
    let mut body = req("wav");
    body["model"] = json!("whisper-1");
    assert_eq!(
        expect_error(speech(&s, body).await, 404).await["code"],
        "model_not_found"
    );
    let mut body = req("wav");
    body["model"] = json!("chatterbox-turbo");
    expect_error(speech(&s, body).await, 404).await;
    for voice in ["nobody", "../etc/passwd", "a.b"] {
        let mut body = req("wav");
        body["voice"] = json!(voice);
        assert_eq!(
            expect_error(speech(&s, body).await, 404).await["code"],
            "voice_not_found"
        );
    }
    let mut body = req("wav");
    body["input"] = json!("fail");
    expect_error(speech(&s, body).await, 500).await;
    expect_error(c.get(s.url("/v1/nothing")).send().await.unwrap(), 404).await;
    let big = format!(r#"{{"model":"tts-1","input":"{}"}}"#, "a".repeat(10_000));
    expect_error(post(big.into_bytes()).await.unwrap(), 413).await;
    let r = c.delete(s.url("/v1/voices/nobody")).send().await.unwrap();
    expect_error(r, 404).await;
    let r = c.delete(s.url("/v1/voices/bad.name")).send().await.unwrap();
    expect_error(r, 400).await;
    // a failure after the first audio aborts the body: never a file that looks complete
    let mut body = req("pcm");
    body["input"] = json!("fail-late");
    body["stream_format"] = json!("audio");
    // (the abort may come before hyper has flushed the head: then the request fails as a whole)
    if let Ok(r) = post(serde_json::to_vec(&body).unwrap()).await {
        assert_eq!(r.status(), 200);
        assert!(r.bytes().await.is_err());
    }
    let mut body = req("wav");
    body["input"] = json!("fail-late");
    body["stream_format"] = json!("sse");
    let text = speech(&s, body).await.text().await.unwrap();
    assert!(text.contains("\"type\":\"error\""), "{text}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_is_required_on_v1_only() {
    let fake = Fake::new(1, 100, Duration::ZERO);
    let mut config = ServerConfig::default();
    config.api_key = Some("sk-test".into());
    let s = TestServer::start(config, vec![fake.device()]).await;
    let c = reqwest::Client::new();
    expect_error(speech(&s, req("wav")).await, 401).await;
    let r = c
        .get(s.url("/v1/models"))
        .header("authorization", "Bearer sk-wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(expect_error(r, 401).await["code"], "invalid_api_key");
    let r = c
        .post(s.url("/v1/audio/speech"))
        .header("authorization", "Bearer sk-test")
        .body(serde_json::to_vec(&req("wav")).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_429_and_a_disconnect_frees_the_worker() {
    let fake = Fake::new(40, 2400, Duration::from_millis(50));
    let mut config = ServerConfig::default();
    config.queue_capacity = 0;
    let s = TestServer::start(config, vec![fake.device()]).await;
    let mut body = req("pcm");
    body["stream_format"] = json!("audio");
    let mut first = speech(&s, body.clone()).await;
    assert_eq!(first.status(), 200);
    assert!(first.chunk().await.unwrap().is_some());
    // the only worker is busy and no request may wait: refused at once
    let t0 = Instant::now();
    let r = speech(&s, req("pcm")).await;
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(expect_error(r, 429).await["code"], "queue_full");
    // the client leaves: the generation stops within a chunk and the worker takes new work
    drop(first);
    let t0 = Instant::now();
    loop {
        let r = speech(&s, req("pcm")).await;
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 429);
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "the worker was not freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // 40 chunks for the second request, a few for the abandoned one
    let pulled = fake.pulled.load(Ordering::SeqCst);
    assert!(
        pulled < 40 + 10,
        "the abandoned generation went on: {pulled} chunks"
    );
    let m = s.get_text("/metrics").await;
    assert!(
        m.contains("chatterbox_requests_total{status=\"429\"}"),
        "{m}"
    );
    assert!(
        m.contains("chatterbox_speech_time_to_first_audio_seconds_count"),
        "{m}"
    );
    assert!(m.contains("chatterbox_queue_depth 0"), "{m}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_generation_times_out() {
    let fake = Fake::new(50, 100, Duration::from_millis(40));
    let mut config = ServerConfig::default();
    config.request_timeout = Duration::from_millis(300);
    let s = TestServer::start(config, vec![fake.device()]).await;
    assert_eq!(
        expect_error(speech(&s, req("wav")).await, 504).await["code"],
        "timeout"
    );
    s.stop().await;
    assert!(fake.pulled.load(Ordering::SeqCst) < 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voice_endpoints_with_a_fake_model() {
    let fake = Fake::new(1, 100, Duration::ZERO);
    let dir = support::temp_dir("fake-voices");
    let mut config = ServerConfig::default();
    config.voices_dir = Some(dir.path().to_path_buf());
    let s = TestServer::start(config, vec![fake.device()]).await;
    let c = reqwest::Client::new();
    let clip = wav_file(&vec![0.1; 24_000], 24_000);
    let r = upload_voice(&s.base, "amy_1", clip.clone()).await;
    assert_eq!(r.status(), 201);
    let e = expect_error(upload_voice(&s.base, "../amy", clip.clone()).await, 400).await;
    assert_eq!(e["param"], "name");
    let e = expect_error(
        upload_voice(&s.base, "bob", b"not audio".to_vec()).await,
        400,
    )
    .await;
    assert_eq!(e["param"], "file");
    let list: serde_json::Value = serde_json::from_str(&s.get_text("/v1/voices").await).unwrap();
    assert_eq!(list["data"][0]["id"], "amy_1");
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    let mut body = req("wav");
    body["voice"] = json!("amy_1");
    assert_eq!(speech(&s, body.clone()).await.status(), 200);
    assert!(fake.last_voice.lock().unwrap().is_some());
    assert_eq!(speech(&s, req("wav")).await.status(), 200);
    assert!(
        fake.last_voice.lock().unwrap().is_none(),
        "alloy is the built-in voice"
    );
    assert_eq!(
        c.delete(s.url("/v1/voices/amy_1"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    expect_error(speech(&s, body).await, 404).await;
    // no staging directory is left behind (only the library's commit lock file)
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from(".lock")]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_requests() {
    let fake = Fake::new(6, 2400, Duration::from_millis(100));
    let mut s = TestServer::start(ServerConfig::default(), vec![fake.device()]).await;
    let mut body = req("pcm");
    body["stream_format"] = json!("audio");
    let r = speech(&s, body).await;
    assert_eq!(r.status(), 200);
    s.signal_stop();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // new connections are refused (or answered 503) while the request in flight completes
    match reqwest::Client::new()
        .post(s.url("/v1/audio/speech"))
        .body(serde_json::to_vec(&req("pcm")).unwrap())
        .send()
        .await
    {
        Ok(r) => assert_eq!(r.status(), 503),
        Err(e) => assert!(e.is_connect() || e.is_request(), "{e}"),
    }
    assert_eq!(r.bytes().await.unwrap().len(), 6 * 2400 * 2);
    s.stop().await;
}

#[test]
fn generated_malformed_requests_never_panic_and_get_4xx() {
    use proptest::prelude::*;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = Fake::new(1, 10, Duration::ZERO);
    let mut config = ServerConfig::default();
    let voices = support::temp_dir("fuzz-voices");
    config.voices_dir = Some(voices.path().to_path_buf());
    let s = rt.block_on(TestServer::start(config, vec![fake.device()]));
    let value = prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(|b| json!(b)),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|x| json!(x)),
        ".{0,12}".prop_map(|t| json!(t)),
        prop::sample::select(vec![
            "wav",
            "pcm",
            "flac",
            "mp3",
            "sse",
            "audio",
            "alloy",
            "tts-1",
            "chatterbox",
            ""
        ])
        .prop_map(|t| json!(t)),
        Just(json!([1, "a"])),
        Just(json!({"id": "alloy"})),
    ];
    let field = prop::sample::select(vec![
        "model",
        "input",
        "voice",
        "response_format",
        "speed",
        "instructions",
        "stream_format",
        "exaggeration",
        "cfg_weight",
        "temperature",
        "top_p",
        "min_p",
        "repetition_penalty",
        "seed",
        "language",
        "extra",
    ]);
    let body = prop_oneof![
        prop::collection::vec((field, value), 0..8).prop_map(|kv| {
            let m: serde_json::Map<String, serde_json::Value> =
                kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            serde_json::to_vec(&m).unwrap()
        }),
        prop::collection::vec(any::<u8>(), 0..64),
    ];
    let client = reqwest::Client::new();
    let url = s.url("/v1/audio/speech");
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 96,
        failure_persistence: None,
        ..Default::default()
    });
    runner
        .run(&body, |b| {
            let status = rt.block_on(async {
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(b.clone())
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                if status != 200 {
                    let v: serde_json::Value =
                        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
                    assert!(v["error"]["message"].is_string());
                } else {
                    r.bytes().await.unwrap();
                }
                status
            });
            // the fake speaks any text, so a valid request is a 200
            prop_assert!(status == 200 || (400..500).contains(&status), "{status}");
            Ok(())
        })
        .unwrap();
    // and multipart uploads
    let form_url = s.url("/v1/voices");
    for bytes in [Vec::new(), b"--x\r\n".to_vec(), vec![0xff; 100]] {
        let status = rt.block_on(async {
            client
                .post(&form_url)
                .header("content-type", "multipart/form-data; boundary=x")
                .body(bytes)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        });
        assert!((400..500).contains(&status), "{status}");
    }
    assert_eq!(
        rt.block_on(async { client.get(s.url("/health")).send().await.unwrap().status() }),
        200
    );
    rt.block_on(s.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_devices_serve_two_requests_at_once() {
    let a = Fake::new(10, 2400, Duration::from_millis(40));
    let b = Fake::new(10, 2400, Duration::from_millis(40));
    let mut config = ServerConfig::default();
    config.queue_capacity = 0;
    let memory = |used| {
        move || {
            Some(chatterbox_pipeline::DeviceMemory {
                used_bytes: used,
                total_bytes: 80 << 30,
            })
        }
    };
    let devices = vec![
        DeviceModels::loaded("gpu-a", vec![Box::new(a.clone())]).with_memory_probe(memory(1)),
        DeviceModels::loaded("gpu-b", vec![Box::new(b.clone())]).with_memory_probe(memory(2)),
    ];
    let s = TestServer::start(config, devices).await;
    let mut body = req("pcm");
    body["stream_format"] = json!("audio");
    let mut r1 = speech(&s, body.clone()).await;
    let mut r2 = speech(&s, body).await;
    assert_eq!((r1.status().as_u16(), r2.status().as_u16()), (200, 200));
    assert!(r1.chunk().await.unwrap().is_some() && r2.chunk().await.unwrap().is_some());
    // both workers busy, no waiting room: the third is refused
    expect_error(speech(&s, req("pcm")).await, 429).await;
    let (n1, n2) = (
        r1.bytes().await.unwrap().len(),
        r2.bytes().await.unwrap().len(),
    );
    assert!(n1 > 0 && n2 > 0);
    assert!(a.pulled.load(Ordering::SeqCst) > 0 && b.pulled.load(Ordering::SeqCst) > 0);
    // each device's memory, read from its probe at the scrape, and the process's
    let m = s.get_text("/metrics").await;
    for line in [
        "chatterbox_device_memory_used_bytes{device=\"gpu-a\"} 1\n",
        "chatterbox_device_memory_used_bytes{device=\"gpu-b\"} 2\n",
        "chatterbox_device_memory_total_bytes{device=\"gpu-b\"} 85899345920\n",
    ] {
        assert!(m.contains(line), "{line} in {m}");
    }
    if cfg!(target_os = "linux") {
        assert!(m.contains("process_resident_memory_bytes "), "{m}");
    }
    s.stop().await;
}

/// Reads what the server sends on `conn` until it closes (at most `limit`).
async fn read_until_closed(conn: &mut tokio::net::TcpStream, limit: Duration) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let read = tokio::time::timeout(limit, conn.read_to_end(&mut got)).await;
    assert!(
        read.is_ok(),
        "the server kept the connection open past {limit:?}"
    );
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_bodies_are_cut_off() {
    use tokio::io::AsyncWriteExt;
    let fake = Fake::new(1, 100, Duration::ZERO);
    let mut config = ServerConfig::default();
    config.header_timeout = Duration::from_millis(500);
    config.body_timeout = Duration::from_millis(500);
    let s = TestServer::start(config, vec![fake.device()]).await;
    let addr = s.base.trim_start_matches("http://").to_string();

    // a head that never ends: the connection is closed
    let t0 = Instant::now();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    conn.write_all(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    read_until_closed(&mut conn, Duration::from_secs(10)).await;
    assert!(
        t0.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );

    // a body that stops arriving: 408 with OpenAI's error JSON, then the connection closes
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    conn.write_all(
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"model\": ",
    )
    .await
    .unwrap();
    let answer = read_until_closed(&mut conn, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");

    // an idle kept-alive connection is closed too; the server still serves
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    read_until_closed(&mut conn, Duration::from_secs(10)).await;
    assert_eq!(speech(&s, req("wav")).await.status(), 200);
    s.stop().await;
}
