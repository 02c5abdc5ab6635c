//! `cargo xtask python`: the `chatterbox_rs` wheel (crates/chatterbox-python) built once with
//! maturin into target/wheels, reusing the workspace's target folder, installed into its own
//! venv (target/python-venv: maturin, pytest, numpy and, unless `--no-torch`, torch and
//! torchaudio as the reference's examples expect; all from PyPI, pinned), then the package's
//! tests run with pytest (crates/chatterbox-python/tests: equality with the `chatterbox`
//! command, streams, threads, errors, the reference's API surface and its example scripts on
//! tiny random checkpoints laid out in a Hugging Face cache; `chatterbox_rs.serve` on a
//! two-node Ray cluster started on this machine, with the official `openai` client).
use crate::pyenv::{pinned_venv, run_cmd, target_dir};
use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// What the venv holds, pinned. torch's Linux wheel on PyPI is the CUDA build: it pulls about
/// 2.7 GB of nvidia-* wheels, and `import torch` fails without them (tried: `--no-deps`
/// leaves `libcublas.so.*[0-9] not found`), so they come too.
const BASE: &[&str] = &["maturin==1.9.6", "pytest==8.4.2", "numpy==2.2.6"];
const TORCH: &[&str] = &["torch==2.6.0", "torchaudio==2.6.0", "soundfile==0.13.1"];
/// The `serve` extra (Ray Serve) and the client its test uses: about 140 MB of wheels (ray's
/// own is 70 MB), 60 s to download and install on the 2-core CI machine.
const SERVE: &[&str] = &["ray[serve]==2.60.0", "openai==3.57.0"];

#[derive(clap::Args)]
pub struct PythonArgs {
    /// Cargo profile of the wheel: `dev` (the workspace's test profile: dependencies at
    /// opt-level 3, our crates at 1) or `release`.
    #[arg(long, default_value = "dev")]
    profile: String,
    /// Cargo features of chatterbox-python (`cuda`, `metal`).
    #[arg(long, value_delimiter = ',')]
    features: Vec<String>,
    /// Leave torch and torchaudio out of the venv (the tests that need them are skipped).
    #[arg(long)]
    no_torch: bool,
    /// Leave ray[serve] and openai out of the venv (tests/test_ray_serve.py is skipped).
    #[arg(long)]
    no_serve: bool,
    /// Build and install the wheel only.
    #[arg(long)]
    no_test: bool,
    /// Arguments for pytest (e.g. `-k stream`).
    #[arg(last = true)]
    pytest: Vec<String>,
}

/// target/python-venv with the pinned packages.
fn venv(torch: bool, ray: bool) -> Result<PathBuf> {
    let mut want: Vec<&str> = BASE.to_vec();
    if torch {
        want.extend_from_slice(TORCH);
    }
    if ray {
        want.extend_from_slice(SERVE);
    }
    let size = if torch {
        ": torch brings about 2.7 GB of nvidia-* wheels, 6 GB on disk"
    } else {
        ""
    };
    pinned_venv("python-venv", &want, size, "the Python package")
}

/// Builds the wheel with maturin into target/wheels and returns its path.
fn build_wheel(python: &Path, profile: &str, features: &[String]) -> Result<PathBuf> {
    let out = target_dir().join("wheels");
    let _ = std::fs::remove_dir_all(&out);
    let manifest = crate::root().join("crates/chatterbox-python/Cargo.toml");
    let mut cmd = Command::new(python);
    cmd.args(["-m", "maturin", "build", "--profile", profile, "-m"])
        .arg(&manifest)
        .arg("--out")
        .arg(&out)
        .env("CARGO_TARGET_DIR", target_dir());
    if !features.is_empty() {
        cmd.arg("--features").arg(features.join(","));
    }
    if profile != "dev" {
        // the release profile's line tables make a 220 MB library of a 35 MB one: a wheel to
        // install elsewhere carries none
        cmd.arg("--strip");
    }
    let t0 = Instant::now();
    run_cmd(&mut cmd)?;
    eprintln!("wheel built in {:.0} s", t0.elapsed().as_secs_f64());
    let wheel = std::fs::read_dir(&out)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .context("maturin wrote no wheel")?;
    Ok(wheel)
}

pub fn run(args: PythonArgs) -> Result<i32> {
    let python = venv(!args.no_torch, !args.no_serve)?;
    let wheel = build_wheel(&python, &args.profile, &args.features)?;
    run_cmd(
        Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check", "-q"])
            .args(["--force-reinstall", "--no-deps"])
            .arg(&wheel),
    )?;
    eprintln!("installed {}", wheel.display());
    if args.no_test {
        return Ok(0);
    }
    let root = crate::root();
    let perth = perth_weights(&python)?;
    // the equality tests compare with the `chatterbox` command of the same checkout
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run_cmd(
        Command::new(cargo)
            .current_dir(&root)
            .args(["build", "--bin", "chatterbox"]),
    )?;
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("crates/chatterbox-python/tests"))
        .args(&args.pytest)
        .env("CHATTERBOX_FIXTURES", root.join("parity/fixtures"))
        .env(
            "CHATTERBOX_REFERENCE_EXAMPLES",
            root.join("../shared/reference/examples"),
        )
        .env("CHATTERBOX_PARITY_DIR", root.join("parity"))
        .env("CHATTERBOX_BIN", target_dir().join("debug/chatterbox"))
        .env("CHATTERBOX_WATERMARK_WEIGHTS", &perth)
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("CHATTERBOX_DEVICE")
        .env_remove("CHATTERBOX_NO_WATERMARK")
        .env_remove("HF_HOME");
    let t0 = Instant::now();
    let status = cmd.status().context("cannot run pytest")?;
    eprintln!("pytest ran {:.0} s", t0.elapsed().as_secs_f64());
    Ok(if status.success() { 0 } else { 1 })
}

/// Perth's weights (the watermark), target/python-perth/perth_net_250000.pth.tar: taken once
/// from PyPI's resemble-perth wheel (34 MB), so the tests watermark as users' runs do.
fn perth_weights(python: &Path) -> Result<PathBuf> {
    let dir = target_dir().join("python-perth");
    let file = dir.join("perth_net_250000.pth.tar");
    if file.is_file() {
        return Ok(file);
    }
    std::fs::create_dir_all(&dir)?;
    run_cmd(
        Command::new(python)
            .args(["-m", "pip", "download", "--disable-pip-version-check", "-q"])
            .args(["--no-deps", "resemble-perth==1.0.1", "-d"])
            .arg(&dir),
    )?;
    let extract = "import glob, os, sys, zipfile\n\
        d = sys.argv[1]\n\
        z = zipfile.ZipFile(glob.glob(os.path.join(d, 'resemble_perth-*.whl'))[0])\n\
        name = 'perth/perth_net/pretrained/implicit/perth_net_250000.pth.tar'\n\
        open(os.path.join(d, os.path.basename(name)), 'wb').write(z.read(name))\n";
    run_cmd(Command::new(python).args(["-c", extract]).arg(&dir))?;
    ensure!(file.is_file(), "{} was not extracted", file.display());
    Ok(file)
}
