//! The `chatterbox` binary as a user runs it: help, and the errors a user can make, each a
//! clear message and a non-zero exit before any expensive work.
mod common;

use common::p as s;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary with `args` (tests/common), its failure to start a failed test.
fn chatterbox(args: &[&str]) -> Output {
    match common::chatterbox(args) {
        Ok(o) => o,
        Err(e) => unreachable!("cannot run the chatterbox binary: {e}"),
    }
}

/// `chatterbox speak` with `args`, the checkpoint folder `model_dir` and the output `out`.
fn speak_with(model_dir: &str, out: &str, args: &[&str]) -> Output {
    chatterbox(&[&["speak"], args, &["--model-dir", model_dir, "-o", out]].concat())
}

/// `chatterbox vc` with `args`, the checkpoint folder `model_dir` and the output `out`.
fn vc_with(model_dir: &str, out: &str, args: &[&str]) -> Output {
    chatterbox(&[&["vc"], args, &["--model-dir", model_dir, "-o", out]].concat())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Fails with a message on stderr that contains every one of `needles`.
fn assert_fails_with(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert!(
        !o.status.success(),
        "expected a failure, got success; stderr:\n{err}"
    );
    assert_eq!(o.status.code(), Some(1), "exit code; stderr:\n{err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}:\n{err}");
    }
}

/// A one-second 440 Hz tone at 16 kHz, as a WAV file.
fn write_tone(path: &Path) {
    let samples: Vec<f32> = (0..16_000)
        .map(|i| 0.3 * (2.0 * std::f32::consts::PI * 440.0 * i as f32 / 16_000.0).sin())
        .collect();
    let audio = chatterbox_dsp::Audio::new(samples, 16_000);
    if let Err(e) = chatterbox_dsp::audio::write_wav(path, &audio, chatterbox_dsp::WavFormat::Pcm16)
    {
        unreachable!("cannot write {}: {e}", path.display());
    }
}

fn tempdir() -> tempfile::TempDir {
    match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => unreachable!("tempdir: {e}"),
    }
}

/// A temporary folder holding the tone of [`write_tone`] as `name`, and the tone's path.
fn tempdir_with_tone(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempdir();
    let path = dir.path().join(name);
    write_tone(&path);
    (dir, path)
}

#[test]
fn help_explains_the_commands_with_examples() {
    let speak_options = [
        "--voice",
        "--voice-file",
        "--save-voice",
        "--language",
        "--exaggeration",
        "--cfg-weight",
        "--temperature",
        "--top-p",
        "--min-p",
        "--top-k",
        "--repetition-penalty",
        "--max-new-tokens",
        "--seed",
        "--device",
        "--dtype",
        "--quiet",
        "--stream",
        "raw",
        "Examples:",
    ];
    let top = [
        "speak",
        "vc",
        "Examples:",
        "--model-dir",
        "chatterbox speak \"",
    ];
    for (args, needles) in [
        (&["--help"][..], &top[..]),
        (&["speak", "--help"], &speak_options),
        (&["vc", "--help"], &["--target"]),
    ] {
        let o = chatterbox(args);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        for needle in needles {
            let command = args.join(" ");
            assert!(text.contains(needle), "{command} lacks {needle:?}:\n{text}");
        }
    }
}

#[test]
fn a_model_directory_missing_a_file_names_the_file() {
    let dir = tempdir();
    let out = dir.path().join("out.wav");
    let o = speak_with(s(dir.path()), s(&out), &["Hello.", "--device", "cpu"]);
    assert_fails_with(&o, &["missing", ".safetensors"]);
    assert!(!out.exists(), "no output on failure");

    let source = dir.path().join("source.wav");
    write_tone(&source);
    let o = vc_with(s(dir.path()), s(&out), &[s(&source), "--device", "cpu"]);
    assert_fails_with(&o, &["s3gen.safetensors"]);
}

#[test]
fn a_missing_model_directory_is_named() {
    let dir = tempdir();
    let missing = dir.path().join("no-such-checkpoint");
    let o = speak_with(s(&missing), s(&dir.path().join("out.wav")), &["Hello."]);
    assert_fails_with(&o, &["no-such-checkpoint", "no such directory"]);
}

#[test]
fn an_unknown_language_lists_the_supported_ones() {
    let dir = tempdir();
    let o = speak_with(
        s(dir.path()),
        s(&dir.path().join("out.wav")),
        &["Hello.", "--model", "multilingual", "--language", "xx"],
    );
    assert_fails_with(&o, &["xx", "fr", "zh"]);
    // The language is checked before the (empty) model directory is read.
    assert!(!stderr(&o).contains("missing"), "{}", stderr(&o));
}

#[test]
fn an_unwritable_output_path_fails_before_any_model_work() {
    let dir = tempdir();
    let out = dir.path().join("no/such/folder/out.wav");
    let o = speak_with(
        s(&dir.path().join("not-a-checkpoint")),
        s(&out),
        &["Hello."],
    );
    assert_fails_with(&o, &["out.wav", "does not exist"]);
    assert!(!stderr(&o).contains("not-a-checkpoint"), "{}", stderr(&o));

    // A directory as the output file.
    let o = chatterbox(&["speak", "Hello.", "-o", s(dir.path())]);
    assert_fails_with(&o, &["is a directory"]);
}

#[test]
fn missing_inputs_are_named() {
    let dir = tempdir();
    let out = dir.path().join("out.wav");
    let o = speak_with(
        s(dir.path()),
        s(&out),
        &["Hello.", "--voice", s(&dir.path().join("nobody.wav"))],
    );
    assert_fails_with(&o, &["nobody.wav", "does not exist"]);

    let o = chatterbox(&["speak", "--model-dir", s(dir.path()), "-o", s(&out)]);
    assert_fails_with(&o, &["empty"]);

    let o = chatterbox(&["vc", s(&dir.path().join("src.wav")), "-o", s(&out)]);
    assert_fails_with(&o, &["src.wav", "does not exist"]);
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_in_a_cpu_build_names_the_cargo_feature() {
    let dir = tempdir();
    let o = chatterbox(&[
        "speak",
        "Hello.",
        "--device",
        "cuda",
        "-o",
        s(&dir.path().join("out.wav")),
    ]);
    assert_fails_with(&o, &["CUDA", "--features cuda"]);
}

#[test]
fn bad_option_values_are_usage_errors() {
    let o = chatterbox(&["speak", "Hi.", "--model", "huge"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("english"), "{}", stderr(&o));
    let o = chatterbox(&["speak", "Hi.", "--device", "tpu"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn inconsistent_voice_and_config_options_are_explained() {
    let dir = tempdir();
    let out = dir.path().join("out.wav");
    let voice = dir.path().join("v.safetensors");
    let o = chatterbox(&["speak", "Hello.", "--save-voice", s(&voice), "-o", s(&out)]);
    assert_fails_with(&o, &["--save-voice needs --voice"]);

    let cfg = dir.path().join("config.json");
    if let Err(e) = std::fs::write(&cfg, "{\"t3\": 1}") {
        unreachable!("cannot write {}: {e}", cfg.display());
    }
    let o = speak_with(s(dir.path()), s(&out), &["Hello.", "--config", s(&cfg)]);
    assert_fails_with(&o, &["config.json", "ChatterboxConfig"]);
}

#[test]
fn a_corrupt_voice_clip_is_named_before_the_model_loads() {
    let dir = tempdir();
    let clip = dir.path().join("broken.wav");
    if let Err(e) = std::fs::write(&clip, b"RIFF\x10\x00\x00\x00WAVEnot really audio") {
        unreachable!("cannot write {}: {e}", clip.display());
    }
    let o = speak_with(
        s(&dir.path().join("not-a-checkpoint")),
        s(&dir.path().join("out.wav")),
        &["Hello.", "--voice", s(&clip)],
    );
    assert_fails_with(&o, &["broken.wav", "cannot read the voice clip"]);
    assert!(!stderr(&o).contains("not-a-checkpoint"), "{}", stderr(&o));
}

#[test]
fn the_output_may_not_be_one_of_the_inputs() {
    let (dir, tone) = tempdir_with_tone("tone.wav");
    let before = std::fs::read(&tone).unwrap_or_default();
    let text = dir.path().join("story.txt");
    std::fs::write(&text, "Once upon a time.").unwrap_or_default();
    let ckpt = s(&dir.path().join("not-a-checkpoint")).to_string();

    // The voice clip, spelled differently.
    let spelled = dir.path().join(".").join("tone.wav");
    let o = speak_with(&ckpt, s(&spelled), &["Hi.", "--voice", s(&tone)]);
    assert_fails_with(&o, &["is the --voice file", "tone.wav"]);
    // The text file.
    let o = speak_with(&ckpt, s(&text), &["--file", s(&text)]);
    assert_fails_with(&o, &["is the --file file"]);
    assert_eq!(
        std::fs::read_to_string(&text).unwrap_or_default(),
        "Once upon a time."
    );
    // --save-voice onto the voice clip, and onto -o.
    let o = chatterbox(&[
        "speak",
        "Hi.",
        "--voice",
        s(&tone),
        "--save-voice",
        s(&tone),
        "--model-dir",
        &ckpt,
    ]);
    assert_fails_with(&o, &["--save-voice", "is the --voice file"]);
    let out = dir.path().join("out.wav");
    let o = speak_with(
        &ckpt,
        s(&out),
        &["Hi.", "--voice", s(&tone), "--save-voice", s(&out)],
    );
    assert_fails_with(&o, &["--save-voice and -o are the same file"]);
    // vc: the source and the target.
    for (flag, needle) in [
        ("source", "is the source file"),
        ("target", "is the --target file"),
    ] {
        let (source, target) = if flag == "source" {
            (tone.clone(), dir.path().join("other.wav"))
        } else {
            (dir.path().join("other.wav"), tone.clone())
        };
        write_tone(&dir.path().join("other.wav"));
        let o = vc_with(&ckpt, s(&tone), &[s(&source), "--target", s(&target)]);
        assert_fails_with(&o, &[needle]);
    }
    assert_eq!(
        std::fs::read(&tone).unwrap_or_default(),
        before,
        "the clip was changed"
    );
    // Nothing was started: no output, no temporary file.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    assert_eq!(names, vec!["other.wav", "story.txt", "tone.wav"]);
}

#[cfg(unix)]
#[test]
fn binary_audio_is_not_written_onto_a_terminal() {
    let pty = match nix::pty::openpty(None, None) {
        Ok(p) => p,
        Err(e) => unreachable!("openpty: {e}"),
    };
    let o = Command::new(env!("CARGO_BIN_EXE_chatterbox"))
        .env("CHATTERBOX_NO_WATERMARK", "1")
        .args(["speak", "Hi.", "--model-dir", "/nonexistent", "-o", "-"])
        .env_remove("CHATTERBOX_MODEL_DIR")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(pty.slave))
        .stderr(std::process::Stdio::piped())
        .output();
    let o = match o {
        Ok(o) => o,
        Err(e) => unreachable!("cannot run the chatterbox binary: {e}"),
    };
    assert_fails_with(&o, &["standard output is a terminal", "-o FILE"]);
    assert!(
        !stderr(&o).contains("nonexistent"),
        "checked before the model"
    );
    drop(pty.master);
}

#[test]
fn values_the_model_cannot_take_are_refused_before_loading() {
    let dir = tempdir();
    let ckpt = s(dir.path()).to_string();
    let out = dir.path().join("out.wav");
    let speak =
        |extra: &[&str]| speak_with(&ckpt, s(&out), &[&["--device", "cpu"], extra].concat());
    // The empty model directory would fail the load: each of these must fail first, naming
    // the option or the input.
    let o = speak(&["Hello.", "--max-new-tokens", "1000000000"]);
    assert_fails_with(&o, &["--max-new-tokens 1000000000", "at most 4100"]);
    let o = speak(&["Hello.", "--exaggeration", "7"]);
    assert_fails_with(&o, &["--exaggeration 7", "0 (flat) to 2"]);
    let o = speak(&["?!... 🎉"]);
    assert_fails_with(&o, &["no letters or digits"]);
    let long = "word ".repeat(1000);
    let o = speak(&[long.as_str(), "--chunk-chars", "0"]);
    assert_fails_with(&o, &["--chunk-chars 0", "5000 characters"]);
    // Then the checkpoint's files, before anything is loaded.
    let o = speak(&["Hello."]);
    assert_fails_with(&o, &["ve.safetensors is missing"]);
    for f in [
        "ve.safetensors",
        "t3_cfg.safetensors",
        "s3gen.safetensors",
        "tokenizer.json",
    ] {
        std::fs::write(dir.path().join(f), b"not really").unwrap_or_default();
    }
    let o = speak(&["Hello."]);
    assert_fails_with(&o, &["no built-in voice (conds.pt)", "--voice AUDIO"]);
    // A clip of dither only.
    let quiet = dir.path().join("quiet.wav");
    let noise: Vec<f32> = (0..48_000)
        .map(|i| 3e-5 * ((i * 7919) % 13) as f32 / 13.0)
        .collect();
    let audio = chatterbox_dsp::Audio::new(noise, 16_000);
    chatterbox_dsp::audio::write_wav(&quiet, &audio, chatterbox_dsp::WavFormat::Float32)
        .unwrap_or_default();
    let o = speak(&["Hello.", "--voice", s(&quiet)]);
    assert_fails_with(&o, &["quiet.wav", "silent or nearly so"]);
    assert!(!out.exists());
}

#[test]
fn voice_clip_formats_phone_memos_and_opus_work() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../chatterbox-dsp/tests/data");
    let dir = tempdir();
    let out = dir.path().join("out.wav");
    // An m4a (AAC) clip decodes: the refusal is about its length (a 0.3 s test tone), not its
    // format.
    let m4a = data.join("aac_mono_24k.m4a");
    let o = speak_with(s(dir.path()), s(&out), &["Hi.", "--voice", s(&m4a)]);
    assert_fails_with(&o, &["aac_mono_24k.m4a is 0.4 s long"]);
    // Ogg Opus (what `chatterbox serve` writes) decodes too: the refusal is about its length
    // (a 0.3 s test tone), with no stray decoder log line.
    let opus = data.join("opus_mono_48k.ogg");
    let o = speak_with(s(dir.path()), s(&out), &["Hi.", "--voice", s(&opus)]);
    assert_fails_with(&o, &["opus_mono_48k.ogg is 0.3 s long"]);
    assert!(!stderr(&o).contains("ERROR"), "{}", stderr(&o));
}

#[test]
fn bad_vc_windows_are_refused_before_any_model_work() {
    let (dir, source) = tempdir_with_tone("source.wav");
    let out = dir.path().join("out.wav");
    let vc = |extra: &[&str]| {
        vc_with(
            s(dir.path()),
            s(&out),
            &[&[s(&source), "--device", "cpu"], extra].concat(),
        )
    };
    // Values the library refuses: exit 1 (the option named, as the library's rule says),
    // before the (empty) checkpoint directory is read.
    for (extra, needle) in [
        (
            &["--overlap-ms", "100"][..],
            "--overlap-ms 100 with --window-ms 20000",
        ),
        (
            &["--window-ms", "1000", "--overlap-ms", "600"][..],
            "--overlap-ms 600 with --window-ms 1000",
        ),
        (
            &["--window-ms", "100"][..],
            "at least 160 ms and at most half the window",
        ),
    ] {
        let o = vc(extra);
        assert_fails_with(&o, &[needle]);
        assert!(!stderr(&o).contains("missing"), "{}", stderr(&o));
    }
    // Not a number of milliseconds: a usage error (exit 2).
    for bad in ["--window-ms=-5", "--window-ms=1.5s", "--window-ms=x"] {
        let o = vc(&[bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--window-ms"), "{}", stderr(&o));
    }
    // --window-ms 0 (one pass) with any overlap passes on to the checkpoint check.
    let o = vc(&["--window-ms", "0", "--overlap-ms", "0"]);
    assert_fails_with(&o, &["s3gen.safetensors is missing"]);
    assert!(!out.exists());
    let o = chatterbox(&["vc", "--help"]);
    assert!(stdout(&o).contains("--window-ms") && stdout(&o).contains("--overlap-ms"));
}
