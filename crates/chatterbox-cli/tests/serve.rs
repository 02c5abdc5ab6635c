//! `chatterbox serve` end to end: the real binary on the tiny English checkpoint of the
//! committed pipeline fixtures, on 127.0.0.1 and a port the binary picks (`--port 0`, read back
//! from the `listening on` line), driven by a Rust HTTP client and by the README's curl
//! commands; SIGTERM stops it with status 0.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod common;

use common::Served;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Few speech tokens per request: the tiny model's tokens are random, so this bounds each
/// request's time.
const MAX_TOKENS: &str = "30";

/// The tiny English checkpoint in the hub layout, with the fixture's `conds.pt` as its
/// built-in voice.
fn checkpoint(dir: &Path) {
    common::write_english_checkpoint_with_voice(dir).unwrap();
}

/// The fixture's 24 kHz reference clip as a 16-bit WAV file.
fn write_ref_clip(path: &Path) {
    let samples = common::samples(&common::tensors("english").unwrap(), "in.ref_24k").unwrap();
    chatterbox_dsp::audio::write_wav(
        path,
        &chatterbox_dsp::Audio::new(samples, 24_000),
        chatterbox_dsp::WavFormat::Pcm16,
    )
    .unwrap();
}

/// Starts `chatterbox serve --port 0 ARGS` with `envs` and waits until `/ready` answers 200.
async fn start(args: &[&str], envs: &[(&str, &str)]) -> Served {
    let configure = |c: &mut Command| {
        c.args(args).envs(envs.iter().copied());
    };
    Served::start(MAX_TOKENS, configure, &reqwest::Client::new())
        .await
        .unwrap()
}

/// SIGTERM, then the exit status within `within`.
async fn terminate(s: &mut Served, within: Duration) -> ExitStatus {
    s.terminate().unwrap();
    s.exit_status(within).await.unwrap()
}

/// The body of the answer to `r`, as text.
async fn text(r: reqwest::RequestBuilder) -> String {
    r.send().await.unwrap().text().await.unwrap()
}

async fn speech(s: &Served, key: Option<&str>, body: serde_json::Value) -> reqwest::Response {
    let mut r = reqwest::Client::new()
        .post(s.url("/v1/audio/speech"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap());
    if let Some(k) = key {
        r = r.header("authorization", format!("Bearer {k}"));
    }
    r.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_speaks_wav_and_stops_cleanly_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    checkpoint(&ckpt);
    let mut s = start(
        &["--model-dir", ckpt.to_str().unwrap()],
        &[("CHATTERBOX_API_KEY", "test-key")],
    )
    .await;
    assert!(s.base.starts_with("http://127.0.0.1:"), "{}", s.base);
    assert!(!s.base.ends_with(":0"), "the bound port, not 0: {}", s.base);

    let body = serde_json::json!({"model": "tts-1", "voice": "alloy",
        "input": "Hello from the serve test.", "response_format": "wav", "seed": 5});
    // the key from the environment is enforced
    let denied = speech(&s, None, body.clone()).await;
    assert_eq!(denied.status(), 401);
    let denied = speech(&s, Some("wrong"), body.clone()).await;
    assert_eq!(denied.status(), 401);

    let r = speech(&s, Some("test-key"), body.clone()).await;
    assert_eq!(r.status(), 200, "{}", s.log());
    assert_eq!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("audio/wav")
    );
    let wav = r.bytes().await.unwrap();
    let reader = hound::WavReader::new(std::io::Cursor::new(wav.to_vec())).unwrap();
    let spec = reader.spec();
    assert_eq!(
        (spec.channels, spec.sample_rate, spec.bits_per_sample),
        (1, 24_000, 16)
    );
    let n = reader.len() as usize;
    assert!(n > 0, "no samples");
    let samples: Vec<i16> = reader.into_samples().map(Result::unwrap).collect();
    assert_eq!(samples.len(), n);
    assert!(samples.iter().any(|&v| v != 0), "all silence");
    // --max-new-tokens caps it: 30 tokens of 40 ms, plus the flow's tail
    assert!(n < 24_000 * 3, "{n} samples from 30 tokens");

    // the served models, by their API names
    let models = reqwest::Client::new().get(s.url("/v1/models"));
    let models = text(models.bearer_auth("test-key")).await;
    assert!(models.contains("\"chatterbox\""), "{models}");

    let status = terminate(&mut s, Duration::from_secs(10)).await;
    assert!(status.success(), "{status}: {}", s.log());
    let log = s.log();
    assert!(log.contains("model loaded"), "{log}");
    assert!(
        !log.contains("Hello from the serve test"),
        "the text is not logged: {log}"
    );
}

#[test]
fn missing_checkpoint_files_fail_before_listening() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let ckpt = tmp.path().join("ckpt");
    checkpoint(&ckpt);
    for args in [
        vec!["--model-dir", empty.to_str().unwrap()],
        // the english checkpoint holds no Turbo files
        vec![
            "--model",
            "english",
            "--model",
            &format!("turbo={}", ckpt.display()),
        ],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_chatterbox"))
            .env("CHATTERBOX_NO_WATERMARK", "1")
            .args(["serve", "--port", "0", "--device", "cpu"])
            .args(&args)
            .env_remove("CHATTERBOX_MODEL_DIR")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("listening"), "{err}");
        assert!(err.contains(".safetensors"), "names the file: {err}");
    }
}

#[test]
fn a_model_that_fails_to_load_stops_the_server_with_its_error() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    checkpoint(&ckpt);
    // present and readable (the pre-flight check passes), but not a safetensors file
    std::fs::write(ckpt.join("t3_cfg.safetensors"), b"not safetensors").unwrap();
    let mut child = common::command(&["serve", "--port", "0", "--device", "cpu", "--model-dir"])
        .arg(&ckpt)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("still running 30 s after a failed load");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: cannot load the english model"),
        "{err}"
    );
}

/// The `curl` command lines of the README's `## Server` section (continuation lines joined).
fn readme_curls() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let start = readme.find("\n## Server\n").expect("a ## Server section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut current = String::new();
    for line in section.lines() {
        if line.trim_start().starts_with("```") {
            in_sh = !in_sh && line.trim() == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let (text, continues) = match line.trim_end().strip_suffix('\\') {
            Some(t) => (t, true),
            None => (line.trim_end(), false),
        };
        current.push_str(text.trim());
        current.push(' ');
        if !continues {
            let c = current.trim().to_string();
            if c.starts_with("curl ") {
                commands.push(c);
            }
            current.clear();
        }
    }
    commands
}

fn curl_on_path() -> bool {
    Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_curl_examples_work() {
    let curls = readme_curls();
    assert!(curls.len() >= 6, "{curls:?}");
    assert!(curls.iter().any(|c| c.contains("| ")), "a piped stream");
    assert!(curls.iter().any(|c| c.contains("/v1/voices")), "voices");
    if !curl_on_path() {
        eprintln!("note: curl is not on PATH; the README's curl examples were not run");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    checkpoint(&ckpt);
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    write_ref_clip(&work.join("narrator.wav"));
    let voices = tmp.path().join("voices");
    let mut s = start(
        &[
            "--model-dir",
            ckpt.to_str().unwrap(),
            "--voices",
            voices.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    for (i, original) in curls.iter().enumerate() {
        assert!(original.contains("http://localhost:8000/"), "{original}");
        let mut c = original.replace("http://localhost:8000", &s.base);
        // a player at the end of a pipe: the stream goes to a file instead
        if let Some(p) = c.find(" | ") {
            c.truncate(p);
        }
        let c = c.replacen("curl ", "curl --fail-with-body --max-time 120 ", 1);
        let to_file = c.split_whitespace().any(|w| w == "-o");
        let stdout_file = work.join(format!("stdout-{i}"));
        let out = tokio::task::spawn_blocking({
            let work = work.clone();
            let c = c.clone();
            move || {
                Command::new("sh")
                    .arg("-c")
                    .arg(&c)
                    .current_dir(&work)
                    .stdin(Stdio::null())
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "`{c}` failed with {}: {}{}\nserver: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            s.log()
        );
        let written = if to_file {
            let name = c
                .split_whitespace()
                .skip_while(|w| *w != "-o")
                .nth(1)
                .unwrap();
            let path = work.join(name);
            let bytes = std::fs::read(&path).unwrap();
            if name.ends_with(".wav") || name.ends_with(".flac") {
                let audio = chatterbox_dsp::audio::load(&path).unwrap();
                assert!(!audio.samples.is_empty(), "{name} holds no audio");
            }
            bytes
        } else {
            std::fs::write(&stdout_file, &out.stdout).unwrap();
            out.stdout
        };
        assert!(!written.is_empty(), "`{c}` wrote nothing");
        eprintln!("ran `{c}`: {} bytes", written.len());
        if c.contains("\"stream_format\": \"sse\"") {
            let text = String::from_utf8_lossy(&written);
            assert!(text.contains("speech.audio.done"), "{text}");
        } else if c.contains("\"response_format\": \"pcm\"") {
            assert_eq!(written.len() % 2, 0, "whole 16-bit samples");
        }
    }
    // the uploaded voice was used and then deleted
    let list = text(reqwest::Client::new().get(s.url("/v1/voices"))).await;
    assert!(!list.contains("narrator"), "{list}");
    assert!(terminate(&mut s, Duration::from_secs(10)).await.success());
}
