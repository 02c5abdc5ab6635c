//! An interrupted `speak` or `vc` (SIGTERM) keeps its finished audio in a valid partial file
//! and leaves an existing output untouched.
use crate::support::{command, p, partial_files, read, setup, wav_counts, write_wav, R};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn sigterm_keeps_the_finished_chunks_and_the_old_output() -> R<()> {
    let s = setup()?;
    let dir = s.dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let out = dir.join("story.wav");
    write_wav(&out, vec![0.25; 2400], 24_000)?;
    // Many short chunks, so the run is still going when the first ones are written.
    let text = (1..=400)
        .map(|i| format!("Sentence number {i} is here."))
        .collect::<Vec<_>>()
        .join(" ");
    let text_file = dir.join("story.txt");
    std::fs::write(&text_file, text)?;
    interrupted_keeps_the_finished_audio(
        &[
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
        ],
        &out,
    )
}

#[test]
fn vc_sigterm_keeps_the_finished_windows_and_the_old_output() -> R<()> {
    let s = setup()?;
    let dir = s.dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let out = dir.join("converted.wav");
    write_wav(&out, vec![0.25; 2400], 24_000)?;
    // Two minutes of source in 400 ms windows: hundreds of them, so the run is still going
    // when the first ones are written.
    let source = chatterbox_dsp::audio::load(&s.source_wav)?
        .samples
        .repeat(200);
    let long = dir.join("two-minutes.wav");
    write_wav(&long, source, 16_000)?;
    interrupted_keeps_the_finished_audio(
        &[
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
        ],
        &out,
    )
}

/// Runs `chatterbox args`, whose output `out` exists, and sends it SIGTERM once a
/// `STEM.partial-*.wav` beside `out` holds audio; then checks what it leaves: exit status 130,
/// a message naming the partial file, `out` untouched, and the partial file a valid WAV of
/// whole pieces that a decoder reads.
fn interrupted_keeps_the_finished_audio(args: &[&str], out: &Path) -> R<()> {
    let before = std::fs::read(out)?;
    let dir = out.parent().map(Path::to_path_buf).unwrap_or_default();
    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned());
    let stem = stem.unwrap_or_default();
    let mut child = command(args)
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
        if let Some(f) = partial_files(&dir, &stem)?.first() {
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
    anyhow::ensure!(std::fs::read(out)? == before, "the old output was changed");
    let (samples, _) = wav_counts(&partial)?;
    anyhow::ensure!(samples > 0, "no audio kept");
    anyhow::ensure!(read(&partial)?.len() == samples as usize);
    Ok(())
}
