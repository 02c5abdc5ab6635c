//! Benchmark timing and the JSON record every bench writes (`cargo xtask bench` merges them).
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use std::hint::black_box;

/// Timing statistics of repeated runs, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Timing {
    /// Median over the timed iterations.
    pub median_ms: f64,
    /// Fastest iteration.
    pub min_ms: f64,
    /// Number of timed iterations.
    pub iters: usize,
}

/// Runs `f` `warmup` times untimed, then until both `min_iters` runs and `min_secs` seconds
/// have passed, and returns the statistics. `f` must finish its work (device sync included)
/// before returning.
pub fn time_it(warmup: usize, min_iters: usize, min_secs: f64, mut f: impl FnMut()) -> Timing {
    for _ in 0..warmup {
        f();
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < min_iters || start.elapsed().as_secs_f64() < min_secs {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if times.len() >= 10_000 {
            break;
        }
    }
    Timing::from_samples(&mut times)
}

impl Timing {
    /// Median, minimum and count of `times_ms` (sorted in place); all NaN and 0 for none.
    pub fn from_samples(times_ms: &mut [f64]) -> Timing {
        times_ms.sort_by(f64::total_cmp);
        Timing {
            median_ms: times_ms
                .get(times_ms.len() / 2)
                .copied()
                .unwrap_or(f64::NAN),
            min_ms: times_ms.first().copied().unwrap_or(f64::NAN),
            iters: times_ms.len(),
        }
    }
}

/// Writes `records` as JSON lines where `cargo xtask bench` reads them: appended to the file
/// `$CHATTERBOX_BENCH_OUT`, else to standard output.
pub fn emit_records(records: &[BenchRecord]) -> std::io::Result<()> {
    use std::io::Write;
    let mut out: Box<dyn Write> = match std::env::var_os("CHATTERBOX_BENCH_OUT") {
        Some(path) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    for r in records {
        writeln!(out, "{}", serde_json::to_string(r)?)?;
    }
    out.flush()
}

/// One measured stage, as written by the Rust benches and the Python reference script.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRecord {
    /// Bench group (`dsp`, `speaker`, ...).
    pub group: String,
    /// Stage name, identical on the Rust and the reference side (`resample_44k1_to_24k_37s`).
    pub stage: String,
    /// `rust` or `reference`.
    pub implementation: String,
    /// `cpu`, `cuda`, ...
    pub device: String,
    /// Threads the implementation was allowed.
    pub threads: usize,
    /// The timing.
    #[serde(flatten)]
    pub timing: Timing,
    /// Free-form shape description (`37.7 s @ 44.1 kHz`).
    #[serde(default)]
    pub shape: String,
}

/// The records of one bench run: each stage pushed as it is measured (and shown on standard
/// error, its name in a column `width` wide), all emitted at the end.
#[derive(Debug, Clone)]
pub struct BenchRun {
    /// Bench group of every record.
    pub group: String,
    /// Device of every record.
    pub device: String,
    /// Threads of every record.
    pub threads: usize,
    /// Width of the stage column on standard error.
    pub width: usize,
    /// The records so far.
    pub records: Vec<BenchRecord>,
}

impl BenchRun {
    /// A run with no records yet.
    pub fn new(group: &str, device: &str, threads: usize, width: usize) -> Self {
        BenchRun {
            group: group.into(),
            device: device.into(),
            threads,
            width,
            records: Vec::new(),
        }
    }

    /// A stage timed over repeated runs: the median, minimum and count of `times_ms`.
    pub fn push_times(&mut self, stage: &str, shape: String, times_ms: &mut [f64]) {
        let timing = Timing::from_samples(times_ms);
        eprintln!(
            "{stage:<w$} {:>10.2} (median of {})  {shape}",
            timing.median_ms,
            timing.iters,
            w = self.width
        );
        self.push(stage, shape, timing);
    }

    /// A stage timed by [`time_it`].
    pub fn push_timing(&mut self, stage: &str, shape: impl Into<String>, timing: Timing) {
        eprintln!(
            "{stage:<w$} {:>9.3} ms (median of {})",
            timing.median_ms,
            timing.iters,
            w = self.width
        );
        self.push(stage, shape.into(), timing);
    }

    /// A stage measured once (a ratio or megabytes, as its name says), stored as the timing.
    pub fn push_value(&mut self, stage: &str, shape: String, value: f64) {
        eprintln!("{stage:<w$} {value:>12.2}  {shape}", w = self.width);
        self.push(stage, shape, Timing::from_samples(&mut [value]));
    }

    fn push(&mut self, stage: &str, shape: String, timing: Timing) {
        self.records.push(BenchRecord {
            group: self.group.clone(),
            stage: stage.into(),
            implementation: "rust".into(),
            device: self.device.clone(),
            threads: self.threads,
            timing,
            shape,
        });
    }

    /// The records, as [`emit_records`] writes them.
    pub fn emit(&self) -> std::io::Result<()> {
        emit_records(&self.records)
    }
}

/// One memory reading of a bench, in MB (10^6 bytes).
#[derive(Debug, Clone, Copy)]
pub struct MemorySample {
    /// The process's resident set (NaN where the platform does not tell).
    pub rss: f64,
    /// The device's used memory; `None` on the CPU.
    pub gpu: Option<f64>,
}

impl MemorySample {
    /// From byte counts.
    pub fn from_bytes(rss: Option<u64>, gpu_used: Option<u64>) -> Self {
        const MB: f64 = 1e6;
        MemorySample {
            rss: rss.map_or(f64::NAN, |b| b as f64 / MB),
            gpu: gpu_used.map(|b| b as f64 / MB),
        }
    }

    /// `", GPU <n> MB"`, or nothing without a device reading: the tail of a progress line.
    pub fn gpu_text(&self) -> String {
        self.gpu
            .map_or(String::new(), |g| format!(", GPU {g:.0} MB"))
    }
}

/// A bench setting: `$name` as a whole number, else `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A bench setting: `$name` as a number, else `default`.
pub fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// `$env`, else `/tmp/chatterbox-bench-<variant>`: where a bench finds its checkpoint.
pub fn checkpoint_dir(env: &str, variant: &str) -> PathBuf {
    std::env::var_os(env).map_or_else(
        || PathBuf::from(format!("/tmp/chatterbox-bench-{variant}")),
        PathBuf::from,
    )
}

/// `dir`, holding a full-size random checkpoint of `variant`: written there first by
/// `parity/checkpoints.py` (the parity venv) when `marker` is not a file there. The benches
/// and their reference scripts (`parity/bench/`) use the same directories.
pub fn full_size_checkpoint(dir: PathBuf, variant: &str, marker: &str) -> std::io::Result<PathBuf> {
    if !dir.join(marker).is_file() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        eprintln!(
            "writing a full-size random {variant} checkpoint to {}",
            dir.display()
        );
        let status = std::process::Command::new(root.join("parity/.venv/bin/python"))
            .arg(root.join("parity/checkpoints.py"))
            .args(["--variant", variant, "--size", "full", "--out"])
            .arg(&dir)
            .status()?;
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "parity/checkpoints.py failed ({status})"
            )));
        }
    }
    Ok(dir)
}

/// The worst playback margin (ms) of streamed pieces after the first: a listener starts playing
/// at the first piece, so the piece at sample offset `o` is due `o / sample_rate` after it;
/// the margin is how long before that it arrived (negative: the audio ran dry, an underrun).
/// `pieces`: arrival (ms), sample offset and sample count of each; empty pieces do not count,
/// and with one piece the margin is 0.
pub fn underrun_margin(pieces: &[(f64, usize, usize)], sample_rate: u32) -> f64 {
    let Some(&(first, _, _)) = pieces.first() else {
        return 0.0;
    };
    pieces
        .iter()
        .skip(1)
        .filter(|p| p.2 > 0)
        .map(|&(at, offset, _)| first + offset as f64 * 1e3 / f64::from(sample_rate) - at)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))))
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::{underrun_margin, MemorySample, Timing};

    #[test]
    fn timing_from_samples_is_median_min_and_count() {
        let t = Timing::from_samples(&mut [5.0, 1.0, 3.0, 9.0]);
        assert_eq!((t.median_ms, t.min_ms, t.iters), (5.0, 1.0, 4));
        let t = Timing::from_samples(&mut [2.0, 7.0, 4.0]);
        assert_eq!((t.median_ms, t.min_ms, t.iters), (4.0, 2.0, 3));
        let t = Timing::from_samples(&mut []);
        assert!(t.median_ms.is_nan() && t.min_ms.is_nan() && t.iters == 0);
    }

    #[test]
    fn underrun_margin_is_the_worst_lead_of_the_later_pieces() {
        // at 24 kHz, 2400 samples play for 100 ms
        let pieces = [
            (100.0, 0, 2400),
            (150.0, 2400, 2400),
            (330.0, 4800, 2400),
            (900.0, 7200, 0),
        ];
        assert_eq!(underrun_margin(&pieces, 24_000), -30.0);
        assert_eq!(underrun_margin(&pieces[..2], 24_000), 50.0);
        assert_eq!(underrun_margin(&pieces[..1], 24_000), 0.0);
        assert_eq!(underrun_margin(&[], 24_000), 0.0);
    }

    #[test]
    fn memory_samples_are_in_megabytes() {
        let s = MemorySample::from_bytes(Some(250_000_000), Some(1_500_000_000));
        assert_eq!((s.rss, s.gpu), (250.0, Some(1500.0)));
        assert_eq!(s.gpu_text(), ", GPU 1500 MB");
        let cpu = MemorySample::from_bytes(None, None);
        assert!(cpu.rss.is_nan() && cpu.gpu.is_none() && cpu.gpu_text().is_empty());
    }
}
