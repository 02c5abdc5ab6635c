//! `cargo xtask parity`: run every crate's parity suite (its `tests/parity.rs`) against the
//! recorded fixtures and print one table; `--record` first re-records them from the reference,
//! and `--e2e` records the full-size pipeline cases to a temporary folder and checks those.
use anyhow::{Context, Result};
use chatterbox_testkit::{Row, Status};
use std::path::PathBuf;
use std::process::Command;

#[derive(clap::Args)]
pub struct ParityArgs {
    /// Re-record fixtures from the Python reference first (builds `parity/.venv` if needed).
    #[arg(long)]
    record: bool,
    /// Only this component, kind, `component/case` prefix or case prefix.
    #[arg(long)]
    only: Option<String>,
    /// Seed for the recorders' random inputs and weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Where `--record` writes fixtures (default: the committed `parity/fixtures`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where comparisons read fixtures from (default: `--out`, else `parity/fixtures`).
    #[arg(long)]
    fixtures: Option<PathBuf>,
    /// Also record the full-size cases (large; never commit them).
    #[arg(long)]
    full: bool,
    /// pip requirement or path for the reference package (default: `$CHATTERBOX_REFERENCE`,
    /// else the wheel in ../shared/reference/wheels; without either, recording stops and says
    /// so).
    #[arg(long)]
    reference: Option<String>,
    /// Stop after the first crate with a failing row.
    #[arg(long)]
    first_fail: bool,
    /// Print only failing rows and the summary.
    #[arg(long)]
    quiet: bool,
    /// End-to-end parity (needs the venv; not in CI): record the pipeline cases with `--full`
    /// into `--out` (default /tmp/chatterbox-e2e), then compare against them with the ignored
    /// full-size Rust tests included. `--only` narrows it (default `pipeline`).
    #[arg(long)]
    e2e: bool,
}

/// Default fixtures folder of `--e2e` (full-size fixtures are never committed).
const E2E_OUT: &str = "/tmp/chatterbox-e2e";

/// `(crate, test target)` for every `crates/<crate>/tests/parity*.rs`.
fn parity_targets() -> Result<Vec<(String, String)>> {
    let dir = crate::root().join("crates");
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let Some(krate) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        let Ok(tests) = std::fs::read_dir(path.join("tests")) else {
            continue;
        };
        for t in tests {
            let p = t?.path();
            let Some(stem) = p.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if stem.starts_with("parity") && p.extension().is_some_and(|e| e == "rs") {
                targets.push((krate.clone(), stem.to_string()));
            }
        }
    }
    targets.sort();
    Ok(targets)
}

fn record(args: &ParityArgs, out: &PathBuf) -> Result<()> {
    let reference = crate::venv::reference_source(args.reference.as_deref());
    let python = crate::venv::ensure(&reference)?;
    let mut cmd = Command::new(python);
    cmd.arg(crate::root().join("parity/record.py"))
        .arg("--seed")
        .arg(args.seed.to_string())
        .arg("--out")
        .arg(out)
        .env("PYTHONUNBUFFERED", "1");
    if let Some(only) = &args.only {
        cmd.arg("--only").arg(only);
    }
    if args.full {
        cmd.arg("--full");
    }
    eprintln!("+ {cmd:?}");
    let status = cmd.status().context("cannot start the recorder")?;
    anyhow::ensure!(status.success(), "recording failed ({status})");
    Ok(())
}

pub fn run(mut args: ParityArgs) -> Result<i32> {
    if args.e2e {
        args.record = true;
        args.full = true;
        args.only.get_or_insert_with(|| "pipeline".to_string());
        args.out.get_or_insert_with(|| PathBuf::from(E2E_OUT));
    }
    let root = crate::root();
    let committed = root.join("parity/fixtures");
    let out = args.out.clone().unwrap_or_else(|| committed.clone());
    if args.record {
        record(&args, &out)?;
    }
    let fixtures = args
        .fixtures
        .clone()
        .or_else(|| args.out.clone())
        .unwrap_or(committed);
    let fixtures = std::fs::canonicalize(&fixtures).unwrap_or(fixtures);
    let report_dir = root.join("target/parity");
    std::fs::create_dir_all(&report_dir)?;

    let mut rows: Vec<Row> = Vec::new();
    println!("{}", Row::header());
    let mut targets = parity_targets()?;
    if args.e2e {
        // Other crates' ignored full-size checks would look for fixtures `--e2e` does not
        // record.
        targets.retain(|(krate, _)| krate == "chatterbox-pipeline");
    }
    for (krate, target) in targets {
        let report = report_dir.join(format!("{krate}-{target}.jsonl"));
        let _ = std::fs::remove_file(&report);
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(&root)
            .args(["test", "--quiet", "--package", &krate, "--test", &target])
            .env("CHATTERBOX_FIXTURES", &fixtures)
            .env("CHATTERBOX_PARITY_REPORT", &report);
        if let Some(only) = &args.only {
            cmd.env("CHATTERBOX_PARITY_ONLY", only);
        }
        if args.e2e {
            // Only the full-size checks (`#[ignore]`d in plain `cargo test`): the committed-size
            // suite has no handler for the full-size-only cases (`full_multilingual`).
            cmd.args(["--", "--ignored"]);
        }
        let output = cmd
            .output()
            .with_context(|| format!("running parity tests of {krate}"))?;
        let text = std::fs::read_to_string(&report).unwrap_or_default();
        let mut crate_rows: Vec<Row> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        // A failing test run must fail the table even when its report holds only passing rows
        // (a case that errors out writes no rows for its outputs).
        if !output.status.success() && crate_rows.iter().all(Row::passed) {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
            crate_rows.push(Row {
                component: krate.trim_start_matches("chatterbox-").to_string(),
                case: if crate_rows.is_empty() {
                    "(build or run)".into()
                } else {
                    "(test run failed; rows missing)".into()
                },
                max_abs: f64::INFINITY,
                max_rel: f64::INFINITY,
                snr_db: None,
                tolerance: "-".into(),
                status: Status::Fail,
                note: Some(format!(
                    "cargo test failed:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )),
                ms: 0.0,
            });
        }
        for r in &crate_rows {
            if !args.quiet || !r.passed() {
                println!("{}", r.line());
            }
        }
        let failed = crate_rows.iter().any(|r| !r.passed());
        rows.extend(crate_rows);
        if failed && args.first_fail {
            break;
        }
    }
    let failed = rows.iter().filter(|r| !r.passed()).count();
    println!(
        "\n{} rows: {} pass, {} fail or missing (fixtures: {})",
        rows.len(),
        rows.len() - failed,
        failed,
        fixtures.display()
    );
    if rows.is_empty() {
        println!("no parity rows ran: check --only");
        return Ok(1);
    }
    Ok(if failed == 0 { 0 } else { 1 })
}
