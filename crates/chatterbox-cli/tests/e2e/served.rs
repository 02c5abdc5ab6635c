//! `chatterbox serve` processes for the tests of several replicas (`replicas.rs`,
//! `shared_voices.rs`): the real binary on the tiny English checkpoint, on 127.0.0.1 and a port
//! it picks (`--port 0`, read back from its `listening on` line); and what those tests check in
//! the WAV files the replicas answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test
use crate::common::{Served, R};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Few speech tokens per sentence: the tiny model's tokens are random, so this bounds each
/// request's time.
pub const MAX_TOKENS: &str = "20";

/// Every HTTP request of these tests gives up after this long.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The tiny English checkpoint in the hub layout in a folder, with the fixture's `conds.pt` as
/// its built-in voice.
pub use crate::common::write_english_checkpoint_with_voice as checkpoint;

/// An HTTP client whose every request times out.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client")
}

/// A running `chatterbox serve` replica.
pub type Replica = Served;

/// Starts `chatterbox serve --port 0 --model-dir CKPT ARGS` on the CPU and waits (60 s at most)
/// until `/ready` answers 200.
pub async fn replica(ckpt: &Path, args: &[&str]) -> R<Replica> {
    let args = |c: &mut Command| {
        c.arg("--model-dir").arg(ckpt).args(args);
    };
    Served::start(MAX_TOKENS, args, &client()).await
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
