//! `chatterbox speak --speed X` on the tiny random English checkpoint of the committed pipeline
//! fixtures: the file is the speed-1 file time-stretched (exactly `round(len / speed)` samples,
//! the very samples of `chatterbox_dsp::time_stretch`), with and without `--stream`, the
//! captions' times divided by the speed; a speed outside 0.25..=4 is refused before loading.
mod common;

use chatterbox_dsp::stretch::{stretched_len, time_stretch};
use common::{english_setup, ok, p, refused, speak_seeded, speak_without_model, R};
use std::path::Path;

/// Speaks the test text into `wav` (32-bit float, so the samples are exact) and its captions
/// into `json`, with `extra` options.
fn speak(dir: &Path, ref_wav: &Path, wav: &Path, json: &Path, extra: &[&str]) -> R<Vec<f32>> {
    let captions = ["--wav-format", "f32", "--captions", p(json)];
    let text = "Hello there. [pause 300ms] How are you?";
    ok(&speak_seeded(
        dir,
        ref_wav,
        text,
        wav,
        &[&captions[..], extra].concat(),
    )?)?;
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
    let (dir, ref_wav) = english_setup(tmp.path())?;
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
        let o = speak_without_model(tmp.path(), &out, &[&format!("--speed={speed}")])?;
        let err = refused(&o, &out);
        assert!(
            err.contains("speed") && err.contains("0.25 to 4"),
            "{speed}: {err}"
        );
    }
    Ok(())
}
