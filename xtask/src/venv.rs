//! The reference's Python environment, `parity/.venv`, built from `parity/requirements.txt`.
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Upstream source of the reference, used when no wheel is found and none is given.
pub const UPSTREAM: &str =
    "chatterbox-tts @ git+https://github.com/resemble-ai/chatterbox.git@5de7a54";

/// Where the reference package is installed from: `--reference`, else `$CHATTERBOX_REFERENCE`,
/// else the wheel in `../shared/reference/wheels/` beside the checkout, else upstream git.
pub fn reference_source(flag: Option<&str>) -> String {
    if let Some(s) = flag {
        return s.to_string();
    }
    if let Ok(s) = std::env::var("CHATTERBOX_REFERENCE") {
        if !s.is_empty() {
            return s;
        }
    }
    let wheels = crate::root().join("../shared/reference/wheels");
    if let Ok(entries) = std::fs::read_dir(&wheels) {
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("chatterbox_tts-") && n.ends_with(".whl"))
            })
            .collect();
        found.sort();
        if let Some(w) = found.pop() {
            return w.display().to_string();
        }
    }
    UPSTREAM.to_string()
}

/// Path of the venv's Python.
pub fn python() -> PathBuf {
    crate::root().join("parity/.venv/bin/python")
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("+ {cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn host_python() -> Result<String> {
    for candidate in ["python3.11", "python3.12", "python3"] {
        if Command::new(candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(candidate.to_string());
        }
    }
    bail!("no python3 on PATH: recording fixtures needs Python 3.11 or 3.12")
}

/// Creates or updates `parity/.venv` so it holds the pinned requirements and the reference.
/// A stamp file remembers what was installed; nothing is reinstalled when it matches.
pub fn ensure(reference: &str) -> Result<PathBuf> {
    let root = crate::root();
    let venv = root.join("parity/.venv");
    let reqs = root.join("parity/requirements.txt");
    let reqs_text = std::fs::read_to_string(&reqs)
        .with_context(|| format!("cannot read {}", reqs.display()))?;
    let want = format!("{reqs_text}\n--reference {reference}\n");
    let stamp = venv.join("chatterbox-stamp");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) && python().exists() {
        return Ok(python());
    }
    if !python().exists() {
        run(Command::new(host_python()?).args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(python()).args(["-m", "pip", "install", "-q", "--upgrade", "pip"]))?;
    }
    run(Command::new(python())
        .args(["-m", "pip", "install", "-q", "-r"])
        .arg(&reqs))?;
    // The reference's metadata pins gradio for its demo apps; its real imports are in
    // requirements.txt, so the package itself goes in without dependencies.
    run(Command::new(python())
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--force-reinstall",
        ])
        .arg(reference))?;
    std::fs::write(&stamp, want).with_context(|| format!("cannot write {}", stamp.display()))?;
    Ok(python())
}

/// `parity/.venv`'s Python if the venv exists (benchmarks use it when present).
pub fn existing() -> Option<PathBuf> {
    let p = python();
    Path::new(&p).exists().then_some(p)
}
