//! `chatterbox quantize`: the folder it writes loads with `speak --model-dir` and speaks the
//! audio of `--quantize` on the full-precision folder, exactly; missing, damaged and
//! already-quantized inputs, a taken output and a format nothing fits are clear errors that
//! leave no folder, half-written or whole.
mod common;

use common::{chatterbox, english_setup, p, read, speak_args, R};
use std::path::{Path, PathBuf};
use std::process::Output;

/// The pipeline's tiny English case as a checkpoint folder `root/ckpt` (8 wide: only bf16
/// fits its projections), and its reference clip `root/ref.wav`.
struct Setup {
    root: tempfile::TempDir,
    dir: PathBuf,
    ref_wav: PathBuf,
}

fn setup() -> R<Setup> {
    let root = tempfile::tempdir()?;
    let (dir, ref_wav) = english_setup(root.path())?;
    Ok(Setup { root, dir, ref_wav })
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn quantize(dir: &Path, format: &str, out: &Path) -> R<Output> {
    chatterbox(&[
        "quantize",
        "--model-dir",
        p(dir),
        "--format",
        format,
        "-o",
        p(out),
    ])
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> R<Vec<String>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        v.push(e?.file_name().to_string_lossy().into_owned());
    }
    v.sort();
    Ok(v)
}

/// `speak` on the tiny checkpoint `dir` with the reference clip, 8 tokens, seed 3.
fn speak(s: &Setup, dir: &Path, out: &Path, extra: &[&str]) -> R<Output> {
    let mut args = speak_args(dir, "Hello there.", &s.ref_wav, "8");
    args.extend(["--seed", "3", "--wav-format", "f32", "-o", p(out)]);
    args.extend_from_slice(extra);
    chatterbox(&args)
}

#[test]
fn a_quantized_folder_speaks_as_quantize_at_load_does() -> R<()> {
    let s = setup()?;
    let q = s.root.path().join("bf16");
    let o = quantize(&s.dir, "bf16", &q)?;
    anyhow::ensure!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    anyhow::ensure!(
        err.contains("t3_cfg.gguf") && err.contains("8 of 8 projections in bf16"),
        "{err}"
    );
    // T3 as its GGUF file in place of the safetensors; every other file copied
    assert_eq!(
        names(&q)?,
        [
            "chatterbox_config.json",
            "s3gen.safetensors",
            "t3_cfg.gguf",
            "tokenizer.json",
            "ve.safetensors"
        ]
    );
    for f in ["s3gen.safetensors", "tokenizer.json", "ve.safetensors"] {
        assert_eq!(
            std::fs::read(q.join(f))?,
            std::fs::read(s.dir.join(f))?,
            "{f}"
        );
    }
    // nothing else beside it (no temporary folder)
    assert_eq!(names(s.root.path())?, ["bf16", "ckpt", "ref.wav"]);

    // the folder speaks, in its stored format, the audio of --quantize bf16 on the original
    let (a, b) = (s.root.path().join("a.wav"), s.root.path().join("b.wav"));
    let o = speak(&s, &q, &a, &[])?;
    anyhow::ensure!(o.status.success(), "{}", stderr(&o));
    anyhow::ensure!(stderr(&o).contains("T3 weights in bf16"), "{}", stderr(&o));
    let o = speak(&s, &s.dir, &b, &["--quantize", "bf16"])?;
    anyhow::ensure!(o.status.success(), "{}", stderr(&o));
    assert_eq!(read(&a)?, read(&b)?);
    // --quantize naming the stored format is fine; another is a clear error before speaking
    let o = speak(&s, &q, &a, &["--quantize", "bf16"])?;
    anyhow::ensure!(o.status.success(), "{}", stderr(&o));
    let c = s.root.path().join("c.wav");
    for other in ["q8", "f32"] {
        let o = speak(&s, &q, &c, &["--quantize", other])?;
        let err = stderr(&o);
        anyhow::ensure!(o.status.code() == Some(1), "{other}: {err}");
        anyhow::ensure!(
            err.contains(&format!("--quantize {other}")) && err.contains("stored in bf16"),
            "{other}: {err}"
        );
        anyhow::ensure!(!c.exists(), "{other}: wrote audio");
    }
    // quantizing the quantized folder again is refused
    let again = s.root.path().join("again");
    let o = quantize(&q, "bf16", &again)?;
    anyhow::ensure!(
        o.status.code() == Some(1) && stderr(&o).contains("already quantized"),
        "{}",
        stderr(&o)
    );
    anyhow::ensure!(!again.exists());
    Ok(())
}

/// Runs `quantize` on `dir` into `root/out` and expects a failure whose message holds `want`,
/// with nothing left in `root` but what was there.
fn fails(root: &Path, dir: &Path, format: &str, want: &str) -> R<()> {
    let before = names(root)?;
    let out = root.join("out");
    let o = quantize(dir, format, &out)?;
    let err = stderr(&o);
    anyhow::ensure!(o.status.code() == Some(1), "{want}: {err}");
    anyhow::ensure!(err.contains(want), "expected {want:?} in: {err}");
    anyhow::ensure!(!err.contains("panicked"), "{err}");
    assert_eq!(names(root)?, before, "{want}: left files behind");
    Ok(())
}

#[test]
fn bad_inputs_are_clear_errors_that_leave_no_folder() -> R<()> {
    let s = setup()?;
    let root = s.root.path();
    // a format none of the 8-wide projections fits
    fails(root, &s.dir, "q8", "nothing to quantize")?;
    // a missing, a damaged and an empty input file
    let broken = root.join("broken");
    for (file, bytes, want) in [
        ("ve.safetensors", None, "ve.safetensors"),
        (
            "t3_cfg.safetensors",
            Some(&b"not safetensors"[..]),
            "t3_cfg.safetensors",
        ),
        (
            "s3gen.safetensors",
            Some(&b"\x08\0\0\0\0\0\0\0{}"[..]),
            "s3gen.safetensors",
        ),
        ("tokenizer.json", Some(&b"{"[..]), "tokenizer.json"),
    ] {
        let _ = std::fs::remove_dir_all(&broken);
        std::fs::create_dir(&broken)?;
        for f in names(&s.dir)? {
            std::fs::copy(s.dir.join(&f), broken.join(&f))?;
        }
        match bytes {
            None => std::fs::remove_file(broken.join(file))?,
            Some(b) => std::fs::write(broken.join(file), b)?,
        }
        fails(root, &broken, "bf16", want)?;
    }
    // an output that exists is left as it was
    let out = root.join("out");
    std::fs::create_dir(&out)?;
    std::fs::write(out.join("keep.txt"), b"mine")?;
    let o = quantize(&s.dir, "bf16", &out)?;
    anyhow::ensure!(
        o.status.code() == Some(1) && stderr(&o).contains("already exists"),
        "{}",
        stderr(&o)
    );
    assert_eq!(names(&out)?, ["keep.txt"]);
    // no folder to write it in
    let o = quantize(&s.dir, "bf16", &root.join("no/such/out"))?;
    anyhow::ensure!(
        o.status.code() == Some(1) && stderr(&o).contains("parent folder does not exist"),
        "{}",
        stderr(&o)
    );
    // no such input folder
    let o = quantize(&root.join("nowhere"), "bf16", &root.join("out2"))?;
    anyhow::ensure!(
        o.status.code() == Some(1) && stderr(&o).contains("nowhere"),
        "{}",
        stderr(&o)
    );
    anyhow::ensure!(!root.join("out2").exists());
    Ok(())
}
