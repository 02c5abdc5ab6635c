//! `cargo xtask test-aarch64`: cross-build the parity suites for `aarch64-unknown-linux-gnu`
//! and run them under qemu-user, so that the aarch64 code paths execute and are compared with
//! the fixtures, not only compiled (`check-targets` does that): candle's NEON kernels (its
//! element-wise and reduction ops; the quantized dot products, which pick i8mm, dotprod or
//! plain NEON at run time), gemm's NEON microkernels, and this project's kernels, which on
//! aarch64 are their portable Rust versions (there are no hand-written aarch64 kernels; LLVM
//! vectorizes the portable ones to NEON).
//!
//! It needs Debian's cross toolchain and emulator (`gcc-aarch64-linux-gnu`,
//! `libc6-dev-arm64-cross`, `qemu-user`) and the target's standard library (`rustup target
//! add`); it installs what is missing unless `--no-install`. The build goes to its own target
//! directory (`target-aarch64`), so that it never holds the lock of the native `target`.
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const TARGET: &str = "aarch64-unknown-linux-gnu";
/// The cross linker Debian's `gcc-aarch64-linux-gnu` installs.
const LINKER: &str = "aarch64-linux-gnu-gcc";
/// Where Debian's cross libc lives; qemu loads the dynamic loader and libc from there (`-L`).
const SYSROOT: &str = "/usr/aarch64-linux-gnu";
/// The crates whose parity suites (`tests/parity*.rs`) run.
const CRATES: &[&str] = &[
    "chatterbox-dsp",
    "chatterbox-speaker",
    "chatterbox-t3",
    "chatterbox-s3gen",
    "chatterbox-vocoder",
    "chatterbox-watermark",
];

/// Other test targets run with the parity suites: t3's quantized backbone against f32 (candle's
/// quantized matmul, whose Q8_0 and Q4_K dot products pick i8mm, dotprod or NEON at run time).
/// (crate, test target); each is built only when its crate is.
const EXTRA_TESTS: &[(&str, &str)] = &[("chatterbox-t3", "quantize")];

/// Tests that cannot run on some emulated CPUs: passed to their binary as `--skip NAME` (with
/// `--exact`) on a CPU model that lacks `unless`, with the reason printed.
struct Skip {
    krate: &'static str,
    test_bin: &'static str,
    names: &'static [&'static str],
    /// The CPU feature without which the tests cannot pass.
    unless: &'static str,
    why: &'static str,
}

/// candle 0.11.1's quantized matmul on aarch64: its repacked kernels are taken only when the CPU
/// has dotprod (or i8mm), and the fallback it takes otherwise (k_quants' `vec_dot` and
/// `vec_dot_4` for Q8_0, Q4_0 and Q3_K..Q8_K, in quantized/neon.rs) issues SDOT without asking,
/// so every Armv8.0 CPU (Cortex-A53/A72, Graviton 1, Raspberry Pi 3 and 4) died with SIGILL in
/// `vdotq_s32_pair` from `vec_dot_4_q8_0_q8_0` at the first q8 or q4 product. Since then t3
/// refuses q8 and q4 on such CPUs with a typed error at load, which every quantize test meets.
const SKIPS: &[Skip] = &[Skip {
    krate: "chatterbox-t3",
    test_bin: "quantize",
    names: &[
        "q8_logits_of_the_tiny_checkpoint_stay_close_to_f32",
        "the_exact_format_changes_nothing",
        "every_format_on_a_wide_llama_against_f32",
        "quantizing_twice_or_a_half_precision_model_is_a_typed_error",
        "batched_requests_with_q8_weights_draw_their_solo_tokens",
    ],
    unless: "dotprod",
    why: "q8 and q4 need dotprod: candle 0.11.1's non-repacked quantized kernels \
          (quantized/neon.rs, vec_dot_4_q8_0_q8_0 -> vdotq_s32_pair) issue SDOT unconditionally \
          (SIGILL on Armv8.0 CPUs: Cortex-A53/A72, Graviton 1, Raspberry Pi 4), and t3 refuses \
          q8 and q4 at load on such CPUs",
}];

/// A parity row that misses its tolerance on aarch64 for a known reason that is not a kernel
/// error. The row is still computed and printed; the run accepts it while its error stays
/// within `bound` (the same measure as the row's tolerance).
struct KnownRow {
    component: &'static str,
    case: &'static str,
    bound: f64,
    why: &'static str,
}

const KNOWN_ROWS: &[KnownRow] = &[KnownRow {
    component: "watermark",
    case: "magphase/phase",
    bound: 5e-3,
    why: "the first STFT frame of a reflect-padded signal is symmetric, so its spectrum is \
          exactly real and every phase there is 0 or pi; bin 1016 of that frame has |z| = \
          1.7e-4 against a frame sum |w x| of 86, and an f32 FFT's rounding of its zero \
          imaginary part (2.4e-7, 3e-9 of the frame) is worth 1.4e-3 rad on rustfft's NEON \
          path and 3.5e-4 rad in the torch reference (the f64 DFT gives exactly 0); the \
          magnitude and the resynthesised signal rows of the case pass",
}];

/// The known deviation that covers `r`, if it is within its bound.
fn known(r: &chatterbox_testkit::Row) -> Option<&'static KnownRow> {
    KNOWN_ROWS
        .iter()
        .find(|k| k.component == r.component && k.case == r.case && r.max_abs <= k.bound)
}

#[derive(clap::Args)]
pub struct TestAarch64Args {
    /// qemu CPU model to emulate (`qemu-aarch64 -cpu help` lists them); repeat to run every
    /// suite once per model. Without it: everything on `max` and `cortex-a72`, and t3's
    /// quantize test on `neoverse-n1` (candle's quantized matmul and gemm's f16 kernels choose
    /// by CPU feature at run time).
    #[arg(long = "cpu")]
    cpus: Vec<String>,
    /// Only these crates' suites (default: dsp, speaker, t3, s3gen, vocoder, watermark).
    #[arg(long = "crate")]
    crates: Vec<String>,
    /// The cross build's target folder (default: target-aarch64 in the workspace).
    #[arg(long)]
    target_dir: Option<PathBuf>,
    /// Build the test binaries and stop.
    #[arg(long)]
    build_only: bool,
    /// Fail instead of installing missing packages (apt-get) or the target (rustup).
    #[arg(long)]
    no_install: bool,
}

/// The default CPU models, and the test binaries each runs (`None`: all): `max` has every
/// extension qemu implements (fp16, dotprod, i8mm, bf16, SVE2), `cortex-a72` is plain Armv8.0
/// NEON, and `neoverse-n1` (fp16 and dotprod, no i8mm) adds candle's dotprod-only quantized
/// tiles, the one kernel choice the other two miss (the rest would repeat `max`'s).
const DEFAULT_MODELS: &[(&str, Option<&'static [&'static str]>)] = &[
    ("max", None),
    ("cortex-a72", None),
    ("neoverse-n1", Some(&["chatterbox-t3/quantize"])),
];

/// An emulated CPU model: its features as the target's std detects them, and the test binaries
/// it runs (`None`: all).
struct Model {
    name: String,
    features: Vec<String>,
    only: Option<&'static [&'static str]>,
}

/// One thing the run needs, how to find it, and the Debian package that provides it.
struct Need {
    what: &'static str,
    /// Executables looked up in `PATH` or absolute files; any one is enough.
    any_of: &'static [&'static str],
    package: &'static str,
}

const NEEDS: &[Need] = &[
    Need {
        what: "the aarch64 cross linker",
        any_of: &[LINKER],
        package: "gcc-aarch64-linux-gnu",
    },
    Need {
        what: "the aarch64 glibc (link and run time)",
        any_of: &[
            "/usr/aarch64-linux-gnu/lib/libc.so",
            "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1",
        ],
        package: "libc6-dev-arm64-cross",
    },
    Need {
        what: "the aarch64 user-mode emulator",
        any_of: &["qemu-aarch64", "qemu-aarch64-static"],
        package: "qemu-user",
    },
];

/// The first of `names` found: an absolute path that exists, or an executable in `PATH`.
fn find(names: &[&str]) -> Option<PathBuf> {
    names.iter().find_map(|n| {
        let p = Path::new(n);
        if p.is_absolute() {
            return p.exists().then(|| p.to_path_buf());
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|c| c.is_file())
    })
}

/// Whether every path of a need is present (the libc need lists files that must all exist).
fn present(n: &Need) -> bool {
    if n.any_of.iter().all(|p| p.starts_with('/')) {
        n.any_of.iter().all(|p| Path::new(p).exists())
    } else {
        find(n.any_of).is_some()
    }
}

fn apt_install(packages: &[&str]) -> bool {
    let install = || {
        let mut cmd = Command::new("apt-get");
        cmd.args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive");
        eprintln!("+ {cmd:?}");
        cmd.status().is_ok_and(|s| s.success())
    };
    if install() {
        return true;
    }
    // A fresh machine's package lists may be missing or stale.
    eprintln!("+ apt-get update -q");
    let updated = Command::new("apt-get")
        .args(["update", "-q"])
        .status()
        .is_ok_and(|s| s.success());
    updated && install()
}

/// Installs the missing cross toolchain and emulator with apt-get, or says what is missing.
fn ensure_tools(install: bool) -> Result<()> {
    let missing: Vec<&Need> = NEEDS.iter().filter(|n| !present(n)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let packages: Vec<&str> = missing.iter().map(|n| n.package).collect();
    let list = missing
        .iter()
        .map(|n| format!("{} ({}, Debian package {})", n.what, n.any_of[0], n.package))
        .collect::<Vec<_>>()
        .join("; ");
    if !install {
        bail!(
            "missing: {list}. Install them with `apt-get install {}`",
            packages.join(" ")
        );
    }
    if find(&["apt-get"]).is_none() {
        bail!(
            "missing: {list}. This is not a Debian-like system (no apt-get): install an \
             aarch64-linux-gnu gcc and glibc and qemu's user-mode aarch64 emulator with the \
             system's package manager (the glibc must be under {SYSROOT})"
        );
    }
    if !apt_install(&packages) {
        bail!(
            "`apt-get install {}` failed (it needs root and a reachable Debian mirror); \
             missing: {list}",
            packages.join(" ")
        );
    }
    if let Some(n) = NEEDS.iter().find(|n| !present(n)) {
        bail!(
            "{} is still missing after installing {} (looked for {})",
            n.what,
            n.package,
            n.any_of.join(", ")
        );
    }
    Ok(())
}

/// The features the aarch64 libraries dispatch on, as the target's std detects them.
const PROBE: &str = r#"
use std::arch::is_aarch64_feature_detected as has;
fn main() {
    let mut on = Vec::new();
    macro_rules! f { ($($n:tt),*) => { $( if has!($n) { on.push($n); } )* } }
    f!("neon", "fp16", "fhm", "fcma", "dotprod", "i8mm", "bf16", "sve", "sve2", "rdm", "lse");
    println!("{}", on.join(" "));
}
"#;

/// Cross-compiles the feature probe (plain rustc, std only) into `dir`.
fn build_probe(dir: &Path) -> Result<PathBuf> {
    let src = dir.join("probe.rs");
    let bin = dir.join("cpu-probe");
    std::fs::write(&src, PROBE).with_context(|| format!("writing {}", src.display()))?;
    let status = Command::new("rustc")
        .current_dir(crate::root())
        .args(["--edition", "2021", "-O", "--target", TARGET, "-C"])
        .arg(format!("linker={LINKER}"))
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .context("cannot run rustc")?;
    if !status.success() {
        bail!("cross-compiling the CPU feature probe failed ({status})");
    }
    Ok(bin)
}

/// What the emulated CPU's features make the libraries choose (candle 0.11, gemm 0.19).
fn kernels(features: &[&str]) -> Vec<String> {
    let has = |f: &str| features.contains(&f);
    let q = if has("i8mm") {
        "repacked blocks, i8mm (smmla) tiles from 4 rows, dotprod (sdot) for one row"
    } else if has("dotprod") {
        "repacked blocks, dotprod (sdot) tiles and rows"
    } else {
        "k_quants' vec_dot, which issues SDOT all the same (SIGILL: see the skipped tests)"
    };
    vec![
        "chatterbox (t3, s3gen, speaker, vocoder): portable Rust, compiled to NEON \
         (chatterbox_cpu::kernel_level() = \"portable\" off x86-64; its unit test checks it)"
            .into(),
        "candle: NEON element-wise, reduction and softmax kernels (always on aarch64)".into(),
        format!("candle quantized dot products: {q}"),
        format!(
            "gemm: f32/f64 NEON microkernels; f16 {}",
            if has("fp16") {
                "native fp16 NEON"
            } else {
                "through f32 (no fp16)"
            }
        ),
    ]
}

/// A built test binary.
struct TestBin {
    krate: String,
    /// The test target's name (`parity`, `parity_flow`, ...; `lib` for unit tests).
    name: String,
    exe: PathBuf,
    /// The package's folder: cargo runs tests there.
    dir: PathBuf,
}

/// `cargo test --no-run` for the target; returns the test executables it reports.
fn build(target_dir: &Path, packages: &[&str], selection: &[&str]) -> Result<Vec<TestBin>> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(crate::root())
        .args(["test", "--no-run", "--target", TARGET])
        .args(["--message-format", "json-render-diagnostics"]);
    for p in packages {
        cmd.args(["--package", p]);
    }
    cmd.args(selection)
        .env("CARGO_TARGET_DIR", target_dir)
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", LINKER)
        .env("CC_aarch64_unknown_linux_gnu", LINKER)
        .stdout(Stdio::piped());
    eprintln!("+ {cmd:?}");
    let mut child = cmd.spawn().context("cannot run cargo")?;
    let mut bins = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line?) else {
                continue;
            };
            if v["reason"] != "compiler-artifact" || v["profile"]["test"] != true {
                continue;
            }
            let (Some(exe), Some(manifest)) =
                (v["executable"].as_str(), v["manifest_path"].as_str())
            else {
                continue;
            };
            let dir = Path::new(manifest)
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            let krate = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let kind = v["target"]["kind"][0].as_str().unwrap_or("");
            let name = if kind == "lib" {
                "lib".to_string()
            } else {
                v["target"]["name"].as_str().unwrap_or("?").to_string()
            };
            bins.push(TestBin {
                krate,
                name,
                exe: PathBuf::from(exe),
                dir,
            });
        }
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        bail!("the cross build failed ({status})");
    }
    Ok(bins)
}

/// libtest's counts, summed over its `test result:` lines.
#[derive(Default, Clone, Copy)]
struct Counts {
    passed: usize,
    failed: usize,
    ignored: usize,
    filtered: usize,
}

impl Counts {
    fn parse(output: &str) -> Option<Counts> {
        let mut total: Option<Counts> = None;
        for line in output.lines() {
            let Some(rest) = line.strip_prefix("test result: ") else {
                continue;
            };
            let c = total.get_or_insert_with(Counts::default);
            for part in rest.split(['.', ';']) {
                let mut words = part.split_whitespace();
                let (Some(n), Some(what)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(n) = n.parse::<usize>() else {
                    continue;
                };
                match what {
                    "passed" => c.passed += n,
                    "failed" => c.failed += n,
                    "ignored" => c.ignored += n,
                    "filtered" => c.filtered += n,
                    _ => {}
                }
            }
        }
        total
    }

    fn add(&mut self, o: Counts) {
        self.passed += o.passed;
        self.failed += o.failed;
        self.ignored += o.ignored;
        self.filtered += o.filtered;
    }
}

/// The outcome of one test binary on one CPU model.
struct Outcome {
    label: String,
    ok: bool,
    counts: Counts,
    rows: usize,
    bad_rows: Vec<chatterbox_testkit::Row>,
    /// Tests left out on this CPU model ([`SKIPS`]).
    skipped: Vec<(&'static str, &'static str)>,
    secs: f64,
}

fn run_bin(
    qemu: &Path,
    (cpu, features): (&str, &[String]),
    bin: &TestBin,
    logs: &Path,
) -> Result<Outcome> {
    let label = format!("{}/{}", bin.krate, bin.name);
    let stem = format!("{}-{}-{cpu}", bin.krate, bin.name);
    let report = logs.join(format!("{stem}.jsonl"));
    let log = logs.join(format!("{stem}.log"));
    let _ = std::fs::remove_file(&report);
    let mut cmd = Command::new(qemu);
    cmd.current_dir(&bin.dir)
        .args(["-L", SYSROOT, "-cpu", cpu])
        .arg(&bin.exe)
        .env("CHATTERBOX_PARITY_REPORT", &report);
    let mut skipped = Vec::new();
    for s in SKIPS {
        if s.krate == bin.krate && s.test_bin == bin.name && !features.iter().any(|f| f == s.unless)
        {
            for name in s.names {
                cmd.args(["--skip", name]);
                skipped.push((*name, s.why));
            }
        }
    }
    if !skipped.is_empty() {
        // the skips name whole tests, not substrings (libtest takes the flag once)
        cmd.arg("--exact");
    }
    eprintln!("+ (cd {}; {cmd:?})", bin.dir.display());
    let start = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {}", qemu.display()))?;
    let secs = start.elapsed().as_secs_f64();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&log, &text).with_context(|| format!("writing {}", log.display()))?;
    let rows: Vec<chatterbox_testkit::Row> = std::fs::read_to_string(&report)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let bad_rows: Vec<_> = rows.iter().filter(|r| !r.passed()).cloned().collect();
    let counts = Counts::parse(&text);
    // A parity suite is one test that fails when any of its rows does: a run whose failed
    // tests are exactly the suites holding known rows, and whose bad rows are all known, is
    // accepted.
    let mut suites: Vec<&str> = bad_rows.iter().map(|r| r.component.as_str()).collect();
    suites.sort_unstable();
    suites.dedup();
    let only_known = !bad_rows.is_empty()
        && bad_rows.iter().all(|r| known(r).is_some())
        && counts.is_some_and(|c| c.failed == suites.len());
    let ok = counts.is_some() && (out.status.success() || only_known);
    if !ok && !bad_rows.is_empty() && counts.is_some() {
        eprintln!(
            "   {label}: failing parity rows (above); log in {}",
            log.display()
        );
    } else if !ok {
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        eprintln!(
            "   {label} failed ({}); the last lines of {}:",
            out.status,
            log.display()
        );
        for l in tail.into_iter().rev() {
            eprintln!("   | {l}");
        }
    }
    Ok(Outcome {
        label,
        ok,
        counts: counts.unwrap_or_default(),
        rows: rows.len(),
        bad_rows,
        skipped,
        secs,
    })
}

pub fn run(args: TestAarch64Args) -> Result<i32> {
    let packages: Vec<&str> = if args.crates.is_empty() {
        CRATES.to_vec()
    } else {
        for c in &args.crates {
            if !CRATES.contains(&c.as_str()) {
                bail!("unknown crate {c}: the suites are {}", CRATES.join(", "));
            }
        }
        args.crates.iter().map(String::as_str).collect()
    };
    crate::targets::ensure_target(TARGET, !args.no_install)?;
    ensure_tools(!args.no_install)?;
    let qemu =
        find(&["qemu-aarch64", "qemu-aarch64-static"]).context("qemu-aarch64 is not in PATH")?;

    let target_dir = args
        .target_dir
        .clone()
        .unwrap_or_else(|| crate::root().join("target-aarch64"));
    let logs = target_dir.join("qemu-runs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;

    // How it runs: the emulator, and per CPU model the features and the kernels they select.
    let version = Command::new(&qemu)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    println!("emulator: {} ({version})", qemu.display());
    let probe = build_probe(&logs)?;
    let plan: Vec<(String, Option<&'static [&'static str]>)> = if args.cpus.is_empty() {
        DEFAULT_MODELS
            .iter()
            .map(|(m, only)| (m.to_string(), *only))
            .collect()
    } else {
        args.cpus.iter().map(|m| (m.clone(), None)).collect()
    };
    let mut models: Vec<Model> = Vec::new();
    for (cpu, only) in &plan {
        let out = Command::new(&qemu)
            .args(["-L", SYSROOT, "-cpu", cpu])
            .arg(&probe)
            .output()
            .context("running the CPU feature probe")?;
        if !out.status.success() {
            bail!(
                "qemu cannot run the CPU model {cpu}: {} (`{} -cpu help` lists the models)",
                String::from_utf8_lossy(&out.stderr).trim(),
                qemu.display()
            );
        }
        let features = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let list: Vec<&str> = features.split_whitespace().collect();
        println!("cpu {cpu}: features {features}");
        for k in kernels(&list) {
            println!("  {k}");
        }
        if let Some(only) = only {
            println!("  runs only {}", only.join(", "));
        }
        models.push(Model {
            name: cpu.clone(),
            features: list.iter().map(|f| f.to_string()).collect(),
            only: *only,
        });
    }

    let start = Instant::now();
    let mut selection = vec!["--test", "parity*"];
    for (krate, test) in EXTRA_TESTS {
        if packages.contains(krate) {
            selection.extend(["--test", test]);
        }
    }
    let mut bins = build(&target_dir, &packages, &selection)?;
    // chatterbox-cpu's unit tests: which kernel versions an aarch64 CPU gets.
    bins.extend(build(&target_dir, &["chatterbox-cpu"], &["--lib"])?);
    bins.sort_by(|a, b| (&a.krate, &a.name).cmp(&(&b.krate, &b.name)));
    let build_secs = start.elapsed().as_secs_f64();
    println!(
        "cross build: {} test binaries in {build_secs:.0} s ({})",
        bins.len(),
        target_dir.display()
    );
    if args.build_only {
        return Ok(0);
    }

    let mut outcomes = Vec::new();
    for Model {
        name: cpu,
        features,
        only,
    } in &models
    {
        println!("\n== qemu -cpu {cpu}");
        for bin in &bins {
            let label = format!("{}/{}", bin.krate, bin.name);
            if only.is_some_and(|o| !o.contains(&label.as_str())) {
                continue;
            }
            let o = run_bin(&qemu, (cpu, features), bin, &logs)?;
            println!(
                "{:<36} {:>4} passed {:>3} failed {:>3} ignored {:>4} parity rows {:>7.1} s  {}",
                o.label,
                o.counts.passed,
                o.counts.failed,
                o.counts.ignored,
                o.rows,
                o.secs,
                if o.ok { "ok" } else { "FAILED" }
            );
            for r in &o.bad_rows {
                println!("  {}", r.line());
                if let Some(k) = known(r) {
                    println!(
                        "    known on aarch64, accepted up to {:e}: {}",
                        k.bound, k.why
                    );
                }
            }
            if let Some((_, why)) = o.skipped.first() {
                let names: Vec<&str> = o.skipped.iter().map(|(n, _)| *n).collect();
                println!("  skipped {}: {why}", names.join(", "));
            }
            outcomes.push((cpu.clone(), o));
        }
    }

    let mut total = Counts::default();
    let (mut rows, mut accepted, mut bad) = (0, 0, 0);
    let mut run_secs = 0.0;
    let mut failed = Vec::new();
    for (cpu, o) in &outcomes {
        total.add(o.counts);
        rows += o.rows;
        accepted += o.bad_rows.iter().filter(|r| known(r).is_some()).count();
        bad += o.bad_rows.iter().filter(|r| known(r).is_none()).count();
        run_secs += o.secs;
        if !o.ok {
            failed.push(format!("{} (-cpu {cpu})", o.label));
        }
    }
    println!(
        "\ntest-aarch64 on {} CPU model(s): {} tests passed, {} failed ({} of them only by \
         known rows), {} ignored, {} skipped (above); {} parity rows: {} pass, {} known deviations accepted, {} \
         fail; build {build_secs:.0} s, qemu runs {run_secs:.0} s; logs in {}",
        models.len(),
        total.passed,
        total.failed,
        outcomes
            .iter()
            .filter(|(_, o)| o.ok)
            .map(|(_, o)| o.counts.failed)
            .sum::<usize>(),
        total.ignored,
        outcomes.iter().map(|(_, o)| o.skipped.len()).sum::<usize>(),
        rows,
        rows - accepted - bad,
        accepted,
        bad,
        logs.display()
    );
    if failed.is_empty() {
        Ok(0)
    } else {
        println!("failed: {}", failed.join(", "));
        Ok(1)
    }
}
