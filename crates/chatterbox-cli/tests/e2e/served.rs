//! `chatterbox serve` processes for the tests of several replicas (`replicas.rs`,
//! `shared_voices.rs`): the real binary on the tiny English checkpoint, on 127.0.0.1 and a port
//! it picks (`--port 0`, read back from its `listening on` line); and what those tests check in
//! the WAV files the replicas answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test
use crate::common::{fixtures, tensors, write_english_checkpoint, R};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Few speech tokens per sentence: the tiny model's tokens are random, so this bounds each
/// request's time.
pub const MAX_TOKENS: &str = "20";

/// Every HTTP request of these tests gives up after this long.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The tiny English checkpoint in the hub layout in `dir`, with the fixture's `conds.pt` as
/// its built-in voice.
pub fn checkpoint(dir: &Path) -> R<()> {
    write_english_checkpoint(&tensors("english")?, dir)?;
    std::fs::copy(
        fixtures().join("pipeline/english_conds.pt"),
        dir.join("conds.pt"),
    )?;
    Ok(())
}

/// An HTTP client whose every request times out.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client")
}

/// A running `chatterbox serve`; killed if a test leaves it running.
pub struct Replica {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The port it listens on.
    pub port: u16,
    stderr: Arc<Mutex<String>>,
}

impl Replica {
    /// Starts `chatterbox serve --port 0 --model-dir CKPT ARGS` on the CPU and waits (60 s at
    /// most) until `/ready` answers 200.
    pub async fn start(ckpt: &Path, args: &[&str]) -> R<Self> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_chatterbox"));
        cmd.env("CHATTERBOX_NO_WATERMARK", "1")
            .arg("serve")
            .args(["--host", "127.0.0.1", "--port", "0", "--device", "cpu"])
            .args(["--max-new-tokens", MAX_TOKENS, "--model-dir"])
            .arg(ckpt)
            .args(args)
            .env_remove("CHATTERBOX_MODEL_DIR")
            .env_remove("CHATTERBOX_API_KEY")
            .env_remove("CHATTERBOX_VOICES")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let pipe = child.stderr.take().expect("piped stderr");
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
            anyhow::bail!("no `listening on` line in 30 s: {}", stderr.lock().unwrap());
        };
        let port = base
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no port in {base:?}"))?;
        let mut r = Self {
            child,
            base: base.trim_end_matches('/').to_string(),
            port,
            stderr,
        };
        let client = client();
        let t0 = Instant::now();
        loop {
            if let Ok(resp) = client.get(r.url("/ready")).send().await {
                if resp.status() == 200 {
                    return Ok(r);
                }
            }
            if let Some(status) = r.child.try_wait()? {
                anyhow::bail!("the server exited with {status}: {}", r.log());
            }
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(60),
                "not ready in 60 s: {}",
                r.log()
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

impl Drop for Replica {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The number of samples of a whole 16-bit mono 24 kHz WAV file as the server answers one: a
/// RIFF header whose sizes are exactly the bytes that follow, and at least one sample. A file
/// cut short anywhere fails.
pub fn whole_wav_samples(b: &[u8]) -> R<usize> {
    let u32_at = |i: usize| -> R<u32> {
        let s = b
            .get(i..i + 4)
            .ok_or_else(|| anyhow::anyhow!("{} bytes: no field at {i}", b.len()))?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    };
    anyhow::ensure!(b.len() >= 44, "{} bytes: no WAV header", b.len());
    anyhow::ensure!(
        &b[0..4] == b"RIFF" && &b[8..12] == b"WAVE",
        "not a RIFF/WAVE file"
    );
    anyhow::ensure!(
        u64::from(u32_at(4)?) + 8 == b.len() as u64,
        "the RIFF size {} disagrees with the {} bytes",
        u32_at(4)?,
        b.len()
    );
    anyhow::ensure!(
        &b[12..16] == b"fmt " && &b[36..40] == b"data",
        "not a plain PCM header"
    );
    let (channels, rate, bits) = (
        u16::from_le_bytes([b[22], b[23]]),
        u32_at(24)?,
        u16::from_le_bytes([b[34], b[35]]),
    );
    anyhow::ensure!(
        (channels, rate, bits) == (1, 24_000, 16),
        "format {channels} ch, {rate} Hz, {bits} bits"
    );
    let data = u32_at(40)? as usize;
    anyhow::ensure!(
        data == b.len() - 44,
        "the data size {data} disagrees with the {} bytes after the header",
        b.len() - 44
    );
    anyhow::ensure!(
        data > 0 && data.is_multiple_of(2),
        "{data} bytes of 16-bit samples"
    );
    Ok(data / 2)
}

/// The number of samples of a streamed WAV (`stream_format=audio`): the header with unknown
/// sizes (`0xFFFFFFFF`), then whole 16-bit samples, at least one.
pub fn streamed_wav_samples(b: &[u8]) -> R<usize> {
    anyhow::ensure!(b.len() > 44, "{} bytes: no samples after a header", b.len());
    anyhow::ensure!(
        &b[0..4] == b"RIFF" && &b[36..40] == b"data",
        "not a WAV stream"
    );
    anyhow::ensure!(
        b[4..8] == [0xff; 4] && b[40..44] == [0xff; 4],
        "a stream's header has unknown sizes"
    );
    anyhow::ensure!((b.len() - 44).is_multiple_of(2), "half a sample at the end");
    Ok((b.len() - 44) / 2)
}
