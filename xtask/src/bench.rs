//! `cargo xtask bench GROUP`: run the Rust bench of a group and the same stages of the PyTorch
//! reference on this machine, side by side, and write one JSON record with the ratios.
use anyhow::{bail, Context, Result};
use chatterbox_testkit::BenchRecord;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Bench groups are found in the tree: a group `G` is a `crates/<crate>/benches/G.rs` (a
/// `harness = false` bench that appends [`BenchRecord`] lines to `$CHATTERBOX_BENCH_OUT`),
/// optionally with `parity/bench/G.py` timing the reference on the same shapes (`goals`:
/// issue 41's goals table, `crates/chatterbox-pipeline/benches/goals.rs` and
/// `parity/bench/goals.py`, which prints the table of both sides at its end).
fn groups() -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(crate::root().join("crates"))? {
        let dir = entry?.path();
        let Some(krate) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
            continue;
        };
        let Ok(benches) = std::fs::read_dir(dir.join("benches")) else {
            continue;
        };
        for b in benches {
            let p = b?.path();
            if p.extension().is_some_and(|e| e == "rs") {
                if let Some(stem) = p.file_stem().and_then(|s| s.to_str()) {
                    out.push((stem.to_string(), krate.clone()));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Group to run (a `crates/*/benches/GROUP.rs`), e.g. `dsp`.
    group: String,
    /// Where to write the merged JSON (default `target/bench/GROUP.json`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Threads for both implementations (the CPU goals are stated for one core).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Skip the Python reference (Rust timings only).
    #[arg(long)]
    no_reference: bool,
}

#[derive(Serialize)]
struct Stage {
    stage: String,
    shape: String,
    device: String,
    rust_ms: Option<f64>,
    reference_ms: Option<f64>,
    /// reference time / Rust time (higher is better for Rust).
    speedup: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    group: String,
    threads: usize,
    cpu: String,
    stages: Vec<Stage>,
    records: Vec<BenchRecord>,
}

fn read_records(path: &Path) -> Vec<BenchRecord> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub fn run(args: BenchArgs) -> Result<i32> {
    let all = groups()?;
    let Some((group, krate)) = all.iter().find(|g| g.0 == args.group) else {
        let names: Vec<&str> = all.iter().map(|g| g.0.as_str()).collect();
        bail!(
            "unknown bench group {:?}; known: {}",
            args.group,
            names.join(", ")
        );
    };
    let (group, krate, bench) = (group.as_str(), krate.as_str(), group.as_str());
    let script = crate::root()
        .join("parity/bench")
        .join(format!("{group}.py"));
    let root = crate::root();
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let rust_out = dir.join(format!("{group}-rust.jsonl"));
    let ref_out = dir.join(format!("{group}-reference.jsonl"));
    let _ = std::fs::remove_file(&rust_out);
    let _ = std::fs::remove_file(&ref_out);

    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(&root)
        .args(["bench", "--quiet", "--package", krate, "--bench", bench])
        .env("CHATTERBOX_BENCH_OUT", &rust_out)
        .env("CHATTERBOX_BENCH_THREADS", args.threads.to_string())
        .env("RAYON_NUM_THREADS", args.threads.to_string())
        // candle's quantized kernels run on a pool of their own (`goals`, `t3_quant`): the
        // same count, whatever the caller's environment says
        .env("CANDLE_NUM_THREADS", args.threads.to_string());
    eprintln!("+ {cmd:?}");
    let status = cmd.status().context("cannot run cargo bench")?;
    anyhow::ensure!(status.success(), "cargo bench failed ({status})");

    if args.no_reference {
        eprintln!("reference skipped (--no-reference)");
    } else if !script.exists() {
        eprintln!("no {}: reference skipped", script.display());
    } else if let Some(python) = crate::venv::existing() {
        let mut cmd = Command::new(python);
        cmd.arg(&script)
            .arg("--out")
            .arg(&ref_out)
            .arg("--threads")
            .arg(args.threads.to_string())
            .env("PYTHONUNBUFFERED", "1")
            .env("OMP_NUM_THREADS", args.threads.to_string());
        eprintln!("+ {cmd:?}");
        let status = cmd.status().context("cannot run the reference bench")?;
        anyhow::ensure!(status.success(), "reference bench failed ({status})");
    } else {
        eprintln!(
            "parity/.venv not found: reference skipped (run `cargo xtask parity --record` once)"
        );
    }

    let rust = read_records(&rust_out);
    let reference = read_records(&ref_out);
    let mut stages = Vec::new();
    for r in &rust {
        let p = reference
            .iter()
            .find(|p| p.stage == r.stage && p.device == r.device);
        stages.push(Stage {
            stage: r.stage.clone(),
            shape: r.shape.clone(),
            device: r.device.clone(),
            rust_ms: Some(r.timing.median_ms),
            reference_ms: p.map(|p| p.timing.median_ms),
            speedup: p.map(|p| p.timing.median_ms / r.timing.median_ms),
        });
    }
    for p in &reference {
        if !rust
            .iter()
            .any(|r| r.stage == p.stage && r.device == p.device)
        {
            stages.push(Stage {
                stage: p.stage.clone(),
                shape: p.shape.clone(),
                device: p.device.clone(),
                rust_ms: None,
                reference_ms: Some(p.timing.median_ms),
                speedup: None,
            });
        }
    }
    let fmt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3}"));
    println!(
        "{:<34} {:<24} {:>6} {:>12} {:>14} {:>9}",
        "stage", "shape", "device", "rust ms", "reference ms", "speedup"
    );
    for s in &stages {
        println!(
            "{:<34} {:<24} {:>6} {:>12} {:>14} {:>9}",
            s.stage,
            s.shape,
            s.device,
            fmt(s.rust_ms),
            fmt(s.reference_ms),
            s.speedup.map_or("-".to_string(), |v| format!("{v:.1}x"))
        );
    }
    let report = Report {
        group: group.to_string(),
        threads: args.threads,
        cpu: cpu_model(),
        stages,
        records: rust.into_iter().chain(reference).collect(),
    };
    let out = args
        .out
        .unwrap_or_else(|| dir.join(format!("{group}.json")));
    std::fs::write(&out, serde_json::to_string_pretty(&report)?)?;
    println!("\nwritten {}", out.display());
    Ok(0)
}
