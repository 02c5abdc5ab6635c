//! `chatterbox speak --speed X` on the tiny random English checkpoint of the committed pipeline
//! fixtures: the file is the speed-1 file time-stretched (exactly `round(len / speed)` samples,
//! the very samples of `chatterbox_dsp::time_stretch`), with and without `--stream`, the
//! captions' times divided by the speed; a speed outside 0.25..=4 is refused before loading.
use candle_core::{DType, Device, Tensor};
use chatterbox_dsp::stretch::{stretched_len, time_stretch};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

type R<T> = anyhow::Result<T>;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../parity/fixtures")
}

/// The english case's tiny checkpoint in the hub layout, and its reference clip.
fn setup(tmp: &Path) -> R<(PathBuf, PathBuf)> {
    let dir = tmp.join("ckpt");
    std::fs::create_dir(&dir)?;
    let t: HashMap<String, Tensor> = candle_core::safetensors::load(
        fixtures().join("pipeline/english.safetensors"),
        &Device::Cpu,
    )?;
    for (prefix, file) in [
        ("t3.", "t3_cfg.safetensors"),
        ("ve.", "ve.safetensors"),
        ("s3gen.", "s3gen.safetensors"),
    ] {
        let part: HashMap<String, Tensor> = t
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
            .collect();
        candle_core::safetensors::save(&part, dir.join(file))?;
    }
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
    let clip = t
        .get("in.ref_24k")
        .ok_or_else(|| anyhow::anyhow!("no reference clip"))?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let ref_wav = tmp.join("ref.wav");
    chatterbox_dsp::audio::write_wav(
        &ref_wav,
        &chatterbox_dsp::Audio::new(clip, 24_000),
        chatterbox_dsp::WavFormat::Float32,
    )?;
    Ok((dir, ref_wav))
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

fn p(path: &Path) -> &str {
    path.to_str().unwrap_or_default()
}

/// Speaks the test text into `wav` (32-bit float, so the samples are exact) and its captions
/// into `json`, with `extra` options.
fn speak(dir: &Path, ref_wav: &Path, wav: &Path, json: &Path, extra: &[&str]) -> R<Vec<f32>> {
    let mut args = vec![
        "speak",
        "Hello there. [pause 300ms] How are you?",
        "--model-dir",
        p(dir),
        "--device",
        "cpu",
        "--voice",
        p(ref_wav),
        "--max-new-tokens",
        "12",
        "--seed",
        "3",
        "--quiet",
        "--wav-format",
        "f32",
        "-o",
        p(wav),
        "--captions",
        p(json),
    ];
    args.extend_from_slice(extra);
    let o = chatterbox(&args)?;
    anyhow::ensure!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Ok(chatterbox_dsp::audio::load(wav)?.samples)
}

/// The sentences' `(start, end)` in seconds from a JSON captions file.
fn spans(json: &Path) -> R<Vec<(f64, f64)>> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json)?)?;
    Ok(v["sentences"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| {
            (
                s["start"].as_f64().unwrap_or(-1.0),
                s["end"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect())
}

#[test]
fn speed_stretches_the_file_and_its_captions() -> R<()> {
    let tmp = tempfile::tempdir()?;
    let (dir, ref_wav) = setup(tmp.path())?;
    for stream in [false, true] {
        let tag = if stream { "stream" } else { "whole" };
        let extra: &[&str] = if stream { &["--stream"] } else { &[] };
        let at = |name: &str| tmp.path().join(format!("{tag}-{name}"));
        let one = speak(&dir, &ref_wav, &at("1.wav"), &at("1.json"), extra)?;
        let one_spans = spans(&at("1.json"))?;
        assert_eq!(one_spans.len(), 2, "{tag}");
        for (speed, arg) in [(2.0f32, "2"), (0.5, "0.5")] {
            let mut args = extra.to_vec();
            args.extend(["--speed", arg]);
            let (wav, json) = (at(&format!("{arg}.wav")), at(&format!("{arg}.json")));
            let fast = speak(&dir, &ref_wav, &wav, &json, &args)?;
            // length ~ 1/speed: exactly round(len / speed), and the samples of the stretch
            assert_eq!(fast.len(), stretched_len(one.len(), speed), "{tag} {arg}");
            assert_eq!(fast, time_stretch(&one, 24_000, speed)?, "{tag} {arg}");
            // every caption time divided by the speed (to the file's millisecond rounding)
            let got = spans(&json)?;
            assert_eq!(got.len(), one_spans.len());
            for ((s, e), (s1, e1)) in got.iter().zip(&one_spans) {
                let speed = f64::from(speed);
                assert!((s - s1 / speed).abs() < 0.0015, "{tag} {arg}: {s} vs {s1}");
                assert!((e - e1 / speed).abs() < 0.0015, "{tag} {arg}: {e} vs {e1}");
            }
            let secs = fast.len() as f64 / 24_000.0;
            assert!((got[1].1 - secs).abs() < 0.0006, "{tag} {arg}");
        }
    }
    Ok(())
}

#[test]
fn a_speed_outside_the_range_is_refused_before_loading() -> R<()> {
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("out.wav");
    for speed in ["0.2", "4.5", "NaN", "-1"] {
        let o = chatterbox(&[
            "speak",
            "Hi.",
            "--model-dir",
            p(&tmp.path().join("missing")),
            "-o",
            p(&out),
            &format!("--speed={speed}"),
        ])?;
        assert!(!o.status.success(), "{speed}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("speed") && err.contains("0.25 to 4"),
            "{speed}: {err}"
        );
        assert!(!out.exists());
    }
    Ok(())
}
