//! `chatterbox speak`: voices, the clip checks, logs, warnings and the T3 weight formats.
use crate::support::{chatterbox, command, ok, p, read, setup, speak_args, write_wav, R};
use std::path::Path;

#[test]
fn speak_clones_a_voice_reproducibly_and_reuses_saved_voices() -> R<()> {
    let s = setup()?;
    let out = s.dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let (a, b, c) = (out.join("a.wav"), out.join("b.wav"), out.join("c.wav"));
    let voice = out.join("voice.safetensors");
    let common = [
        "--model-dir",
        p(&s.dir),
        "--device",
        "cpu",
        "--max-new-tokens",
        "16",
        "--wav-format",
        "f32",
    ];
    let text = "Hello there. This is a test!";

    let mut args = vec![
        "speak",
        text,
        "--voice",
        p(&s.ref_wav),
        "--save-voice",
        p(&voice),
    ];
    args.extend(common);
    args.extend(["--seed", "1", "-o", p(&a)]);
    let o = chatterbox(&args)?;
    ok(&o)?;
    let stderr = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(
        stderr.contains("Wrote") && stderr.contains("a.wav"),
        "{stderr}"
    );
    // Standard error is a pipe here: plain progress lines, not silence.
    for line in [
        "Loading Chatterbox english from",
        "✓ Loaded Chatterbox english on cpu",
        "✓ Analysed the voice in",
        "chunk 1/1 done:",
    ] {
        anyhow::ensure!(stderr.contains(line), "no {line:?} in:\n{stderr}");
    }
    let wav_a = read(&a)?;
    anyhow::ensure!(voice.is_file(), "--save-voice wrote nothing");

    // The saved voice and the same seed give the same audio.
    let mut args = vec!["speak", text, "--voice-file", p(&voice), "--quiet"];
    args.extend(common);
    args.extend(["--seed", "1", "-o", p(&b)]);
    let o = chatterbox(&args)?;
    ok(&o)?;
    anyhow::ensure!(
        !String::from_utf8_lossy(&o.stderr).contains("Wrote"),
        "--quiet printed the summary"
    );
    anyhow::ensure!(read(&b)? == wav_a, "same voice and seed, different audio");

    // Another seed, other audio.
    let mut args = vec!["speak", text, "--voice-file", p(&voice)];
    args.extend(common);
    args.extend(["--seed", "2", "-o", p(&c)]);
    ok(&chatterbox(&args)?)?;
    anyhow::ensure!(read(&c)? != wav_a, "the seed changes nothing");
    Ok(())
}

#[test]
fn turbo_needs_a_clip_longer_than_5_s_and_speaks_with_one() -> R<()> {
    let s = setup()?;
    let out = s.ref_wav.with_file_name("turbo.wav");
    let speak = |voice: &Path| {
        chatterbox(&[
            "speak",
            "Hello there. This is a test!",
            "--model",
            "turbo",
            "--model-dir",
            p(&s.turbo_dir),
            "--voice",
            p(voice),
            "--max-new-tokens",
            "16",
            "-o",
            p(&out),
        ])
    };

    // The 1.2 s english reference clip is too short for Turbo.
    let o = speak(&s.ref_wav)?;
    let err = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(o.status.code() == Some(1), "{err}");
    anyhow::ensure!(err.contains("ref.wav") && err.contains("5 s"), "{err}");
    anyhow::ensure!(!out.exists(), "no output on failure");

    // Six repetitions of it are long enough.
    let clip = chatterbox_dsp::audio::load(&s.ref_wav)?.samples;
    let long = s.ref_wav.with_file_name("long.wav");
    write_wav(&long, clip.repeat(6), 24_000)?;
    ok(&speak(&long)?)?;
    read(&out)?;
    Ok(())
}

#[test]
fn a_silent_voice_clip_is_refused() -> R<()> {
    let s = setup()?;
    let silent = s.ref_wav.with_file_name("silent.wav");
    write_wav(&silent, vec![0.0; 48_000], 24_000)?;
    let out = s.ref_wav.with_file_name("x.wav");
    let o = chatterbox(&[
        "speak",
        "Hello.",
        "--model-dir",
        p(&s.dir),
        "--voice",
        p(&silent),
        "-o",
        p(&out),
    ])?;
    let err = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(o.status.code() == Some(1), "{err}");
    anyhow::ensure!(
        err.contains("silent.wav") && err.contains("silent"),
        "{err}"
    );
    anyhow::ensure!(!out.exists(), "no output on failure");
    Ok(())
}

#[test]
fn rust_log_info_shows_each_stage() -> R<()> {
    let s = setup()?;
    let out = s.dir.with_file_name("log.wav");
    let o = command(&speak_args(&s, "Hello there.", &s.ref_wav, "8"))
        .args(["--quiet", "-o", p(&out)])
        .env("RUST_LOG", "info")
        .output()?;
    ok(&o)?;
    let err = String::from_utf8_lossy(&o.stderr);
    for stage in [
        "loading T3",
        "model loaded",
        "analysing the voice clip",
        "T3: speech tokens",
        "S3Gen flow: mel",
        "HiFT: waveform",
    ] {
        anyhow::ensure!(err.contains(stage), "no {stage:?} in:\n{err}");
    }
    Ok(())
}

#[test]
fn an_ordinary_8_s_clip_gives_no_warning() -> R<()> {
    let s = setup()?;
    let clip = chatterbox_dsp::audio::load(&s.ref_wav)?.samples;
    let long = s.ref_wav.with_file_name("eight.wav");
    // 7 x 1.2 s (and 8.0 s, 8.3 s: odd lengths round the mel and the tokens differently).
    for n in [192_000, 199_200, clip.len() * 7] {
        let samples: Vec<f32> = clip.iter().copied().cycle().take(n).collect();
        write_wav(&long, samples, 24_000)?;
        let out = s.ref_wav.with_file_name("eight-out.wav");
        let mut args = speak_args(&s, "Hello.", &long, "4");
        args.extend(["-o", p(&out)]);
        let o = chatterbox(&args)?;
        ok(&o)?;
        let err = String::from_utf8_lossy(&o.stderr);
        anyhow::ensure!(!err.contains("WARN"), "{n} samples:\n{err}");
    }
    Ok(())
}

#[test]
fn speech_cut_at_the_token_cap_is_named_in_a_warning() -> R<()> {
    // the tiny model's random weights practically never draw the stop token: 8 tokens cut
    // both text chunks, whole or streamed, and the warning shows even with --quiet
    let s = setup()?;
    let out = s.dir.with_file_name("cut.wav");
    for extra in [&[][..], &["--stream"], &["--quiet"]] {
        let mut args = speak_args(&s, "Hello there. This is a test!", &s.ref_wav, "8");
        args.extend(["--chunk-chars", "15", "--seed", "7", "-o", p(&out)]);
        args.extend(extra);
        let o = chatterbox(&args)?;
        ok(&o)?;
        let err = String::from_utf8_lossy(&o.stderr);
        for (i, text) in [(1, "Hello there."), (2, "This is a test!")] {
            let line = format!(
                "warning: the speech of text chunk {i}/2 {text:?} was cut at --max-new-tokens 8: \
                 the model did not finish it; raise --max-new-tokens"
            );
            anyhow::ensure!(
                err.matches(&line).count() == 1,
                "{extra:?}: no single {line:?} in:\n{err}"
            );
        }
        read(&out)?;
    }
    Ok(())
}

#[test]
fn speak_stores_t3_weights_as_asked_and_refuses_formats_that_cannot_run() -> R<()> {
    let s = setup()?;
    let out = s.dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let wav = out.join("bf16.wav");
    // the tiny checkpoint is 8 wide: bf16 converts every projection (q8's blocks need 32)
    let mut args = speak_args(&s, "Hello there.", &s.ref_wav, "8");
    args.extend(["--quantize", "bf16", "-o", p(&wav)]);
    let o = chatterbox(&args)?;
    ok(&o)?;
    let stderr = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(stderr.contains("T3 weights in bf16"), "{stderr}");
    read(&wav)?;
    // half-precision T3 cannot take 8-bit blocks: refused before loading, nothing written
    let refused = out.join("refused.wav");
    let mut args = speak_args(&s, "Hello there.", &s.ref_wav, "8");
    args.extend(["--dtype", "bf16", "--quantize", "q8", "-o", p(&refused)]);
    let o = chatterbox(&args)?;
    anyhow::ensure!(!o.status.success(), "--dtype bf16 --quantize q8 ran");
    let stderr = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(stderr.contains("--quantize q8 needs T3 in f32"), "{stderr}");
    anyhow::ensure!(!stderr.contains("Loading"), "{stderr}");
    anyhow::ensure!(!refused.exists(), "an output was written");
    Ok(())
}
