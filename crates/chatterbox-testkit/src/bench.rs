//! Benchmark timing and the JSON record every bench writes (`cargo xtask bench` merges them).
use serde::{Deserialize, Serialize};
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

#[cfg(test)]
mod tests {
    use super::Timing;

    #[test]
    fn timing_from_samples_is_median_min_and_count() {
        let t = Timing::from_samples(&mut [5.0, 1.0, 3.0, 9.0]);
        assert_eq!((t.median_ms, t.min_ms, t.iters), (5.0, 1.0, 4));
        let t = Timing::from_samples(&mut [2.0, 7.0, 4.0]);
        assert_eq!((t.median_ms, t.min_ms, t.iters), (4.0, 2.0, 3));
        let t = Timing::from_samples(&mut []);
        assert!(t.median_ms.is_nan() && t.min_ms.is_nan() && t.iters == 0);
    }
}
