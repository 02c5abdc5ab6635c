//! `chatterbox speak` and `chatterbox vc` end to end on the tiny random checkpoint of the
//! committed pipeline fixtures (parity/fixtures/pipeline/english.*, vc.*), laid out as a
//! hub-layout checkpoint directory.
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

type R<T> = anyhow::Result<T>;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../parity/fixtures")
}

fn tensors(case: &str) -> R<HashMap<String, Tensor>> {
    let path = fixtures()
        .join("pipeline")
        .join(format!("{case}.safetensors"));
    Ok(candle_core::safetensors::load(&path, &Device::Cpu)?)
}

fn samples(t: &HashMap<String, Tensor>, name: &str) -> R<Vec<f32>> {
    let v = t
        .get(name)
        .ok_or_else(|| anyhow::anyhow!("fixture lacks {name}"))?;
    Ok(v.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// The tensors under `prefix` (prefix removed) saved to `path`.
fn write_part(t: &HashMap<String, Tensor>, prefix: &str, path: &Path) -> R<()> {
    let part: HashMap<String, Tensor> = t
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
        .collect();
    anyhow::ensure!(!part.is_empty(), "no tensor under {prefix}");
    Ok(candle_core::safetensors::save(&part, path)?)
}

fn write_wav(path: &Path, samples: Vec<f32>, sample_rate: u32) -> R<()> {
    let audio = chatterbox_dsp::Audio::new(samples, sample_rate);
    Ok(chatterbox_dsp::audio::write_wav(
        path,
        &audio,
        chatterbox_dsp::WavFormat::Float32,
    )?)
}

/// The english case's tiny checkpoint in the hub layout, its reference clip and the vc case's
/// source clip; the turbo case's checkpoint beside it.
struct Setup {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    turbo_dir: PathBuf,
    ref_wav: PathBuf,
    source_wav: PathBuf,
    vc_len: usize,
}

fn setup() -> R<Setup> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("ckpt");
    std::fs::create_dir(&dir)?;
    let t = tensors("english")?;
    write_part(&t, "t3.", &dir.join("t3_cfg.safetensors"))?;
    write_part(&t, "ve.", &dir.join("ve.safetensors"))?;
    write_part(&t, "s3gen.", &dir.join("s3gen.safetensors"))?;
    std::fs::copy(
        fixtures().join("text/assets/en/tokenizer.json"),
        dir.join("tokenizer.json"),
    )?;
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        fixtures().join("pipeline/english.json"),
    )?)?;
    std::fs::write(
        dir.join(chatterbox_pipeline::CONFIG_FILE),
        serde_json::to_string(&fx["config"]["chatterbox"])?,
    )?;
    let ref_wav = tmp.path().join("ref.wav");
    write_wav(&ref_wav, samples(&t, "in.ref_24k")?, 24_000)?;
    let vc = tensors("vc")?;
    let source_wav = tmp.path().join("source.wav");
    write_wav(&source_wav, samples(&vc, "in.source_16k")?, 16_000)?;
    let vc_len = samples(&vc, "out.wav")?.len();

    // Turbo: its T3 and VoiceEncoder, the english S3Gen plus the meanflow-only tensors.
    let turbo_dir = tmp.path().join("turbo");
    std::fs::create_dir(&turbo_dir)?;
    let tt = tensors("turbo")?;
    write_part(&tt, "t3.", &turbo_dir.join("t3_turbo_v1.safetensors"))?;
    write_part(&tt, "ve.", &turbo_dir.join("ve.safetensors"))?;
    let s3: HashMap<String, Tensor> = t
        .iter()
        .chain(tt.iter())
        .filter(|(k, _)| k.starts_with("s3gen."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    write_part(&s3, "s3gen.", &turbo_dir.join("s3gen_meanflow.safetensors"))?;
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(
            fixtures().join("text/assets/turbo").join(f),
            turbo_dir.join(f),
        )?;
    }
    let tfx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        fixtures().join("pipeline/turbo.json"),
    )?)?;
    std::fs::write(
        turbo_dir.join(chatterbox_pipeline::CONFIG_FILE),
        serde_json::to_string(&tfx["config"]["chatterbox"])?,
    )?;
    Ok(Setup {
        _tmp: tmp,
        dir,
        turbo_dir,
        ref_wav,
        source_wav,
        vc_len,
    })
}

fn chatterbox(args: &[&str]) -> R<Output> {
    Ok(Command::new(env!("CARGO_BIN_EXE_chatterbox"))
        .env("CHATTERBOX_NO_WATERMARK", "1")
        .args(args)
        .env_remove("CHATTERBOX_MODEL_DIR")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()?)
}

fn ok(o: &Output) -> R<()> {
    anyhow::ensure!(
        o.status.success(),
        "chatterbox failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(())
}

fn read(path: &Path) -> R<Vec<f32>> {
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

fn p(path: &Path) -> &str {
    path.to_str().unwrap_or_default()
}

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

/// `chatterbox vc SOURCE --target TARGET` on the tiny checkpoint, writing `out`, with `extra`.
fn vc(s: &Setup, source: &Path, target: &Path, out: &Path, extra: &[&str]) -> R<Output> {
    let mut args = vec![
        "vc",
        p(source),
        "--target",
        p(target),
        "--model-dir",
        p(&s.dir),
        "--device",
        "cpu",
        "-o",
        p(out),
    ];
    args.extend_from_slice(extra);
    chatterbox(&args)
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

/// The `NAME.partial-*.wav` files in `dir`.
fn partial_files(dir: &Path, stem: &str) -> R<Vec<PathBuf>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.starts_with(&format!("{stem}.partial-"))) {
            v.push(path);
        }
    }
    Ok(v)
}

/// `(samples, data bytes)`: the header's count and the bytes after the header, which agree
/// in a valid file.
fn wav_counts(path: &Path) -> R<(u32, u64)> {
    let r = hound::WavReader::open(path)?;
    let samples = r.len();
    let bytes = std::fs::metadata(path)?.len();
    let data = u64::from(samples) * u64::from(r.spec().bits_per_sample / 8);
    anyhow::ensure!(bytes >= data, "{bytes} bytes hold less than {data} of data");
    anyhow::ensure!(bytes - data <= 80, "{} bytes beyond the data", bytes - data);
    Ok((samples, bytes))
}

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

#[test]
fn rust_log_info_shows_each_stage() -> R<()> {
    let s = setup()?;
    let out = s.dir.with_file_name("log.wav");
    let o = Command::new(env!("CARGO_BIN_EXE_chatterbox"))
        .env("CHATTERBOX_NO_WATERMARK", "1")
        .args([
            "speak",
            "Hello there.",
            "--model-dir",
            p(&s.dir),
            "--voice",
            p(&s.ref_wav),
            "--device",
            "cpu",
            "--max-new-tokens",
            "8",
            "--quiet",
            "-o",
            p(&out),
        ])
        .env_remove("CHATTERBOX_MODEL_DIR")
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
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
        let o = chatterbox(&[
            "speak",
            "Hello.",
            "--model-dir",
            p(&s.dir),
            "--voice",
            p(&long),
            "--device",
            "cpu",
            "--max-new-tokens",
            "4",
            "-o",
            p(&out),
        ])?;
        ok(&o)?;
        let err = String::from_utf8_lossy(&o.stderr);
        anyhow::ensure!(!err.contains("WARN"), "{n} samples:\n{err}");
    }
    Ok(())
}

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
        let mut args = vec![
            "speak",
            "Hello there.",
            "--model-dir",
            p(&s.dir),
            "--voice",
            p(&s.ref_wav),
            "--device",
            "cpu",
            "--max-new-tokens",
            "40",
            "--seed",
            "3",
        ];
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

/// A random Perth network of the shipped shape, saved as safetensors: stands in for the real
/// weights (not in the repository), so the watermark's plumbing runs, not its detection.
fn random_perth(path: &Path) -> R<()> {
    let varmap = candle_nn::VarMap::new();
    let vb = candle_nn::VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    chatterbox_watermark::PerthNet::new(&chatterbox_watermark::PerthConfig::implicit(), vb)?;
    Ok(varmap.save(path)?)
}

fn chatterbox_with<S: AsRef<std::ffi::OsStr>>(args: &[S], envs: &[(&str, &str)]) -> R<Output> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_chatterbox"));
    cmd.args(args)
        .env_remove("CHATTERBOX_MODEL_DIR")
        .env_remove("CHATTERBOX_NO_WATERMARK")
        .env_remove("CHATTERBOX_WATERMARK_WEIGHTS")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    Ok(cmd.output()?)
}

#[test]
fn speech_is_watermarked_by_default_and_the_watermark_commands_work() -> R<()> {
    let s = setup()?;
    let out = s.dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let perth = out.join("perth.safetensors");
    random_perth(&perth)?;
    let (marked, plain) = (out.join("marked.wav"), out.join("plain.wav"));
    let args = |o: &Path| -> Vec<String> {
        [
            "speak",
            "Hello there.",
            "--voice",
            p(&s.ref_wav),
            "--model-dir",
            p(&s.dir),
            "--device",
            "cpu",
            "--max-new-tokens",
            "16",
            "--wav-format",
            "f32",
            "--seed",
            "3",
            "-o",
            p(o),
        ]
        .map(String::from)
        .to_vec()
    };
    let weights = [("CHATTERBOX_WATERMARK_WEIGHTS", p(&perth))];
    ok(&chatterbox_with(&args(&marked), &weights)?)?;
    let mut no = args(&plain);
    no.push("--no-watermark".into());
    ok(&chatterbox_with(&no, &weights)?)?;
    let (a, b) = (read(&marked)?, read(&plain)?);
    assert_eq!(a.len(), b.len(), "the watermark keeps the length");
    let diff = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert!(
        diff > a.len() / 2,
        "only {diff} of {} samples changed",
        a.len()
    );

    // missing weights: named, with the way out, before any model loads
    let o = chatterbox_with(
        &args(&out.join("never.wav")),
        &[("CHATTERBOX_WATERMARK_WEIGHTS", "/nonexistent/perth.pth.tar")],
    )?;
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/nonexistent/perth.pth.tar") && err.contains("--no-watermark"),
        "{err}"
    );
    assert!(!err.contains("Loading"), "{err}");
    assert!(!out.join("never.wav").exists());

    // with --model-dir nothing is downloaded: the model directory and the cache are named
    let empty_home = tempfile::tempdir()?;
    let home = empty_home.path().to_string_lossy().into_owned();
    let o = chatterbox_with(&args(&out.join("never.wav")), &[("HF_HOME", home.as_str())])?;
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("nothing is downloaded") && err.contains(p(&s.dir)),
        "{err}"
    );
    assert!(err.contains(home.as_str()), "{err}");
    // ... and the weights in the model directory are found there
    std::fs::copy(&perth, s.dir.join("perth_net_250000.pth.tar"))?;
    let beside = out.join("beside.wav");
    ok(&chatterbox_with(
        &args(&beside),
        &[("HF_HOME", home.as_str())],
    )?)?;
    assert_eq!(
        read(&beside)?,
        a,
        "the same weights, the same watermarked audio"
    );
    std::fs::remove_file(s.dir.join("perth_net_250000.pth.tar"))?;

    // `watermark apply` then `detect`: one line per file, status 0 (all marked) or 3
    let applied = out.join("applied.wav");
    let o = chatterbox_with(
        &[
            "watermark",
            "apply",
            p(&plain),
            "-o",
            p(&applied),
            "--wav-format",
            "f32",
        ],
        &weights,
    )?;
    ok(&o)?;
    let c = read(&applied)?;
    assert!(
        c.len() + 240 >= b.len() && c.len() <= b.len(),
        "{} vs {}",
        c.len(),
        b.len()
    );
    let o = chatterbox_with(&["watermark", "detect", p(&applied), p(&plain)], &weights)?;
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(matches!(o.status.code(), Some(0 | 3)), "{o:?}");
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.lines().all(|l| l.contains("watermarked\tscore ")),
        "{text}"
    );
    let o = chatterbox_with(&["watermark", "detect", "/nonexistent.wav"], &weights)?;
    assert_eq!(o.status.code(), Some(1));
    Ok(())
}

#[test]
fn speech_cut_at_the_token_cap_is_named_in_a_warning() -> R<()> {
    // the tiny model's random weights practically never draw the stop token: 8 tokens cut
    // both text chunks, whole or streamed, and the warning shows even with --quiet
    let s = setup()?;
    let out = s.dir.with_file_name("cut.wav");
    for extra in [&[][..], &["--stream"], &["--quiet"]] {
        let mut args = vec![
            "speak",
            "Hello there. This is a test!",
            "--model-dir",
            p(&s.dir),
            "--voice",
            p(&s.ref_wav),
            "--device",
            "cpu",
            "--max-new-tokens",
            "8",
            "--chunk-chars",
            "15",
            "--seed",
            "7",
            "-o",
            p(&out),
        ];
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
    let o = chatterbox(&[
        "speak",
        "Hello there.",
        "--model-dir",
        p(&s.dir),
        "--device",
        "cpu",
        "--quantize",
        "bf16",
        "--voice",
        p(&s.ref_wav),
        "--max-new-tokens",
        "8",
        "-o",
        p(&wav),
    ])?;
    ok(&o)?;
    let stderr = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(stderr.contains("T3 weights in bf16"), "{stderr}");
    read(&wav)?;
    // half-precision T3 cannot take 8-bit blocks: refused before loading, nothing written
    let refused = out.join("refused.wav");
    let o = chatterbox(&[
        "speak",
        "Hello there.",
        "--model-dir",
        p(&s.dir),
        "--device",
        "cpu",
        "--dtype",
        "bf16",
        "--quantize",
        "q8",
        "--voice",
        p(&s.ref_wav),
        "--max-new-tokens",
        "8",
        "-o",
        p(&refused),
    ])?;
    anyhow::ensure!(!o.status.success(), "--dtype bf16 --quantize q8 ran");
    let stderr = String::from_utf8_lossy(&o.stderr);
    anyhow::ensure!(stderr.contains("--quantize q8 needs T3 in f32"), "{stderr}");
    anyhow::ensure!(!stderr.contains("Loading"), "{stderr}");
    anyhow::ensure!(!refused.exists(), "an output was written");
    Ok(())
}
