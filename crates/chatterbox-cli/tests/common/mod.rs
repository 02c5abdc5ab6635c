//! Shared by the `chatterbox` binary's test programs (`cli.rs`, `captions.rs`, `speed.rs`,
//! `serve.rs`, `quantize.rs` and `e2e/`): the tiny random checkpoints of the committed pipeline fixtures in
//! the hub layout, their clips as WAV files, and runs of the binary.
// each test program uses a part of this module
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub type R<T> = anyhow::Result<T>;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../parity/fixtures")
}

/// The tensors of the pipeline fixture `case` (`english`, `turbo`, `vc`).
pub fn tensors(case: &str) -> R<HashMap<String, Tensor>> {
    let path = fixtures()
        .join("pipeline")
        .join(format!("{case}.safetensors"));
    Ok(candle_core::safetensors::load(&path, &Device::Cpu)?)
}

pub fn samples(t: &HashMap<String, Tensor>, name: &str) -> R<Vec<f32>> {
    let v = t
        .get(name)
        .ok_or_else(|| anyhow::anyhow!("fixture lacks {name}"))?;
    Ok(v.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// The tensors under `prefix` (prefix removed) saved to `path`.
pub fn write_part(t: &HashMap<String, Tensor>, prefix: &str, path: &Path) -> R<()> {
    let part: HashMap<String, Tensor> = t
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
        .collect();
    anyhow::ensure!(!part.is_empty(), "no tensor under {prefix}");
    Ok(candle_core::safetensors::save(&part, path)?)
}

/// The `config.chatterbox` of the fixture `case`'s JSON, as the checkpoint config in `dir`.
pub fn write_config(case: &str, dir: &Path) -> R<()> {
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        fixtures().join(format!("pipeline/{case}.json")),
    )?)?;
    std::fs::write(
        dir.join(chatterbox_pipeline::CONFIG_FILE),
        serde_json::to_string(&fx["config"]["chatterbox"])?,
    )?;
    Ok(())
}

/// The english case's tiny checkpoint (its tensors `t`) in the hub layout in `dir`, created if
/// missing: the T3, VoiceEncoder and S3Gen weights, the tokenizer and the config.
pub fn write_english_checkpoint(t: &HashMap<String, Tensor>, dir: &Path) -> R<()> {
    std::fs::create_dir_all(dir)?;
    write_part(t, "t3.", &dir.join("t3_cfg.safetensors"))?;
    write_part(t, "ve.", &dir.join("ve.safetensors"))?;
    write_part(t, "s3gen.", &dir.join("s3gen.safetensors"))?;
    std::fs::copy(
        fixtures().join("text/assets/en/tokenizer.json"),
        dir.join("tokenizer.json"),
    )?;
    write_config("english", dir)
}

/// [`write_english_checkpoint`] with the fixture's `conds.pt` as its built-in voice (as
/// `chatterbox serve` wants one).
pub fn write_english_checkpoint_with_voice(dir: &Path) -> R<()> {
    write_english_checkpoint(&tensors("english")?, dir)?;
    std::fs::copy(
        fixtures().join("pipeline/english_conds.pt"),
        dir.join("conds.pt"),
    )?;
    Ok(())
}

/// `samples` at `sample_rate` as a 32-bit float WAV file (the samples exactly).
pub fn write_wav(path: &Path, samples: Vec<f32>, sample_rate: u32) -> R<()> {
    let audio = chatterbox_dsp::Audio::new(samples, sample_rate);
    Ok(chatterbox_dsp::audio::write_wav(
        path,
        &audio,
        chatterbox_dsp::WavFormat::Float32,
    )?)
}

/// The english case's tiny checkpoint as `tmp/ckpt` and its reference clip as `tmp/ref.wav`.
pub fn english_setup(tmp: &Path) -> R<(PathBuf, PathBuf)> {
    let t = tensors("english")?;
    let dir = tmp.join("ckpt");
    write_english_checkpoint(&t, &dir)?;
    let ref_wav = tmp.join("ref.wav");
    write_wav(&ref_wav, samples(&t, "in.ref_24k")?, 24_000)?;
    Ok((dir, ref_wav))
}

/// The `chatterbox` binary with `args`, without a watermark, with no model folder, weight
/// format or log filter from the environment and nothing on stdin.
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_chatterbox"));
    cmd.env("CHATTERBOX_NO_WATERMARK", "1")
        .args(args)
        .env_remove("CHATTERBOX_MODEL_DIR")
        .env_remove("CHATTERBOX_QUANTIZE")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null());
    cmd
}

/// [`command`] run to its end.
pub fn chatterbox(args: &[&str]) -> R<Output> {
    Ok(command(args).output()?)
}

pub fn ok(o: &Output) -> R<()> {
    anyhow::ensure!(
        o.status.success(),
        "chatterbox failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(())
}

/// The error message of a run that failed and wrote no `out`.
pub fn refused(o: &Output, out: &Path) -> String {
    assert!(!o.status.success(), "{} succeeded", out.display());
    assert!(!out.exists(), "{} was written", out.display());
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn p(path: &Path) -> &str {
    path.to_str().unwrap_or_default()
}

/// The samples of the 24 kHz WAV file at `path`, checked to be speech-like: some, all finite,
/// not all zero.
pub fn read(path: &Path) -> R<Vec<f32>> {
    let a = chatterbox_dsp::audio::load(path)?;
    anyhow::ensure!(a.sample_rate == 24_000, "sample rate {}", a.sample_rate);
    anyhow::ensure!(!a.samples.is_empty(), "{} is empty", path.display());
    anyhow::ensure!(
        a.samples.iter().all(|v| v.is_finite()),
        "non-finite samples"
    );
    anyhow::ensure!(a.samples.iter().any(|&v| v != 0.0), "all zero");
    Ok(a.samples)
}

/// `speak TEXT` with the tiny checkpoint `dir` and the voice clip `voice`, on the CPU,
/// drawing at most `max_tokens` speech tokens: the start of most tests' command lines.
pub fn speak_args<'a>(
    dir: &'a Path,
    text: &'a str,
    voice: &'a Path,
    max_tokens: &'a str,
) -> Vec<&'a str> {
    let device = ["--device", "cpu", "--max-new-tokens", max_tokens];
    [
        &["speak", text, "--model-dir", p(dir), "--voice", p(voice)][..],
        &device,
    ]
    .concat()
}

/// `speak "Hi." -o OUT` with a model folder `tmp/missing` that does not exist, then `extra`:
/// what is refused before loading fails the same without a model.
pub fn speak_without_model(tmp: &Path, out: &Path, extra: &[&str]) -> R<Output> {
    let dir = tmp.join("missing");
    let args = ["speak", "Hi.", "--model-dir", p(&dir), "-o", p(out)];
    chatterbox(&[&args[..], extra].concat())
}

/// `speak TEXT -o OUT` with the tiny checkpoint `dir` and the voice clip `voice`: 12 tokens,
/// seed 3, quiet, then `extra`.
pub fn speak_seeded(dir: &Path, voice: &Path, text: &str, out: &Path, extra: &[&str]) -> R<Output> {
    let mut args = speak_args(dir, text, voice, "12");
    args.extend(["--seed", "3", "--quiet", "-o", p(out)]);
    args.extend_from_slice(extra);
    chatterbox(&args)
}

/// A running `chatterbox serve` on the CPU, on 127.0.0.1 and a port it picks (`--port 0`, read
/// back from its `listening on` line); killed if a test leaves it running.
pub struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The port it listens on.
    pub port: u16,
    stderr: Arc<Mutex<String>>,
}

impl Served {
    /// Starts `chatterbox serve --port 0 --max-new-tokens MAX_TOKENS` and what `configure` adds
    /// (arguments, environment), without a watermark and with no model folder, API key, voice
    /// library or log filter from the environment; waits (60 s at most) until `/ready` answers
    /// 200 to `client`.
    pub async fn start(
        max_tokens: &str,
        configure: impl FnOnce(&mut Command),
        client: &reqwest::Client,
    ) -> R<Self> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_chatterbox"));
        cmd.env("CHATTERBOX_NO_WATERMARK", "1")
            .arg("serve")
            .args(["--host", "127.0.0.1", "--port", "0", "--device", "cpu"])
            .args(["--max-new-tokens", max_tokens])
            .env_remove("CHATTERBOX_MODEL_DIR")
            .env_remove("CHATTERBOX_API_KEY")
            .env_remove("CHATTERBOX_VOICES")
            .env_remove("RUST_LOG");
        configure(&mut cmd);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let pipe = child
            .stderr
            .take()
            .ok_or_else(|| anyhow::anyhow!("no piped stderr"))?;
        let log = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(i) = line.find("listening on http://") {
                    let url = line[i + "listening on ".len()..]
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    let _ = tx.send(url);
                }
                let mut l = log
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                l.push_str(&line);
                l.push('\n');
            }
        });
        let Ok(base) = rx.recv_timeout(Duration::from_secs(30)) else {
            let _ = child.kill();
            let _ = child.wait();
            let log = stderr
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            anyhow::bail!("no `listening on` line in 30 s: {log}");
        };
        let port = base
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no port in {base:?}"))?;
        let mut s = Self {
            child,
            base: base.trim_end_matches('/').to_string(),
            port,
            stderr,
        };
        let t0 = Instant::now();
        loop {
            if let Ok(resp) = client.get(s.url("/ready")).send().await {
                if resp.status() == 200 {
                    return Ok(s);
                }
            }
            if let Some(status) = s.child.try_wait()? {
                anyhow::bail!("the server exited with {status}: {}", s.log());
            }
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(60),
                "not ready in 60 s: {}",
                s.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// SIGTERM: the server drains (new requests 503, those in flight finish), then exits.
    #[cfg(unix)]
    pub fn terminate(&self) -> R<()> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id())?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        Ok(())
    }

    /// SIGKILL, and the process reaped.
    pub fn kill(&mut self) -> R<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// The exit status, waited for `within` at most.
    pub async fn exit_status(&mut self, within: Duration) -> R<ExitStatus> {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            anyhow::ensure!(
                t0.elapsed() < within,
                "still running {within:?} later: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
