//! `cargo xtask`: the project's tasks (parity against the Python reference, benchmarks, random
//! checkpoints, cross-target checks).
use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

mod aarch64;
mod bench;
mod checkpoint;
mod openai;
mod parity;
mod pyenv;
mod python;
mod targets;
mod venv;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "chatterbox-rs project tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compare every crate against fixtures recorded from the Python reference (no Python
    /// needed), or with `--record` rebuild the reference virtualenv and re-record them first.
    Parity(parity::ParityArgs),
    /// Benchmark a group of stages, Rust against the PyTorch reference on this machine, and
    /// write the JSON record with ratios.
    Bench(bench::BenchArgs),
    /// Write a checkpoint directory in the hub layout with random weights, to try the pipeline
    /// without the real models (it speaks noise) and for parity and benchmarks.
    ///
    /// It writes the files `--model-dir` reads for the variant (English: ve.safetensors,
    /// t3_cfg.safetensors, s3gen.safetensors, tokenizer.json, conds.pt; the others in
    /// docs/setup.md): about 3.2 GB for English and Multilingual, 3.0 GB for Turbo, 1.9 GB for
    /// Nano at full size, a few MB with `--size tiny`.
    ///
    /// The weights come from the Python reference's own classes (parity/checkpoints.py) run in
    /// parity/.venv. The first run builds that environment: it needs Python 3.11 or 3.12 and pip
    /// reaching PyPI, downloads about 3 GB (6 GB on disk: PyPI's Linux torch is the CUDA build)
    /// and takes a few minutes, with pip's progress shown; later runs reuse it. The reference
    /// package comes from `--reference`, else `$CHATTERBOX_REFERENCE`, else the wheel in
    /// ../shared/reference/wheels; without any of them the command stops and says what to pass.
    /// Real checkpoints and offline set-up: docs/setup.md.
    RandomCheckpoint(checkpoint::RandomCheckpointArgs),
    /// Compile the workspace for the ARM targets (aarch64-apple-darwin with Metal,
    /// aarch64-unknown-linux-gnu), installing their standard library with rustup if needed.
    CheckTargets(targets::CheckTargetsArgs),
    /// Cross-build the parity suites of dsp, speaker, t3, s3gen, vocoder and watermark for
    /// aarch64-unknown-linux-gnu (into target-aarch64) and run them under qemu-user, so that
    /// the NEON kernels run against the fixtures; installs Debian's cross gcc, glibc and
    /// qemu-user and the rustup target if missing.
    TestAarch64(aarch64::TestAarch64Args),
    /// Run the official `openai` Python package against `chatterbox serve`: builds its own
    /// venv (target/openai-venv, `openai` pinned; needs Python 3.9+ and PyPI once), serves the
    /// tiny English checkpoint of the committed fixtures on 127.0.0.1 and an ephemeral port,
    /// and runs xtask/openai_client.py (whole files, streams, SSE, a library voice, errors).
    OpenaiClient(openai::OpenaiClientArgs),
    /// Build the `chatterbox_rs` Python wheel (crates/chatterbox-python) with maturin into
    /// target/wheels, install it into target/python-venv (made from PyPI: maturin, pytest,
    /// numpy, torch, torchaudio) and run its pytest suite.
    Python(python::PythonArgs),
}

/// The workspace root (the parent of this crate's folder).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Parity(args) => parity::run(args),
        Command::Bench(args) => bench::run(args),
        Command::RandomCheckpoint(args) => checkpoint::run(args),
        Command::CheckTargets(args) => targets::run_checks(args),
        Command::TestAarch64(args) => aarch64::run(args),
        Command::OpenaiClient(args) => openai::run(args),
        Command::Python(args) => python::run(args),
    }
}

/// Errors are one `error: ...` line (with their causes), exit status 1; no Debug dump.
fn main() {
    let code = match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}
