//! `cargo xtask bench t3 --threads 2`: T3 English (CFG, batch 2) and Turbo at full size with
//! random weights: prefill of a typical prompt plus the first token, and decode of exactly 200
//! tokens (stop token disabled), as JSON records (`CHATTERBOX_BENCH_OUT`, else stdout).
//! `parity/bench/t3.py` times the reference on the same shapes.
//!
//! Weights: `CHATTERBOX_T3_WEIGHTS_EN` / `CHATTERBOX_T3_WEIGHTS_TURBO` (safetensors, e.g. the
//! `--full` parity weights), else random tensors with the real key names and shapes.
//! `CHATTERBOX_BENCH_DEVICE=cuda` (with `--features cuda`) runs on GPU 0 in bf16, with CUDA
//! graphs and then eagerly; `CHATTERBOX_T3_BENCH_GRAPHS=0` runs eagerly only (for a profiler).
//! `CHATTERBOX_T3_BENCH_TOKENS=N` decodes N tokens instead of 200 (to profile the prefill).
//! `CHATTERBOX_T3_BENCH_UNFUSED=1` turns the fused CUDA decode kernels off (candle's ops).
//! `CHATTERBOX_T3_BENCH_BATCH=16,64` also times [`BatchDecoder`] steps with that many requests
//! decoding together (the server's continuous batching), per step and per request token;
//! `CHATTERBOX_T3_BENCH_SOLO=0` then skips the one-request runs (for a profiler). Each batch
//! size also times queued admissions (`queue_*` then `admit_queued` until none is left: the
//! server's batched prefill), per request; `CHATTERBOX_BENCH_PROFILE=1` (CUDA) runs the first
//! `admit_queued` call between `cuProfilerStart` and `cuProfilerStop`, for `ncu
//! --profile-from-start off`.
#[path = "../tests/common/random_weights.rs"]
mod random_weights;

use candle_core::{DType, Device, Tensor};
use chatterbox_t3::{
    BatchDecoder, BatchOptions, GenerateOptions, Sampling, T3Cond, T3Config, TurboOptions, T3,
};
use chatterbox_testkit::{
    bench_dtype, device_name, env_usize, live, test_device, BenchRun, CountingAlloc,
};
use std::time::Instant;

/// Counts live heap bytes, to check that decoding does not grow memory.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Decode steps timed per run (200 unless `CHATTERBOX_T3_BENCH_TOKENS` says otherwise).
fn decode_tokens() -> usize {
    env_usize("CHATTERBOX_T3_BENCH_TOKENS", 200)
}
const TEXT_TOKENS: usize = 60;

fn load(hp: &T3Config, env: &str, dtype: DType, dev: &Device) -> anyhow::Result<T3> {
    let mut t3 = load_weights(hp, env, dtype, dev)?;
    t3.set_fused_decode(std::env::var("CHATTERBOX_T3_BENCH_UNFUSED").as_deref() != Ok("1"));
    Ok(t3)
}

fn load_weights(hp: &T3Config, env: &str, dtype: DType, dev: &Device) -> anyhow::Result<T3> {
    if let Some(path) = std::env::var_os(env) {
        return Ok(T3::load_with_config(hp, &[path], dtype, dev)?);
    }
    Ok(random_weights::random_t3(hp, dtype, dev)?)
}

fn sync(dev: &Device) -> anyhow::Result<()> {
    // orders the clock read after the timed device work
    dev.synchronize()?;
    Ok(())
}

/// Batch sizes of `CHATTERBOX_T3_BENCH_BATCH` (none by default).
fn batch_sizes() -> Vec<usize> {
    std::env::var("CHATTERBOX_T3_BENCH_BATCH")
        .unwrap_or_default()
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect()
}

/// Runs `f` between `cuProfilerStart` and `cuProfilerStop` with `CHATTERBOX_BENCH_PROFILE=1`
/// on CUDA; else just `f`.
fn profiled<T>(dev: &Device, f: impl FnOnce() -> T) -> anyhow::Result<T> {
    #[cfg(feature = "cuda")]
    if dev.is_cuda() && std::env::var("CHATTERBOX_BENCH_PROFILE").as_deref() == Ok("1") {
        use candle_core::cuda_backend::cudarc::driver::sys;
        // the profiled range starts after the work queued before it
        dev.synchronize()?;
        // SAFETY: plain driver calls on the current context; they only toggle profiling.
        unsafe { sys::cuProfilerStart() }.result()?;
        let r = f();
        // the profiled range ends after the profiled work
        dev.synchronize()?;
        unsafe { sys::cuProfilerStop() }.result()?;
        return Ok(r);
    }
    let _ = dev;
    Ok(f())
}

/// Times batched decode steps: `opts.slots` requests admitted by `admit` (request `i`, at once
/// with `false`), then `decode_tokens()` steps with every slot busy; steps that captured a
/// CUDA graph (a new attention bucket) are left out of the median. Then the same requests
/// queued (`admit` with `true`) and admitted by `admit_queued` calls.
fn run_batch(
    bench: &mut BenchRun,
    name: &str,
    t3: &T3,
    opts: BatchOptions,
    mut admit: impl FnMut(&mut BatchDecoder<'_>, u64, bool) -> anyhow::Result<()>,
    dev: &Device,
) -> anyhow::Result<()> {
    let (n, graphs) = (opts.slots, opts.cuda_graphs);
    let mut batch = BatchDecoder::new(t3, opts.clone())?;
    let t = Instant::now();
    for i in 0..n {
        admit(&mut batch, i as u64, false)?;
    }
    sync(dev)?;
    let admit_ms = t.elapsed().as_secs_f64() * 1e3 / n as f64;
    let mut steps = Vec::new();
    for _ in 0..decode_tokens() {
        let captured = batch.cuda_graphs_captured();
        let t = Instant::now();
        batch.step()?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if batch.active() != n {
            anyhow::bail!("a request ended early ({} of {n} left)", batch.active());
        }
        if batch.cuda_graphs_captured() == captured {
            steps.push(ms);
        }
    }
    let mode = if graphs { "graphs" } else { "eager" };
    let mut per_token: Vec<f64> = steps.iter().map(|s| s / n as f64).collect();
    bench.push_times(
        &format!("{name}_batch{n}_{mode}_step"),
        format!(
            "{n} requests, {} steps timed of {}; admission {admit_ms:.1} ms a request",
            steps.len(),
            decode_tokens()
        ),
        &mut steps,
    );
    bench.push_times(
        &format!("{name}_batch{n}_{mode}_per_request_token"),
        format!("{n} requests"),
        &mut per_token,
    );
    drop(batch);
    // the same requests queued, then prefilled together
    let mut batch = BatchDecoder::new(t3, opts)?;
    let t = Instant::now();
    for i in 0..n {
        admit(&mut batch, i as u64, true)?;
    }
    let queue_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut calls = 0;
    while batch.queued() > 0 {
        let events = if calls == 0 {
            profiled(dev, || batch.admit_queued())?
        } else {
            batch.admit_queued()
        };
        for e in events {
            if let chatterbox_t3::BatchEvent::Failed { error, .. } = e {
                return Err(error.into());
            }
        }
        calls += 1;
    }
    sync(dev)?;
    let mut per_request = vec![t.elapsed().as_secs_f64() * 1e3 / n as f64];
    bench.push_times(
        &format!("{name}_batch{n}_queued_admission_per_request"),
        format!("{n} requests queued ({queue_ms:.1} ms), then {calls} admit_queued calls"),
        &mut per_request,
    );
    Ok(())
}

/// Times `runs` generations: prefill + first token, then `decode_tokens()` decode steps.
fn run_variant<'a>(
    bench: &mut BenchRun,
    name: &str,
    runs: usize,
    mut start: impl FnMut() -> anyhow::Result<chatterbox_t3::TokenStream<'a>>,
    prefix: usize,
    dev: &Device,
) -> anyhow::Result<()> {
    let decode_tokens = decode_tokens();
    let (mut prefill, mut decode, mut growth) = (Vec::new(), Vec::new(), 0isize);
    let mut graphs = 0;
    for run in 0..=runs {
        let t = Instant::now();
        let mut stream = start()?;
        stream.next().transpose()?;
        sync(dev)?;
        let p = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let mut live_at_10 = 0;
        for i in 0..decode_tokens {
            stream.next().transpose()?;
            if i == 10 {
                live_at_10 = live();
            }
        }
        sync(dev)?;
        let d = t.elapsed().as_secs_f64() * 1e3 / decode_tokens.max(1) as f64;
        graphs = stream.cuda_graphs_captured();
        if run > 0 {
            // run 0 warms up
            prefill.push(p);
            decode.push(d);
            growth = growth.max(live() - live_at_10);
        }
    }
    bench.push_times(
        &format!("{name}_prefill"),
        format!("{prefix} positions + first token"),
        &mut prefill,
    );
    bench.push_times(
        &format!("{name}_decode_per_token"),
        format!(
            "{decode_tokens} tokens; heap growth after token 10: {growth} B; CUDA graphs: {graphs}"
        ),
        &mut decode,
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let threads = env_usize("CHATTERBOX_BENCH_THREADS", 1);
    let dev = test_device("CHATTERBOX_BENCH_DEVICE")?;
    let (dtype, device) = (bench_dtype(&dev), device_name(&dev));
    let runs = env_usize("CHATTERBOX_T3_BENCH_RUNS", 2);
    let mut bench = BenchRun::new("t3", device, threads, 28);
    let only = std::env::var("CHATTERBOX_T3_BENCH_ONLY").unwrap_or_default();
    let graphs = dev.is_cuda() && std::env::var("CHATTERBOX_T3_BENCH_GRAPHS").as_deref() != Ok("0");
    let solo = std::env::var("CHATTERBOX_T3_BENCH_SOLO").as_deref() != Ok("0");

    if only.is_empty() || only == "en" {
        let hp = T3Config::english_only();
        let t0 = Instant::now();
        // Leaked so the streams can borrow it for 'static; the process ends after the bench.
        let t3: &'static T3 = Box::leak(Box::new(load(
            &hp,
            "CHATTERBOX_T3_WEIGHTS_EN",
            dtype,
            &dev,
        )?));
        eprintln!(
            "english weights ready in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        let speaker = Tensor::randn(0f32, 0.06, (1, 256), &dev)?;
        let prompt: Vec<u32> = (0..150u32).map(|i| (i * 37 + 11) % 6561).collect();
        let cond =
            T3Cond::new(speaker).with_prompt(Tensor::new(prompt.as_slice(), &dev)?.unsqueeze(0)?);
        let cond_emb = t3.prepare_conditioning(&cond)?;
        let text = t3.pad_text_tokens(
            &(0..TEXT_TOKENS as u32)
                .map(|i| 20 + (i * 7) % 600)
                .collect::<Vec<_>>(),
        );
        let mut opts = GenerateOptions::default();
        opts.max_new_tokens = decode_tokens() + 1;
        opts.stop_on_eos = false;
        opts.sampling = Sampling::Seeded(0);
        opts.cuda_graphs = graphs;
        let prefix = cond_emb.dim(1)? + text.len() + 2;
        if solo {
            run_variant(
                &mut bench,
                "en_cfg",
                runs,
                || Ok(t3.generate(&cond_emb, &text, &opts)?),
                prefix,
                &dev,
            )?;
            if graphs {
                // the same decode without graph replay, to show what the graphs buy
                opts.cuda_graphs = false;
                run_variant(
                    &mut bench,
                    "en_cfg_eager",
                    runs,
                    || Ok(t3.generate(&cond_emb, &text, &opts)?),
                    prefix,
                    &dev,
                )?;
            }
        }
        opts.cuda_graphs = graphs;
        for n in batch_sizes() {
            run_batch(
                &mut bench,
                "en_cfg",
                t3,
                BatchOptions::default()
                    .with_slots(n)
                    .with_positions(prefix + decode_tokens() + 8)
                    .with_cuda_graphs(graphs),
                |b, i, queued| {
                    let mut o = opts.clone();
                    o.sampling = Sampling::Seeded(i);
                    o.max_new_tokens += 1; // still decoding after the last timed step
                    if queued {
                        b.queue_generate(&cond_emb, &text, &o)?;
                    } else {
                        b.admit_generate(&cond_emb, &text, &o)?;
                    }
                    Ok(())
                },
                &dev,
            )?;
        }
    }
    if only.is_empty() || only == "turbo" {
        let hp = T3Config::turbo();
        let t0 = Instant::now();
        let t3: &'static T3 = Box::leak(Box::new(load(
            &hp,
            "CHATTERBOX_T3_WEIGHTS_TURBO",
            dtype,
            &dev,
        )?));
        eprintln!("turbo weights ready in {:.1} s", t0.elapsed().as_secs_f64());
        let speaker = Tensor::randn(0f32, 0.06, (1, 256), &dev)?;
        let prompt: Vec<u32> = (0..375u32).map(|i| (i * 53 + 5) % 6561).collect();
        let prompt = Tensor::new(prompt.as_slice(), &dev)?.unsqueeze(0)?;
        let cond_emb = t3.prepare_conditioning(&T3Cond::new(speaker).with_prompt(prompt))?;
        let text: Vec<u32> = (0..TEXT_TOKENS as u32).map(|i| 1000 + i * 13).collect();
        let mut opts = TurboOptions::default();
        opts.max_gen_len = decode_tokens();
        opts.stop_on_eos = false;
        opts.sampling = Sampling::Seeded(0);
        opts.cuda_graphs = graphs;
        let prefix = cond_emb.dim(1)? + text.len() + 1;
        if solo {
            run_variant(
                &mut bench,
                "turbo",
                runs,
                || Ok(t3.generate_turbo(&cond_emb, &text, &opts)?),
                prefix,
                &dev,
            )?;
            if graphs {
                opts.cuda_graphs = false;
                run_variant(
                    &mut bench,
                    "turbo_eager",
                    runs,
                    || Ok(t3.generate_turbo(&cond_emb, &text, &opts)?),
                    prefix,
                    &dev,
                )?;
            }
        }
        opts.cuda_graphs = graphs;
        for n in batch_sizes() {
            run_batch(
                &mut bench,
                "turbo",
                t3,
                BatchOptions::default()
                    .with_slots(n)
                    .with_positions(prefix + decode_tokens() + 8)
                    .with_cuda_graphs(graphs),
                |b, i, queued| {
                    let mut o = opts.clone();
                    o.sampling = Sampling::Seeded(i);
                    o.max_gen_len += 1;
                    if queued {
                        b.queue_turbo(&cond_emb, &text, &o)?;
                    } else {
                        b.admit_turbo(&cond_emb, &text, &o)?;
                    }
                    Ok(())
                },
                &dev,
            )?;
        }
    }

    bench.emit()?;
    Ok(())
}
