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
    /// The reference package to install into parity/.venv: a wheel, a source folder or any pip
    /// requirement (default: `$CHATTERBOX_REFERENCE`, else the wheel in
    /// ../shared/reference/wheels or `$CHATTERBOX_REFERENCE_WHEELS`; without any of them the
    /// command stops and says what to pass).
    #[arg(long, value_name = "PATH_OR_REQUIREMENT")]
    reference: Option<String>,
}

/// The files written for `variant` (as `parity/checkpoints.py` writes them) and their rough
/// total size.
fn plan(variant: Variant, size: Size) -> (&'static [&'static str], &'static str) {
    let files: &'static [&'static str] = match variant {
        Variant::English => &[
            "ve.safetensors",
            "t3_cfg.safetensors",
            "s3gen.safetensors",
            "tokenizer.json",
            "conds.pt",
        ],
        Variant::Multilingual => &[
            "ve.pt",
            "t3_mtl23ls_v2.safetensors",
            "s3gen.pt",
            "grapheme_mtl_merged_expanded_v1.json",
            "Cangjie5_TC.json",
            "conds.pt",
        ],
        Variant::Turbo => &[
            "ve.safetensors",
            "t3_turbo_v1.safetensors",
            "s3gen_meanflow.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "conds.pt",
        ],
        Variant::Nano => &[
            "ve.safetensors",
            "t3_nano_v1.safetensors",
            "s3gen_meanflow.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "conds.pt",
        ],
    };
    // fp32 parameter counts (../shared/reference/weights): T3 2.13 / 2.14 / 1.92 / 0.87 GB,
    // S3Gen 1.06 GB, VoiceEncoder 6 MB.
    let bytes = match (size, variant) {
        (Size::Tiny, _) => "a few MB, plus chatterbox_config.json",
        (Size::Full, Variant::English | Variant::Multilingual) => "about 3.2 GB",
        (Size::Full, Variant::Turbo) => "about 3.0 GB",
        (Size::Full, Variant::Nano) => "about 1.9 GB",
    };
    (files, bytes)
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
    let (files, bytes) = plan(args.variant, args.size);
    eprintln!(
        "random {} checkpoint ({}, seed {}) for {}: {} ({bytes}); random weights, so it \
         speaks noise",
        name(&args.variant),
        name(&args.size),
        args.seed,
        args.out.display(),
        files.join(", "),
    );
    let python = crate::venv::prepare(args.reference.as_deref())?;
    let mut cmd = Command::new(&python);
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
    copy_perth(&python, &args.out)?;
    eprintln!("checkpoint written to {}", args.out.display());
    Ok(0)
}

/// Copies Perth's real weights (the watermark; resemble-perth is in the parity venv) into the
/// checkpoint directory, where `chatterbox --model-dir` finds them without a download.
fn copy_perth(python: &std::path::Path, out: &std::path::Path) -> Result<()> {
    const FILE: &str = "perth_net_250000.pth.tar";
    let found = Command::new(python)
        .args([
            "-c",
            "import importlib.util, os; s = importlib.util.find_spec('perth'); \
             print(os.path.join(list(s.submodule_search_locations)[0], 'perth_net', \
             'pretrained', 'implicit', 'perth_net_250000.pth.tar'))",
        ])
        .output()
        .context("cannot ask the venv's python where resemble-perth is")?;
    let src = std::path::PathBuf::from(String::from_utf8_lossy(&found.stdout).trim());
    anyhow::ensure!(
        found.status.success() && src.is_file(),
        "resemble-perth's weights are not in the venv ({}): the watermark needs them",
        src.display()
    );
    std::fs::copy(&src, out.join(FILE))
        .with_context(|| format!("cannot copy {} into {}", src.display(), out.display()))?;
    eprintln!(
        "Perth's watermark weights copied: {}",
        out.join(FILE).display()
    );
    Ok(())
}
