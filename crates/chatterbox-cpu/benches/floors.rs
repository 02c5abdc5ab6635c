//! `cargo xtask bench floors --no-reference`: the machine's floors that issue 41's CPU goals
//! are measured against (no reference side: these are the hardware's numbers, not a stage).
//!
//! - `triad_gbs_<n>t`: memory bandwidth, STREAM's triad `a = b + s * c` over three arrays of
//!   64 MiB of f32 (far past any cache) on `n` threads (1 and every core), counted as STREAM
//!   counts it (three arrays a pass, write-allocate traffic not counted), best pass of 10.
//! - `fma_f32_gflops_<n>t`: f32 fused multiply-adds in registers (AVX-512F where the CPU has
//!   it, else AVX2+FMA; 2 flops each), the compute peak of an f32 GEMM.
//! - `vnni_int8_gops_<n>t`: AVX-512 VNNI `vpdpbusd` in registers (u8 x i8 dot products of 4
//!   into i32: 8 ops per lane each), the peak of an int8 GEMM; absent without AVX-512 VNNI.
//! - `bf16_gflops_<n>t`: AVX-512 BF16 `vdpbf16ps` in registers (pairs of bf16 products into
//!   f32: 4 flops per lane each); absent without AVX-512 BF16.
//!
//! Each value is stored in the record's `*_ms` fields (best and median of the timed runs); the
//! shape names the unit. Off x86-64 only the triad runs.
use anyhow::Context as _;
use chatterbox_testkit::{BenchRecord, Timing};
use std::hint::black_box;
use std::time::Instant;

/// f32 elements per triad array (64 MiB).
const TRIAD_LEN: usize = 16 << 20;
/// Register-resident iterations per timed kernel call.
#[cfg(target_arch = "x86_64")]
const ITERS: usize = 20_000_000;

fn record(records: &mut Vec<BenchRecord>, stage: String, threads: usize, shape: &str, v: &[f64]) {
    let mut v = v.to_vec();
    v.sort_by(|a, b| b.total_cmp(a));
    let best = v.first().copied().unwrap_or(f64::NAN);
    let median = v.get(v.len() / 2).copied().unwrap_or(f64::NAN);
    eprintln!("{stage:<24} {best:>10.1}  (median {median:.1})  {shape}");
    records.push(BenchRecord {
        group: "floors".into(),
        stage,
        implementation: "rust".into(),
        device: "cpu".into(),
        threads,
        timing: Timing {
            median_ms: median,
            min_ms: best,
            iters: v.len(),
        },
        shape: shape.into(),
    });
}

/// GB/s of the best triad pass on `threads` threads, each on its own slice.
fn triad(threads: usize) -> Vec<f64> {
    let mut a = vec![0f32; TRIAD_LEN];
    let b = vec![1f32; TRIAD_LEN];
    let c = vec![2f32; TRIAD_LEN];
    let per = TRIAD_LEN.div_ceil(threads);
    let mut out = Vec::new();
    for _ in 0..10 {
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for ((a, b), c) in a.chunks_mut(per).zip(b.chunks(per)).zip(c.chunks(per)) {
                s.spawn(move || {
                    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
                        *a = b + 3.0 * c;
                    }
                });
            }
        });
        let secs = t0.elapsed().as_secs_f64();
        black_box(&a);
        out.push(3.0 * (TRIAD_LEN * 4) as f64 / secs / 1e9);
    }
    out
}

/// Giga-operations a second of `kernel` (which does `ops` operations per call) on `threads`
/// threads at once, 5 timed runs.
#[cfg(target_arch = "x86_64")]
fn peak(threads: usize, ops: f64, kernel: fn() -> f32) -> Vec<f64> {
    (0..5)
        .map(|_| {
            let t0 = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| black_box(kernel()));
                }
            });
            threads as f64 * ops / t0.elapsed().as_secs_f64() / 1e9
        })
        .collect()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::ITERS;
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// 10 independent chains of AVX-512 FMAs (16 lanes, 2 flops each).
    #[target_feature(enable = "avx512f")]
    unsafe fn fma512() -> f32 {
        let m = _mm512_set1_ps(black_box(0.999_999));
        let a = _mm512_set1_ps(black_box(1e-7));
        let mut acc = [_mm512_set1_ps(1.0); 10];
        for _ in 0..ITERS {
            for x in &mut acc {
                *x = _mm512_fmadd_ps(*x, m, a);
            }
        }
        let mut sum = acc[0];
        for x in &acc[1..] {
            sum = _mm512_add_ps(sum, *x);
        }
        _mm512_reduce_add_ps(sum)
    }

    /// 10 independent chains of AVX2 FMAs (8 lanes, 2 flops each).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fma256() -> f32 {
        let m = _mm256_set1_ps(black_box(0.999_999));
        let a = _mm256_set1_ps(black_box(1e-7));
        let mut acc = [_mm256_set1_ps(1.0); 10];
        for _ in 0..ITERS {
            for x in &mut acc {
                *x = _mm256_fmadd_ps(*x, m, a);
            }
        }
        let mut out = [0f32; 8];
        let mut sum = acc[0];
        for x in &acc[1..] {
            sum = _mm256_add_ps(sum, *x);
        }
        _mm256_storeu_ps(out.as_mut_ptr(), sum);
        out.iter().sum()
    }

    /// 10 independent chains of `vpdpbusd` (16 i32 lanes, 4 u8 x i8 products and 4 adds each).
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn vnni() -> f32 {
        let a = _mm512_set1_epi8(black_box(3));
        let b = _mm512_set1_epi8(black_box(-2));
        let mut acc = [_mm512_setzero_si512(); 10];
        for _ in 0..ITERS {
            for x in &mut acc {
                *x = _mm512_dpbusd_epi32(*x, a, b);
            }
        }
        let mut sum = acc[0];
        for x in &acc[1..] {
            sum = _mm512_add_epi32(sum, *x);
        }
        _mm512_reduce_add_epi32(sum) as f32
    }

    /// 10 independent chains of `vdpbf16ps` (16 f32 lanes, 2 bf16 products and 2 adds each).
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn bf16() -> f32 {
        let a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(black_box(1e-3)), _mm512_set1_ps(1e-3));
        let b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(black_box(2e-3)), _mm512_set1_ps(2e-3));
        let mut acc = [_mm512_setzero_ps(); 10];
        for _ in 0..ITERS {
            for x in &mut acc {
                *x = _mm512_dpbf16_ps(*x, a, b);
            }
        }
        let mut sum = acc[0];
        for x in &acc[1..] {
            sum = _mm512_add_ps(sum, *x);
        }
        _mm512_reduce_add_ps(sum)
    }

    /// A kernel, and the operations one call of it does.
    pub type Kernel = (fn() -> f32, f64);

    /// The f32 FMA kernel this CPU has (and the instruction set's name).
    fn fma() -> Option<(Kernel, &'static str)> {
        let calls = (ITERS * 10) as f64;
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked above).
            let k: fn() -> f32 = || unsafe { fma512() };
            Some(((k, calls * 32.0), "f32 FMA (AVX-512F)"))
        } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            let k: fn() -> f32 = || unsafe { fma256() };
            Some(((k, calls * 16.0), "f32 FMA (AVX2+FMA)"))
        } else {
            None
        }
    }

    /// The peaks this CPU has: stage name, unit, what runs, and the kernel.
    pub fn peaks() -> Vec<(&'static str, &'static str, &'static str, Kernel)> {
        let calls = (ITERS * 10) as f64;
        let mut out = Vec::new();
        if let Some((k, what)) = fma() {
            out.push(("fma_f32_gflops", "GFLOP/s", what, k));
        }
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni") {
            // SAFETY: the CPU has AVX-512F and AVX-512 VNNI (checked above).
            let k: fn() -> f32 = || unsafe { vnni() };
            let what = "AVX-512 VNNI vpdpbusd";
            out.push(("vnni_int8_gops", "GOP/s", what, (k, calls * 16.0 * 8.0)));
        }
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16") {
            // SAFETY: the CPU has AVX-512F and AVX-512 BF16 (checked above).
            let k: fn() -> f32 = || unsafe { bf16() };
            let what = "AVX-512 BF16 vdpbf16ps";
            out.push(("bf16_gflops", "GFLOP/s", what, (k, calls * 16.0 * 4.0)));
        }
        out
    }
}

fn main() -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut threads = vec![1];
    if cores > 1 {
        threads.push(cores);
    }
    let mut records = Vec::new();
    for &n in &threads {
        let shape = format!("GB/s (not ms), STREAM triad over 3 x 64 MiB f32, {n} threads");
        record(
            &mut records,
            format!("triad_gbs_{n}t"),
            n,
            &shape,
            &triad(n),
        );
        #[cfg(target_arch = "x86_64")]
        for (stage, unit, what, kernel) in x86::peaks() {
            let shape = format!("{unit} (not ms), {what} in registers, {n} threads");
            let (k, ops) = kernel;
            record(
                &mut records,
                format!("{stage}_{n}t"),
                n,
                &shape,
                &peak(n, ops, k),
            );
        }
    }
    chatterbox_testkit::emit_records(&records).context("cannot write the records")?;
    Ok(())
}
