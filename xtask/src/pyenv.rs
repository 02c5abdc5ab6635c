//! The venvs of the xtask commands that run Python tools (`openai-client`, `python`): each
//! in its own folder under the target folder, its packages pinned, built from PyPI once and
//! reused while a stamp file says it holds the same pins.
use anyhow::{bail, ensure, Context, Result};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// The workspace's target folder (`$CARGO_TARGET_DIR`, else `target`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => crate::root().join("target"),
    }
}

/// Runs `cmd` (shown first), which must succeed.
pub fn run_cmd(cmd: &mut Command) -> Result<()> {
    eprintln!("+ {cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed with {status}");
    Ok(())
}

/// The first Python on PATH; `needs` says in the error what needs it.
fn host_python(needs: &str) -> Result<&'static str> {
    for candidate in ["python3", "python3.12", "python3.11", "python"] {
        if Command::new(candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(candidate);
        }
    }
    bail!("no python3 on PATH: {needs} needs Python 3.9 or later")
}

/// The Python of `target/NAME` holding the pinned `packages` (a stamp file skips
/// reinstalling). `size` follows "from PyPI" in the message shown while building it; `needs`
/// names what needs Python, for the error when there is none.
pub fn pinned_venv(name: &str, packages: &[&str], size: &str, needs: &str) -> Result<PathBuf> {
    let dir = target_dir().join(name);
    let python = dir.join("bin/python");
    let stamp = dir.join("chatterbox-stamp");
    let text = packages.join("\n") + "\n";
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&text) {
        return Ok(python);
    }
    eprintln!(
        "building {} with {} (from PyPI{size}; later runs reuse it)",
        dir.display(),
        packages.join(" "),
    );
    if !python.exists() {
        run_cmd(
            Command::new(host_python(needs)?)
                .args(["-m", "venv"])
                .arg(&dir),
        )?;
    }
    let t0 = Instant::now();
    run_cmd(
        Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check", "-q"])
            .args(packages),
    )?;
    eprintln!("venv ready in {:.0} s", t0.elapsed().as_secs_f64());
    std::fs::write(&stamp, text).with_context(|| format!("cannot write {}", stamp.display()))?;
    Ok(python)
}
