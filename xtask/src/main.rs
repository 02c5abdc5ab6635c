//! `cargo xtask`: the project's tasks (parity against the Python reference, benchmarks, random
//! checkpoints, cross-target checks).
use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

mod bench;
mod checkpoint;
mod parity;
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
    /// Write a complete checkpoint directory in the hub layout with random weights (from the
    /// reference's classes via `parity/checkpoints.py`, building `parity/.venv` if needed).
    RandomCheckpoint(checkpoint::RandomCheckpointArgs),
    /// Compile the workspace for the ARM targets (aarch64-apple-darwin with Metal,
    /// aarch64-unknown-linux-gnu), installing their standard library with rustup if needed.
    CheckTargets(targets::CheckTargetsArgs),
}

/// The workspace root (the parent of this crate's folder).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Parity(args) => parity::run(args)?,
        Command::Bench(args) => bench::run(args)?,
        Command::RandomCheckpoint(args) => checkpoint::run(args)?,
        Command::CheckTargets(args) => targets::run_checks(args)?,
    };
    std::process::exit(code);
}
