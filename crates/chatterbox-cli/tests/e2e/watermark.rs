//! The Perth watermark: on by default, and the `watermark` commands.
use crate::support::{ok, p, read, setup, speak_args, R};
use candle_core::{DType, Device};
use std::path::Path;
use std::process::{Command, Output};

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
        let mut args = speak_args(&s, "Hello there.", &s.ref_wav, "16");
        args.extend(["--wav-format", "f32", "--seed", "3", "-o", p(o)]);
        args.into_iter().map(String::from).collect()
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
