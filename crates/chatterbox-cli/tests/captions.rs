//! `chatterbox speak --captions FILE` on the tiny random English checkpoint of the committed
//! pipeline fixtures: SRT, WebVTT and JSON by extension, with and without `--stream`, the
//! timings inside the audio and in order, every word once (words timed from T3's alignment
//! heads); a text's `[pause 500ms]` as half
//! a second of exact silence in the file; `--lexicon` respelling words.
mod common;

use common::{chatterbox, english_setup, ok, p, refused, speak_seeded, speak_without_model, R};
use std::path::Path;
use std::process::Output;

/// Seconds of `HH:MM:SS,mmm` (or `.mmm`).
fn clock(s: &str) -> R<f64> {
    let parts: Vec<&str> = s.split([':', ',', '.']).collect();
    anyhow::ensure!(parts.len() == 4, "clock {s}");
    let n: Vec<f64> = parts
        .iter()
        .map(|p| p.parse::<f64>())
        .collect::<Result<_, _>>()?;
    Ok(n[0] * 3600.0 + n[1] * 60.0 + n[2] + n[3] / 1000.0)
}

/// The `start --> end` lines of an SRT or WebVTT file, with the cue text after each.
fn cues(text: &str) -> R<Vec<(f64, f64, String)>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some((a, b)) = l.split_once(" --> ") {
            let cue = lines.get(i + 1).copied().unwrap_or_default().to_string();
            out.push((clock(a)?, clock(b)?, cue));
        }
    }
    Ok(out)
}

#[test]
fn captions_in_three_formats_with_and_without_stream() -> R<()> {
    let tmp = tempfile::tempdir()?;
    let (dir, ref_wav) = english_setup(tmp.path())?;
    let text = "Hello there. [pause 500ms] How are you?";
    let want_words = ["Hello", "there.", "How", "are", "you?"];
    for stream in [false, true] {
        let tag = if stream { "stream" } else { "whole" };
        let wav = tmp.path().join(format!("{tag}.wav"));
        let json = tmp.path().join(format!("{tag}.json"));
        let mut extra = vec!["--wav-format", "f32", "--captions", p(&json)];
        if stream {
            extra.push("--stream");
        }
        ok(&speak_seeded(&dir, &ref_wav, text, &wav, &extra)?)?;
        let audio = chatterbox_dsp::audio::load(&wav)?.samples;
        let secs = audio.len() as f64 / 24_000.0;
        // the pause: 12000 exact zeros at least (S3Gen's 20 ms of leading silence joins it)
        let mut run = 0usize;
        let mut longest = 0;
        for &v in &audio {
            run = if v == 0.0 { run + 1 } else { 0 };
            longest = longest.max(run);
        }
        assert!(
            (12_000..12_000 + 1_000).contains(&longest),
            "{tag}: {longest}"
        );

        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
        assert_eq!(v["sample_rate"], 24_000);
        let sentences = v["sentences"].as_array().cloned().unwrap_or_default();
        assert_eq!(sentences.len(), 2, "{tag}: {v}");
        assert_eq!(sentences[0]["text"], "Hello there.");
        assert_eq!(sentences[1]["text"], "How are you?");
        let mut words = Vec::new();
        let mut measured = 0;
        let mut last = 0.0;
        for s in &sentences {
            let (start, end) = (
                s["start"].as_f64().unwrap_or(-1.0),
                s["end"].as_f64().unwrap_or(-1.0),
            );
            assert!(
                start >= last && end > start && end <= secs + 0.0005,
                "{tag}: {s}"
            );
            let mut at = start;
            for w in s["words"].as_array().cloned().unwrap_or_default() {
                // --captions asks for T3's alignment heads (the English model has them)
                let estimated = w["estimated"].as_bool();
                assert!(estimated.is_some(), "{w}");
                measured += usize::from(estimated == Some(false));
                let (ws, we) = (
                    w["start"].as_f64().unwrap_or(-1.0),
                    w["end"].as_f64().unwrap_or(-1.0),
                );
                assert!(
                    (ws - at).abs() < 0.0015 && we >= ws && we <= end + 0.0005,
                    "{w}"
                );
                at = we;
                words.push(w["word"].as_str().unwrap_or_default().to_string());
            }
            last = end;
        }
        assert_eq!(words, want_words);
        assert!(measured > 0, "{tag}: no word timed by the alignment: {v}");
        // the last sentence ends with the audio; the pause lies between the two
        assert!((last - secs).abs() < 0.0006, "{tag}: {last} vs {secs}");
        let gap = sentences[1]["start"].as_f64().unwrap_or(0.0)
            - sentences[0]["end"].as_f64().unwrap_or(0.0);
        assert!((gap - 0.55).abs() < 0.0015, "{tag}: gap {gap}");
    }

    // SRT and WebVTT: a cue per sentence, the same times
    let (srt, vtt, wav) = (
        tmp.path().join("a.srt"),
        tmp.path().join("a.VTT"),
        tmp.path().join("a.wav"),
    );
    for captions in [&srt, &vtt] {
        ok(&speak_seeded(
            &dir,
            &ref_wav,
            text,
            &wav,
            &["--captions", p(captions)],
        )?)?;
    }
    let srt_text = std::fs::read_to_string(&srt)?;
    let vtt_text = std::fs::read_to_string(&vtt)?;
    assert!(srt_text.starts_with("1\n00:00:00,000 --> "), "{srt_text}");
    assert!(
        vtt_text.starts_with("WEBVTT\n\n00:00:00.000 --> "),
        "{vtt_text}"
    );
    let (a, b) = (cues(&srt_text)?, cues(&vtt_text)?);
    assert_eq!(a, b);
    let texts: Vec<&str> = a.iter().map(|c| c.2.as_str()).collect();
    assert_eq!(texts, ["Hello there.", "How are you?"]);
    assert!(a[0].1 < a[1].0);
    Ok(())
}

#[test]
fn a_captions_file_of_unknown_format_is_refused_before_loading() -> R<()> {
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("out.wav");
    let subs = tmp.path().join("subs.txt");
    let o = speak_without_model(tmp.path(), &out, &["--captions", p(&subs)])?;
    let err = refused(&o, &out);
    assert!(err.contains(".srt, .vtt or .json"), "{err}");
    Ok(())
}

#[test]
fn a_lexicon_respells_words_and_a_bad_one_is_refused_before_loading() -> R<()> {
    let tmp = tempfile::tempdir()?;
    let (dir, ref_wav) = english_setup(tmp.path())?;
    let lexicon = tmp.path().join("lexicon.txt");
    std::fs::write(&lexicon, "# test\ngif = jif\n")?;
    let speak = |text: &str, out: &Path, extra: &[&str]| -> R<Output> {
        let f32 = ["--wav-format", "f32"];
        speak_seeded(&dir, &ref_wav, text, out, &[&f32[..], extra].concat())
    };
    let (a, b, json) = (
        tmp.path().join("a.wav"),
        tmp.path().join("b.wav"),
        tmp.path().join("a.json"),
    );
    let o = speak(
        "A gif.",
        &a,
        &["--lexicon", p(&lexicon), "--captions", p(&json)],
    )?;
    ok(&o)?;
    let o = speak("A jif.", &b, &[])?;
    ok(&o)?;
    assert_eq!(
        chatterbox_dsp::audio::load(&a)?.samples,
        chatterbox_dsp::audio::load(&b)?.samples
    );
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    assert_eq!(v["sentences"][0]["text"], "A jif.");

    std::fs::write(&lexicon, "gif = jif\nnot an entry\n")?;
    let c = tmp.path().join("c.wav");
    let o = speak("A gif.", &c, &["--lexicon", p(&lexicon)])?;
    let err = refused(&o, &c);
    assert!(err.contains("--lexicon") && err.contains("line 2"), "{err}");
    Ok(())
}

#[test]
fn serve_refuses_a_bad_lexicon_before_loading() -> R<()> {
    let tmp = tempfile::tempdir()?;
    let (dir, _) = english_setup(tmp.path())?;
    let lexicon = tmp.path().join("names.txt");
    std::fs::write(&lexicon, "gif = jif\ngif = gift\n")?;
    let arg = format!("names={}", p(&lexicon));
    let o = chatterbox(&[
        "serve",
        "--model-dir",
        p(&dir),
        "--port",
        "0",
        "--lexicon",
        &arg,
    ])?;
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--lexicon names=") && err.contains("line 2") && err.contains("twice"),
        "{err}"
    );
    Ok(())
}
