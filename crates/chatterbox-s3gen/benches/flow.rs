//! `cargo xtask bench flow`: S3Gen's full-size flow (random weights) as JSON records
//! (`CHATTERBOX_BENCH_OUT`, else stdout). `parity/bench/flow.py` times the reference on the same
//! shapes and stage names.
//!
//! Stages: the whole `CausalMaskedDiffWithXvec.inference` (250 prompt tokens = a 10 s reference,
//! N new tokens, 10 Euler steps with guidance as a batch of 2), one estimator call on that batch,
//! and the meanflow flow (2 steps, no guidance).
//!
//! Environment:
//! * `CHATTERBOX_BENCH_DEVICE`: `cpu` (default), `cuda` or `metal` (build with `--features cuda`
//!   / `metal`);
//! * `CHATTERBOX_BENCH_DTYPE`: the estimator's dtype, `f32` (default), `f16` or `bf16`;
//! * `CHATTERBOX_BENCH_FLOW_TOKENS`: new-token counts, default `100` on the CPU and `100,500` on a
//!   GPU;
//! * `CHATTERBOX_BENCH_ITERS`: timed runs of each whole-flow stage (default 1 on the CPU, 5 on a
//!   GPU);
//! * `CHATTERBOX_BENCH_STAGES`: run only these stages (`flow`, `estimator`, `meanflow`,
//!   comma-separated; default all);
//! * `CHATTERBOX_BENCH_ESTIMATOR_ROWS`: estimator calls of further `BxT` rows and frames
//!   (comma-separated, e.g. `8x1000,32x1000`: the batched server's flow calls), each also timed
//!   for its host side alone (the call returning, before the device finishes);
//! * `CHATTERBOX_BENCH_FLOW_ROWS`: batched calls of `BxN` (comma-separated, e.g. `16x60`):
//!   `inference_rows` over B streaming chunks (250 prompt + N tokens each, not final) of the
//!   10-step flow with guidance and of the meanflow flow (the batched server's flow calls),
//!   and the encoder alone on the same rows (stage `rows`, on by default when the variable is
//!   set); `CHATTERBOX_BENCH_PROFILE=rows_<model>` / `encoder_<model>` (CUDA; `<model>`:
//!   `10steps` or `meanflow_2steps`) runs one more call of that model's first shape's
//!   `inference_rows` / encoder between `cuProfilerStart` and `cuProfilerStop`;
//! * `CHATTERBOX_BENCH_PROFILE=1` (CUDA): one more call of each of those shapes between
//!   `cuProfilerStart` and `cuProfilerStop`, for `ncu --profile-from-start off`;
//! * `CHATTERBOX_BENCH_FLOW_GRAPHS=0`: the estimator calls run eagerly (CUDA; by default
//!   they replay CUDA graphs, kept from one call to the next of the same shape);
//! * `CHATTERBOX_FLOW_WEIGHTS`: a safetensors file with real `flow.*` weights (an S3Gen
//!   checkpoint) instead of random ones (`CHATTERBOX_FLOW_MEANFLOW_WEIGHTS` for meanflow).
use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use chatterbox_s3gen::flow::{
    CausalMaskedDiffWithXvec, FlowConfig, FlowOptions, FlowPrompt, FlowRow,
};
use chatterbox_testkit::{black_box, device_name, test_device, time_it, BenchRecord, Timing};

const N_PROMPT: usize = 250;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

fn device() -> anyhow::Result<(Device, &'static str)> {
    let dev = test_device("CHATTERBOX_BENCH_DEVICE")?;
    let name = device_name(&dev);
    Ok((dev, name))
}

/// The flow with real weights from `var`, or Kaiming-initialised random ones.
fn model(
    cfg: &FlowConfig,
    var: &str,
    dev: &Device,
    est_dtype: DType,
    keep: &mut Vec<VarMap>,
) -> anyhow::Result<CausalMaskedDiffWithXvec> {
    let mut model = match env(var) {
        Some(path) => {
            // SAFETY: the checkpoint is not modified while the bench runs.
            let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, dev)? };
            CausalMaskedDiffWithXvec::new_with_estimator_dtype(cfg, vb.pp("flow"), est_dtype)?
        }
        None => {
            let vm = VarMap::new();
            let vb = VarBuilder::from_varmap(&vm, DType::F32, dev);
            let m = CausalMaskedDiffWithXvec::new_with_estimator_dtype(cfg, vb, est_dtype)?;
            keep.push(vm);
            m
        }
    };
    model.set_cuda_graphs(env("CHATTERBOX_BENCH_FLOW_GRAPHS").as_deref() != Some("0"));
    Ok(model)
}

/// `n` deterministic speech-token ids, `(1, n)`.
fn ids(n: usize, mul: usize, dev: &Device) -> candle_core::Result<Tensor> {
    let v: Vec<u32> = (0..n).map(|i| ((i * mul + 5) % 6561) as u32).collect();
    Tensor::from_vec(v, (1, n), dev)
}

/// Runs `f` between `cuProfilerStart` and `cuProfilerStop` (CUDA builds; elsewhere just `f`).
fn profile_one(dev: &Device, f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    #[cfg(feature = "cuda")]
    if dev.is_cuda() {
        use candle_core::cuda_backend::cudarc::driver::sys;
        // the profiled range starts after the work queued before it
        dev.synchronize()?;
        // SAFETY: plain driver calls on the current context; they only toggle profiling.
        unsafe { sys::cuProfilerStart() }.result()?;
        let r = f();
        // the profiled range ends after the profiled work
        dev.synchronize()?;
        unsafe { sys::cuProfilerStop() }.result()?;
        return r;
    }
    let _ = dev;
    f()
}

/// `inference_rows` over `b` chunks of `n` new tokens each (not final) in the voice of
/// `prompt`, and the encoder alone on the same rows, for each `(b, n)` of `rows`.
fn flow_rows(
    flow: &CausalMaskedDiffWithXvec,
    prompt: &FlowPrompt,
    rows: &[(usize, usize)],
    what: &str,
    push: &mut impl FnMut(String, String, Timing),
    sync: &impl Fn(&Tensor),
) -> anyhow::Result<()> {
    let dev = prompt.prompt_feat.device();
    for &(b, n) in rows {
        let (_, c, t) = flow.noise_shape(1, N_PROMPT, n, false);
        let batch = (0..b)
            .map(|i| {
                Ok(FlowRow::new(
                    ids(n, 37 + i, dev)?,
                    prompt.clone(),
                    Tensor::randn(0f32, 1.0, (1, c, t), dev)?,
                    false,
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut failed = None;
        let timing = time_it(1, 5, 0.0, || match flow.inference_rows(&batch, None) {
            Ok(m) => m.iter().for_each(sync),
            Err(e) => failed = Some(e),
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        let profile = env("CHATTERBOX_BENCH_PROFILE");
        let first = (b, n) == rows[0];
        if first && profile.as_deref() == Some(format!("rows_{what}").as_str()) {
            profile_one(dev, || {
                flow.inference_rows(&batch, None)?.iter().for_each(sync);
                Ok(())
            })?;
        }
        push(
            format!("flow_rows_{what}_b{b}_{n}tok"),
            format!("inference_rows, {b} chunks of {n} + {N_PROMPT} prompt tokens ({t} frames)"),
            timing,
        );
        let token = Tensor::cat(
            &(0..b)
                .map(|i| ids(n, 37 + i, dev))
                .collect::<candle_core::Result<Vec<_>>>()?,
            0,
        )?;
        let mut failed = None;
        let timing = time_it(1, 5, 0.0, || match flow.encode(&token, prompt, false) {
            Ok(c) => sync(&c.mu),
            Err(e) => failed = Some(e),
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        if first && profile.as_deref() == Some(format!("encoder_{what}").as_str()) {
            profile_one(dev, || {
                sync(&flow.encode(&token, prompt, false)?.mu);
                Ok(())
            })?;
        }
        push(
            format!("flow_rows_{what}_b{b}_{n}tok_encoder"),
            format!("the encoder alone on the same rows ({b} x {n} + {N_PROMPT} tokens)"),
            timing,
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let (dev, dev_name) = device()?;
    let gpu = !dev.is_cpu();
    let threads: usize = env("CHATTERBOX_BENCH_THREADS")
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let est_dtype = match env("CHATTERBOX_BENCH_DTYPE").as_deref() {
        None | Some("f32") => DType::F32,
        Some("f16") => DType::F16,
        Some("bf16") => DType::BF16,
        Some(other) => anyhow::bail!("unknown CHATTERBOX_BENCH_DTYPE {other:?}"),
    };
    let dtype_note = if est_dtype == DType::F32 {
        String::new()
    } else {
        format!(", estimator {est_dtype:?}")
    };
    let tokens: Vec<usize> = env("CHATTERBOX_BENCH_FLOW_TOKENS")
        .unwrap_or_else(|| if gpu { "100,500" } else { "100" }.to_string())
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()?;
    let iters: usize = env("CHATTERBOX_BENCH_ITERS")
        .and_then(|s| s.parse().ok())
        .unwrap_or(if gpu { 5 } else { 1 });
    let warmup = usize::from(gpu);
    let rows: Vec<(usize, usize)> = env("CHATTERBOX_BENCH_FLOW_ROWS")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .split_once('x')
                .and_then(|(b, n)| Some((b.parse().ok()?, n.parse().ok()?)))
                .ok_or_else(|| anyhow::anyhow!("bad CHATTERBOX_BENCH_FLOW_ROWS {s:?}: BxN"))
        })
        .collect::<anyhow::Result<_>>()?;
    let stages =
        env("CHATTERBOX_BENCH_STAGES").unwrap_or_else(|| "flow,estimator,meanflow,rows".into());
    let want = |s: &str| stages.split(',').any(|x| x.trim() == s);

    let mut records = Vec::new();
    let mut push = |stage: String, shape: String, timing: Timing| {
        let r = BenchRecord {
            group: "flow".into(),
            stage,
            implementation: "rust".into(),
            device: dev_name.into(),
            threads,
            timing,
            shape,
        };
        eprintln!(
            "{:<40} {:>10.1} ms (median of {})",
            r.stage, r.timing.median_ms, r.timing.iters
        );
        records.push(r);
    };
    let sync = |t: &Tensor| {
        black_box(t);
        // orders the clock read after the timed device work
        dev.synchronize().ok();
    };

    let mut keep = Vec::new();
    let cfg = FlowConfig::s3gen();
    let flow = model(&cfg, "CHATTERBOX_FLOW_WEIGHTS", &dev, est_dtype, &mut keep)?;
    let prompt = FlowPrompt {
        prompt_token: ids(N_PROMPT, 23, &dev)?,
        prompt_feat: Tensor::randn(0f32, 1.0, (1, 2 * N_PROMPT, 80), &dev)?,
        embedding: Tensor::randn(0f32, 1.0, (1, 192), &dev)?,
    };
    let tokens_for = |n: usize| ids(n, 37, &dev);

    for &n in tokens.iter().filter(|_| want("flow")) {
        let token = tokens_for(n)?;
        let (b, c, t) = flow.noise_shape(1, N_PROMPT, n, true);
        let noise = Tensor::randn(0f32, 1.0, (b, c, t), &dev)?;
        let opts = FlowOptions::default();
        let mut out = None;
        let timing = time_it(warmup, iters, 0.0, || {
            let feat = flow.inference(&token, &prompt, &noise, None, &opts);
            if let Ok(f) = &feat {
                sync(f);
            }
            out = Some(feat);
        });
        let feat = out.transpose()?.ok_or_else(|| anyhow::anyhow!("no run"))?;
        let peak = feat
            .abs()?
            .max_all()?
            .to_dtype(DType::F32)?
            .to_scalar::<f32>()?;
        anyhow::ensure!(peak.is_finite(), "non-finite mel out");
        push(
            format!("flow_{n}tok_{N_PROMPT}prompt_10steps"),
            format!("{n} + {N_PROMPT} prompt tokens, CFG batch 2 x {t} frames{dtype_note}"),
            timing,
        );
    }

    // one estimator call on the guidance batch (2 x 700 frames), then the extra shapes
    if want("estimator") {
        let est = flow.decoder().estimator();
        let mut shapes = vec![(2, 2 * (N_PROMPT + 100))];
        let extra = env("CHATTERBOX_BENCH_ESTIMATOR_ROWS").unwrap_or_default();
        for shape in extra.split(',').filter(|s| !s.trim().is_empty()) {
            let bt = shape
                .trim()
                .split_once('x')
                .and_then(|(b, t)| Some((b.parse::<usize>().ok()?, t.parse::<usize>().ok()?)))
                .ok_or_else(|| anyhow::anyhow!("bad estimator shape {shape:?}: BxT"))?;
            if !shapes.contains(&bt) {
                shapes.push(bt);
            }
        }
        for (i, &(b, t)) in shapes.iter().enumerate() {
            let x = Tensor::randn(0f32, 1.0, (b, 80, t), &dev)?;
            let mu = Tensor::randn(0f32, 1.0, (b, 80, t), &dev)?;
            let cond = Tensor::randn(0f32, 1.0, (b, 80, t), &dev)?;
            let spks = Tensor::randn(0f32, 1.0, (b, 80), &dev)?;
            let mask = Tensor::ones((b, 1, t), DType::F32, &dev)?;
            let tt = Tensor::full(0.3f32, b, &dev)?;
            sync(&est.forward(&x, &mask, &mu, &tt, &spks, &cond, None)?);
            let timing = time_it(1, if gpu { 10 } else { 3 }, 0.0, || {
                if let Ok(v) = est.forward(&x, &mask, &mu, &tt, &spks, &cond, None) {
                    sync(&v);
                }
            });
            push(
                format!("estimator_b{b}x{t}"),
                format!("ConditionalDecoder, batch {b} x {t} frames{dtype_note}"),
                timing,
            );
            if i == 0 {
                continue;
            }
            // the host side alone: the call returns once its kernels are queued (the device
            // idle before each call, so the launch queue never fills)
            let mut host = Vec::new();
            for _ in 0..if gpu { 10 } else { 3 } {
                // the device idle before each timed call
                dev.synchronize()?;
                let t0 = std::time::Instant::now();
                let v = est.forward(&x, &mask, &mu, &tt, &spks, &cond, None)?;
                host.push(t0.elapsed().as_secs_f64() * 1e3);
                sync(&v);
            }
            let timing = Timing::from_samples(&mut host);
            if env("CHATTERBOX_BENCH_PROFILE").as_deref() == Some("1") {
                profile_one(&dev, || {
                    sync(&est.forward(&x, &mask, &mu, &tt, &spks, &cond, None)?);
                    Ok(())
                })?;
            }
            push(
                format!("estimator_b{b}x{t}_host"),
                format!("host time to queue one call, batch {b} x {t} frames{dtype_note}"),
                timing,
            );
        }
    }
    if want("rows") {
        flow_rows(&flow, &prompt, &rows, "10steps", &mut push, &sync)?;
    }
    drop(flow);
    keep.clear();

    // meanflow (Turbo): 2 steps, no guidance
    if want("meanflow") {
        let cfg = FlowConfig::s3gen_meanflow();
        let flow = model(
            &cfg,
            "CHATTERBOX_FLOW_MEANFLOW_WEIGHTS",
            &dev,
            est_dtype,
            &mut keep,
        )?;
        let n = tokens[0];
        let token = tokens_for(n)?;
        let (b, c, t) = flow.noise_shape(1, N_PROMPT, n, true);
        let noise = Tensor::randn(0f32, 1.0, (b, c, t), &dev)?;
        let noised = Tensor::randn(0f32, 1.0, (1, 80, 2 * n), &dev)?;
        let opts = FlowOptions::default();
        let mut failed = None;
        let timing = time_it(warmup, iters.max(2), 0.0, || {
            match flow.inference(&token, &prompt, &noise, Some(&noised), &opts) {
                Ok(f) => sync(&f),
                Err(e) => failed = Some(e),
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        push(
            format!("flow_meanflow_{n}tok_{N_PROMPT}prompt_2steps"),
            format!("{n} + {N_PROMPT} prompt tokens, batch 1 x {t} frames{dtype_note}"),
            timing,
        );
        if want("rows") {
            flow_rows(&flow, &prompt, &rows, "meanflow_2steps", &mut push, &sync)?;
        }
    }

    chatterbox_testkit::emit_records(&records)?;
    Ok(())
}
