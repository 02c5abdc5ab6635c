//! `chatterbox vc`: conversion, long sources window by window, and the clips it refuses.
use crate::support::{chatterbox, ok, p, read, setup, vc, write_wav, R};
use std::path::Path;
use std::process::Output;

#[test]
fn vc_converts_the_source_to_the_target_voice() -> R<()> {
    let s = setup()?;
    let out = s.source_wav.with_file_name("vc.wav");
    let config = s.dir.join(chatterbox_pipeline::CONFIG_FILE);
    let o = chatterbox(&[
        "vc",
        p(&s.source_wav),
        "--target",
        p(&s.ref_wav),
        "--model-dir",
        p(&s.dir),
        "--config",
        p(&config),
        "--device",
        "cpu",
        "-o",
        p(&out),
    ])?;
    ok(&o)?;
    // 0.6 s of source speech: as many samples as the reference's conversion.
    anyhow::ensure!(
        read(&out)?.len() == s.vc_len,
        "{} samples, reference {}",
        read(&out)?.len(),
        s.vc_len
    );
    Ok(())
}

/// Refused with exit status 1, a message naming `file` and containing `needle`, before the
/// model is loaded (off a terminal each step prints a line: no "Loading" one), and no output.
fn refused_before_loading(o: &Output, file: &str, needle: &str, out: &Path) -> R<()> {
    let err = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(o.status.code() == Some(1), "{:?}: {err}", o.status);
    anyhow::ensure!(err.contains(file) && err.contains(needle), "{err}");
    anyhow::ensure!(!err.contains("Loading"), "refused after loading: {err}");
    anyhow::ensure!(!out.exists(), "no output on failure");
    Ok(())
}

#[test]
fn vc_refuses_silent_and_too_short_clips_before_loading() -> R<()> {
    let s = setup()?;
    let dir = s.dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let out = dir.join("refused.wav");
    // Dither only (peak 3e-5, -90 dBFS): the library would take it as a voice.
    let dither: Vec<f32> = (0..48_000).map(|i| 3e-5 * (i as f32 * 0.7).sin()).collect();
    let quiet = dir.join("quiet-target.wav");
    write_wav(&quiet, dither.clone(), 24_000)?;
    let o = vc(&s, &s.source_wav, &quiet, &out, &[])?;
    refused_before_loading(&o, "quiet-target.wav", "-90 dBFS", &out)?;
    // A target under the library's 0.5 s.
    let clip = chatterbox_dsp::audio::load(&s.ref_wav)?.samples;
    let short_target = dir.join("short-target.wav");
    write_wav(&short_target, clip[..7_200].to_vec(), 24_000)?;
    let o = vc(&s, &s.source_wav, &short_target, &out, &[])?;
    refused_before_loading(&o, "short-target.wav", "at least 0.5 s", &out)?;
    // A 5 ms source (no speech token: the library failed after loading, naming no file).
    let source = chatterbox_dsp::audio::load(&s.source_wav)?.samples;
    let short = dir.join("short-source.wav");
    write_wav(&short, source[..80].to_vec(), 16_000)?;
    let o = vc(&s, &short, &s.ref_wav, &out, &[])?;
    refused_before_loading(&o, "short-source.wav", "5 ms long", &out)?;
    // An all-silent source would convert to silence.
    let silent = dir.join("silent-source.wav");
    write_wav(&silent, vec![0.0; 16_000], 16_000)?;
    let o = vc(&s, &silent, &s.ref_wav, &out, &[])?;
    refused_before_loading(&o, "silent-source.wav", "digital silence", &out)?;
    Ok(())
}

#[test]
fn vc_converts_a_long_source_window_by_window() -> R<()> {
    let s = setup()?;
    let dir = s.dir.parent().map(Path::to_path_buf).unwrap_or_default();
    // 3 s of source (75 speech tokens) in windows of 800 ms overlapping by 200 ms: 5 windows.
    let source = chatterbox_dsp::audio::load(&s.source_wav)?
        .samples
        .repeat(5);
    let long = dir.join("long-source.wav");
    let tokens = (source.len() / 160).div_ceil(4);
    write_wav(&long, source, 16_000)?;
    let (windowed, single) = (dir.join("windowed.wav"), dir.join("single.wav"));
    let f32_out = ["--wav-format", "f32"];
    let o = vc(
        &s,
        &long,
        &s.ref_wav,
        &windowed,
        &[&f32_out[..], &["--window-ms", "800", "--overlap-ms", "200"]].concat(),
    )?;
    ok(&o)?;
    let err = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(err.contains("window 5/5 done"), "not 5 windows: {err}");
    let w = read(&windowed)?;
    // The library's contract: 960 output samples per 40 ms token of the source, as one pass.
    anyhow::ensure!(
        w.len() == 960 * tokens,
        "{} samples for {tokens} tokens",
        w.len()
    );
    ok(&vc(
        &s,
        &long,
        &s.ref_wav,
        &single,
        &[&f32_out[..], &["--window-ms", "0"]].concat(),
    )?)?;
    let one = read(&single)?;
    anyhow::ensure!(one.len() == w.len(), "one pass: {} samples", one.len());
    anyhow::ensure!(one != w, "the windows were not converted separately");
    Ok(())
}
