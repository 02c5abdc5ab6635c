//! An interrupted `speak` or `vc` (SIGTERM) keeps its finished audio in a valid partial file
//! and leaves an existing output untouched.
use crate::support::{p, partial_files, read, setup, wav_counts, write_wav, R};
use std::path::Path;
use std::process::Command;

#[cfg(unix)]
#[test]
fn sigterm_keeps_the_finished_chunks_and_the_old_output() -> R<()> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::time::{Duration, Instant};
    let s = setup()?;
    let dir = s.dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let out = dir.join("story.wav");
    write_wav(&out, vec![0.25; 2400], 24_000)?;
    let before = std::fs::read(&out)?;
    // Many short chunks, so the run is still going when the first ones are written.
    let text = (1..=400)
        .map(|i| format!("Sentence number {i} is here."))
        .collect::<Vec<_>>()
        .join(" ");
    let text_file = dir.join("story.txt");
    std::fs::write(&text_file, text)?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_chatterbox"))
        .env("CHATTERBOX_NO_WATERMARK", "1")
        .args([
            "speak",
            "--file",
            p(&text_file),
            "--chunk-chars",
            "30",
            "--model-dir",
            p(&s.dir),
            "--voice",
            p(&s.ref_wav),
            "--device",
            "cpu",
            "--max-new-tokens",
            "8",
            "-o",
            p(&out),
        ])
        .env_remove("CHATTERBOX_MODEL_DIR")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    // Wait for a partial file holding audio, then interrupt.
    let started = Instant::now();
    let partial = loop {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "no partial audio after 120 s"
        );
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("finished ({status}) before it could be interrupted");
        }
        let found = partial_files(&dir, "story")?;
        if let Some(f) = found.first() {
            if wav_counts(f).is_ok_and(|(n, _)| n > 0) {
                break f.clone();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = i32::try_from(child.id())?;
    kill(Pid::from_raw(pid), Signal::SIGTERM)?;
    let o = child.wait_with_output()?;
    let err = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(o.status.code() == Some(130), "status {:?}: {err}", o.status);
    anyhow::ensure!(
        err.contains("interrupted") && err.contains(p(&partial)),
        "the message does not name {}: {err}",
        partial.display()
    );
    anyhow::ensure!(std::fs::read(&out)? == before, "the old output was changed");
    // The kept file is a valid WAV of whole chunks, readable by a decoder.
    let (samples, _) = wav_counts(&partial)?;
    anyhow::ensure!(samples > 0, "no audio kept");
    anyhow::ensure!(read(&partial)?.len() == samples as usize);
    Ok(())
}

#[cfg(unix)]
#[test]
fn vc_sigterm_keeps_the_finished_windows_and_the_old_output() -> R<()> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::time::{Duration, Instant};
    let s = setup()?;
    let dir = s.dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let out = dir.join("converted.wav");
    write_wav(&out, vec![0.25; 2400], 24_000)?;
    let before = std::fs::read(&out)?;
    // Two minutes of source in 400 ms windows: hundreds of them, so the run is still going
    // when the first ones are written.
    let source = chatterbox_dsp::audio::load(&s.source_wav)?
        .samples
        .repeat(200);
    let long = dir.join("two-minutes.wav");
    write_wav(&long, source, 16_000)?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_chatterbox"))
        .env("CHATTERBOX_NO_WATERMARK", "1")
        .args([
            "vc",
            p(&long),
            "--target",
            p(&s.ref_wav),
            "--model-dir",
            p(&s.dir),
            "--device",
            "cpu",
            "--window-ms",
            "400",
            "--overlap-ms",
            "160",
            "-o",
            p(&out),
        ])
        .env_remove("CHATTERBOX_MODEL_DIR")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let started = Instant::now();
    let partial = loop {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "no partial audio after 120 s"
        );
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("finished ({status}) before it could be interrupted");
        }
        if let Some(f) = partial_files(&dir, "converted")?.first() {
            if wav_counts(f).is_ok_and(|(n, _)| n > 0) {
                break f.clone();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    kill(Pid::from_raw(i32::try_from(child.id())?), Signal::SIGTERM)?;
    let o = child.wait_with_output()?;
    let err = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(o.status.code() == Some(130), "status {:?}: {err}", o.status);
    anyhow::ensure!(
        err.contains("interrupted") && err.contains(p(&partial)),
        "the message does not name {}: {err}",
        partial.display()
    );
    anyhow::ensure!(std::fs::read(&out)? == before, "the old output was changed");
    let (samples, _) = wav_counts(&partial)?;
    anyhow::ensure!(samples > 0, "no audio kept");
    anyhow::ensure!(read(&partial)?.len() == samples as usize);
    Ok(())
}
