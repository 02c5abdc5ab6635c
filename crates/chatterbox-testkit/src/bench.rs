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
    times.sort_by(f64::total_cmp);
    Timing {
        median_ms: times[times.len() / 2],
        min_ms: times[0],
        iters: times.len(),
    }
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
