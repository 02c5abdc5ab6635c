//! `chatterbox speak --stream`: the same audio as without, to files and pipes.
use crate::support::{chatterbox, ok, p, partial_files, read, setup, speak_args, R};
use std::path::Path;

/// The bytes after the 44-byte header of a PCM WAV (hound's and the stream's header).
fn pcm_data(wav: &[u8]) -> R<&[u8]> {
    anyhow::ensure!(
        wav.get(36..40) == Some(&b"data"[..]),
        "no data chunk at byte 36"
    );
    wav.get(44..)
        .ok_or_else(|| anyhow::anyhow!("{} bytes", wav.len()))
}

#[test]
fn stream_writes_what_generate_writes_to_files_and_pipes() -> R<()> {
    let s = setup()?;
    let dir = s.dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let (whole, streamed, raw) = (
        dir.join("whole.wav"),
        dir.join("streamed.wav"),
        dir.join("whole.raw"),
    );
    let run = |extra: &[&str]| {
        let mut args = speak_args(&s, "Hello there.", &s.ref_wav, "40");
        args.extend(["--seed", "3"]);
        args.extend(extra);
        let o = chatterbox(&args)?;
        ok(&o)?;
        Ok::<_, anyhow::Error>(o)
    };
    let n = {
        run(&["-o", p(&whole)])?;
        read(&whole)?.len()
    };

    // A file: a valid WAV as long as the one without --stream (the same seed draws the same
    // tokens), renamed into place, the time to the first audio reported.
    let o = run(&["--stream", "-o", p(&streamed)])?;
    let err = String::from_utf8_lossy(&o.stderr);
    // The first audio came before the sentence was done.
    let first = err.find("first audio after");
    let done = err.find("chunk 1/1 done");
    anyhow::ensure!(
        matches!((first, done), (Some(f), Some(d)) if f < d),
        "{err}"
    );
    anyhow::ensure!(
        err.contains("Wrote") && err.contains(", first audio after"),
        "{err}"
    );
    let samples = read(&streamed)?;
    anyhow::ensure!(
        samples.len() == n,
        "{} samples, {n} without --stream",
        samples.len()
    );
    anyhow::ensure!(
        partial_files(&dir, "streamed")?.is_empty(),
        "a partial file is left"
    );

    // Standard output, raw: 2 bytes per sample, nothing else.
    let o = run(&["--stream", "--wav-format", "raw", "-o", "-"])?;
    let pcm = o.stdout;
    anyhow::ensure!(pcm.len() == 2 * n, "{} bytes for {n} samples", pcm.len());

    // Standard output, WAV: a header of unknown length, then the same samples.
    let o = run(&["--stream", "-o", "-"])?;
    let wav = o.stdout;
    anyhow::ensure!(
        wav.get(4..8) == Some(&[0xFF; 4][..]),
        "RIFF size {:?}",
        wav.get(4..8)
    );
    let back = chatterbox_dsp::audio::decode(wav.clone(), Some("wav"))?;
    anyhow::ensure!(back.sample_rate == 24_000, "{} Hz", back.sample_rate);
    anyhow::ensure!(
        back.samples.len() == n,
        "{} samples, want {n}",
        back.samples.len()
    );
    anyhow::ensure!(
        pcm_data(&wav)? == &pcm[..],
        "the raw and WAV streams differ"
    );

    // Raw PCM to a file without --stream: the data of the WAV file.
    run(&["--wav-format", "raw", "-o", p(&raw)])?;
    let bytes = std::fs::read(&raw)?;
    anyhow::ensure!(
        bytes.len() == 2 * n,
        "{} bytes for {n} samples",
        bytes.len()
    );
    anyhow::ensure!(
        pcm_data(&std::fs::read(&whole)?)? == &bytes[..],
        "the raw file is not the WAV file's data"
    );
    anyhow::ensure!(
        partial_files(&dir, "whole")?.is_empty(),
        "a partial file is left"
    );
    Ok(())
}
