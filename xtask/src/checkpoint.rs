//! `cargo xtask random-checkpoint`: a complete checkpoint directory in the hub layout with
//! random weights, written by `parity/checkpoints.py` from the reference's own classes.
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// Model variant of the checkpoint.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Variant {
    /// `ChatterboxTTS` (`ResembleAI/chatterbox`).
    English,
    /// `ChatterboxMultilingualTTS` (`ResembleAI/chatterbox`, multilingual files).
    Multilingual,
    /// `ChatterboxTurboTTS` (`ResembleAI/chatterbox-turbo`).
    Turbo,
    /// `ChatterboxTurboTTS(nano=True)` (`ResembleAI/chatterbox-nano`).
    Nano,
}

/// Size of the random model.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Size {
    /// The tiny test configurations (fast; what the committed fixtures use).
    Tiny,
    /// The real hyper-parameters (gigabytes; for end-to-end parity and benchmarks).
    Full,
}

#[derive(clap::Args)]
pub struct RandomCheckpointArgs {
    /// Which model's layout and hyper-parameters.
    #[arg(long, value_enum)]
    variant: Variant,
    /// Output directory (created if needed). Never commit it.
    #[arg(long)]
    out: PathBuf,
    /// Model size.
    #[arg(long, value_enum, default_value = "full")]
    size: Size,
    /// Seed of the random weights and of the generated tokenizer.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// pip requirement for the reference package (default: the shared wheel, else upstream git
    /// at 5de7a54; also `$CHATTERBOX_REFERENCE`).
    #[arg(long)]
    reference: Option<String>,
}

fn name<T: clap::ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

pub fn run(args: RandomCheckpointArgs) -> Result<i32> {
    let root = crate::root();
    let script = root.join("parity/checkpoints.py");
    anyhow::ensure!(
        script.is_file(),
        "{} not found: the checkpoint writer is part of the pipeline's parity tooling",
        script.display()
    );
    let reference = crate::venv::reference_source(args.reference.as_deref());
    let python = crate::venv::ensure(&reference)?;
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .arg("--variant")
        .arg(name(&args.variant))
        .arg("--out")
        .arg(&args.out)
        .arg("--size")
        .arg(name(&args.size))
        .arg("--seed")
        .arg(args.seed.to_string())
        .env("PYTHONUNBUFFERED", "1");
    eprintln!("+ {cmd:?}");
    let status = cmd.status().context("cannot start parity/checkpoints.py")?;
    anyhow::ensure!(status.success(), "writing the checkpoint failed ({status})");
    eprintln!("checkpoint written to {}", args.out.display());
    Ok(0)
}
