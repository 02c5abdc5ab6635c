//! `cargo xtask check-targets`: compile the workspace for the ARM targets users build on
//! (Apple Silicon with Metal, aarch64 Linux) from this x86 machine, so that x86-only code
//! cannot break their build unnoticed. `cargo check` needs no linker or SDK, only the target's
//! standard library, which `rustup target add` installs.
use anyhow::{bail, Context, Result};
use std::process::Command;

#[derive(clap::Args)]
pub struct CheckTargetsArgs {
    /// Only this target (default: every target in the table).
    #[arg(long)]
    target: Vec<String>,
    /// Fail instead of installing a missing target with `rustup target add`.
    #[arg(long)]
    no_install: bool,
}

/// One cross-check: a target and the features checked for it.
struct Check {
    target: &'static str,
    /// Why users build it.
    who: &'static str,
    /// Features, package-qualified (`cargo check --workspace --features ...`).
    features: &'static [&'static str],
}

/// Every package is checked without its default features, which drops only the `hub` feature
/// of the pipeline and the CLI: the hub download's TLS stack (aws-lc-sys, C) needs the
/// target's C compiler and system headers, which a Mac's SDK gives and nothing here does.
/// Everything else in the workspace is Rust.
const NO_HUB: &str = "without `hub` (its TLS, aws-lc-sys, is C that needs the target's SDK)";

const CHECKS: &[Check] = &[
    Check {
        target: "aarch64-apple-darwin",
        who: "Apple Silicon Macs, with the Metal backend",
        features: &[
            "chatterbox-cli/metal",
            "chatterbox-pipeline/metal",
            "chatterbox-t3/metal",
            "chatterbox-s3gen/metal",
            "chatterbox-vocoder/metal",
            "chatterbox-speaker/metal",
        ],
    },
    Check {
        target: "aarch64-unknown-linux-gnu",
        who: "ARM Linux servers (Graviton, Ampere, Grace)",
        features: &[],
    },
];

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Installs `target`'s standard library with rustup when it is missing.
pub(crate) fn ensure_target(target: &str, install: bool) -> Result<()> {
    let listed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    let installed = match listed {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.trim() == target),
        _ => bail!(
            "rustup is not available: install the standard library for {target} some other way \
             (for example your distribution's rust-std package for it)"
        ),
    };
    if installed {
        return Ok(());
    }
    if !install {
        bail!("the target {target} is not installed: run `rustup target add {target}`");
    }
    eprintln!("+ rustup target add {target}");
    let status = Command::new("rustup")
        .args(["target", "add", target])
        .status()
        .context("cannot run rustup")?;
    if !status.success() {
        bail!(
            "`rustup target add {target}` failed ({status}): it downloads the target's \
             standard library from the Rust project's servers; without them this check cannot \
             run"
        );
    }
    Ok(())
}

fn check(c: &Check) -> Result<bool> {
    eprintln!("== {} ({}), {NO_HUB}", c.target, c.who);
    // The whole workspace, tests and benches included, but xtask (a host tool).
    let mut cmd = cargo();
    cmd.current_dir(crate::root()).args([
        "check",
        "--workspace",
        "--all-targets",
        "--exclude",
        "xtask",
        "--no-default-features",
        "--target",
        c.target,
    ]);
    if !c.features.is_empty() {
        cmd.arg("--features").arg(c.features.join(","));
    }
    run(cmd)
}

fn run(mut cmd: Command) -> Result<bool> {
    eprintln!("+ {cmd:?}");
    let status = cmd.status().context("cannot run cargo")?;
    Ok(status.success())
}

pub fn run_checks(args: CheckTargetsArgs) -> Result<i32> {
    let chosen: Vec<&Check> = CHECKS
        .iter()
        .filter(|c| args.target.is_empty() || args.target.iter().any(|t| t == c.target))
        .collect();
    if let Some(t) = args
        .target
        .iter()
        .find(|t| !CHECKS.iter().any(|c| c.target == t.as_str()))
    {
        let known: Vec<&str> = CHECKS.iter().map(|c| c.target).collect();
        bail!(
            "unknown target {t}: the checked targets are {}",
            known.join(", ")
        );
    }
    let mut failed = Vec::new();
    for c in &chosen {
        ensure_target(c.target, !args.no_install)?;
        if !check(c)? {
            failed.push(c.target);
        }
    }
    if failed.is_empty() {
        eprintln!("check-targets: {} targets compile", chosen.len());
        Ok(0)
    } else {
        eprintln!("check-targets: failed for {}", failed.join(", "));
        Ok(1)
    }
}
