//! `chatterbox speak --stream -o -` where generation is slower than real time, on the tiny
//! random English checkpoint of the committed pipeline fixtures. The tiny model runs faster
//! than real time, so the runs set `CHATTERBOX_STREAM_SIMULATED_RATE` (the CLI's hidden test
//! variable: the playout planner's clock then reads the audio produced divided by that rate):
//! a slow rate buffers and says so, a fast one does not, and either way the bytes on standard
//! output are those of the unbuffered run. `--prebuffer` fixes the buffer; a file is never
//! held back.
mod common;

use common::{command, english_setup, ok, p, speak_args, R};
use std::path::Path;
use std::process::Output;

const RATE_VAR: &str = "CHATTERBOX_STREAM_SIMULATED_RATE";

/// `speak --stream` of two sentences, one text chunk each (seed 3, at most 40 tokens each)
/// with `extra`, the planner's rate simulated at `rate`.
fn stream(dir: &Path, voice: &Path, rate: &str, extra: &[&str]) -> R<Output> {
    let mut args = speak_args(dir, "Hello there. How are you today?", voice, "40");
    args.extend(["--seed", "3", "--chunk-chars", "20", "--stream"]);
    args.extend_from_slice(extra);
    let o = command(&args).env(RATE_VAR, rate).output()?;
    ok(&o)?;
    Ok(o)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_slow_stream_buffers_and_writes_the_same_bytes() -> R<()> {
    let tmp = tempfile::tempdir()?;
    let (dir, voice) = english_setup(tmp.path())?;
    for format in ["pcm16", "raw"] {
        let out = ["--wav-format", format, "-o", "-"];

        // Four times real time: the first chunk goes out at once.
        let fast = stream(&dir, &voice, "4", &out)?;
        let err = stderr(&fast);
        assert!(!err.contains("buffering"), "{format}: {err}");
        assert!(err.contains("first audio after"), "{format}: {err}");
        assert!(!err.contains("after buffering"), "{format}: {err}");
        assert!(
            fast.stdout.len() > 1000,
            "{format}: {} bytes",
            fast.stdout.len()
        );

        // A quarter of real time: held back, said so, then the same bytes.
        let slow = stream(&dir, &voice, "0.25", &out)?;
        let err = stderr(&slow);
        let buffering = err
            .find("s of audio before playing: generation runs at 0.25x real time")
            .ok_or_else(|| anyhow::anyhow!("{format}: no buffering line: {err}"))?;
        let first = err
            .find("first audio after")
            .ok_or_else(|| anyhow::anyhow!("{format}: no first audio: {err}"))?;
        assert!(buffering < first, "{format}: {err}");
        assert!(
            err[first..].contains("after buffering")
                && err[first..].contains("(generation runs at 0.25x real time)"),
            "{format}: {err}"
        );
        // the whole first sentence came before the first audio
        let done = err.find("chunk 1/2 done").unwrap_or(usize::MAX);
        assert!(done < first, "{format}: {err}");
        assert!(slow.stdout == fast.stdout, "{format}: the bytes differ");

        // --prebuffer 0: no buffer even so; a long --prebuffer: the whole stream.
        let none = stream(
            &dir,
            &voice,
            "0.25",
            &[&["--prebuffer", "0"][..], &out].concat(),
        )?;
        assert!(!stderr(&none).contains("buffering"), "{}", stderr(&none));
        assert!(
            none.stdout == fast.stdout,
            "{format}: --prebuffer 0 differs"
        );
        let all = stream(
            &dir,
            &voice,
            "4",
            &[&["--prebuffer", "600"][..], &out].concat(),
        )?;
        let err = stderr(&all);
        assert!(
            err.contains("buffering 600.0 s of audio before playing (--prebuffer 600)"),
            "{err}"
        );
        let first = err.find("first audio after").unwrap_or(0);
        let last_done = err.find("chunk 2/2 done").unwrap_or(usize::MAX);
        assert!(last_done < first, "played before the end: {err}");
        assert!(
            all.stdout == fast.stdout,
            "{format}: --prebuffer 600 differs"
        );
    }
    Ok(())
}

#[test]
fn a_file_is_never_held_back() -> R<()> {
    let tmp = tempfile::tempdir()?;
    let (dir, voice) = english_setup(tmp.path())?;
    let wav = tmp.path().join("out.wav");
    let o = stream(&dir, &voice, "0.25", &["-o", p(&wav)])?;
    let err = stderr(&o);
    assert!(!err.contains("buffering"), "{err}");
    // the first audio was written before the first sentence was done
    let first = err.find("first audio after").unwrap_or(usize::MAX);
    let done = err.find("chunk 1/2 done").unwrap_or(0);
    assert!(first < done, "{err}");
    assert!(std::fs::metadata(&wav)?.len() > 1000);
    Ok(())
}

#[test]
fn prebuffer_needs_stream_and_a_number_of_seconds() -> R<()> {
    let tmp = tempfile::tempdir()?;
    for bad in [
        &["speak", "Hi.", "--prebuffer", "2", "-o", "-"][..],
        &["speak", "Hi.", "--stream", "--prebuffer=-1", "-o", "-"],
        &["speak", "Hi.", "--stream", "--prebuffer", "soon", "-o", "-"],
    ] {
        let o = command(bad).current_dir(tmp.path()).output()?;
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("--prebuffer"), "{bad:?}: {err}");
    }
    Ok(())
}
