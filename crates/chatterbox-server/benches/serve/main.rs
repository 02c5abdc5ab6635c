//! `cargo xtask bench serve --threads 2 --no-reference`: the load test of issue 22. The server
//! runs in-process on 127.0.0.1 (an ephemeral port) with one worker, on a full-size random
//! checkpoint, driven by concurrent loopback HTTP clients (tokio + reqwest); JSON records go to
//! `CHATTERBOX_BENCH_OUT` (else stdout). There is no reference side (no
//! `parity/bench/serve.py`).
//!
//! Variant: `CHATTERBOX_SERVE_VARIANT` = `turbo` (default) | `english`. Checkpoint:
//! `CHATTERBOX_SERVE_CKPT`, else `/tmp/chatterbox-bench-<variant>`, written on first use by
//! `parity/checkpoints.py --size full` (the parity venv). The built-in voice is the 10 s
//! speech-like clip of `pipeline.rs`, prepared on the worker before `/ready` answers 200 (the
//! requests ask for `voice=alloy`, which maps to it). `CHATTERBOX_BENCH_DEVICE=cuda` (with
//! `--features cuda`) serves from GPU 0 with bf16 T3 and flow; `CHATTERBOX_SERVE_GPUS=N`
//! from GPUs 0..N, one worker each (the GPU memory sampled is GPU 0's).
//! `CHATTERBOX_SERVE_BATCH=S` serves up to `S` requests at once per worker through one batched
//! T3 decoder (continuous batching, issue 27); 0 (default) one at a time.
//! `CHATTERBOX_SERVE_FLOW_ROWS=R`: chunks per batched flow call (default
//! `chatterbox_pipeline::FLOW_ROWS`; 1: each stream's flow alone).
//!
//! Request length: random weights rarely draw the stop token, so every request runs to its
//! token cap. The bench wraps the model in a [`SpeechModel`] that caps `max_new_tokens` at a
//! value the bench sets between phases (what `ServerConfig::max_new_tokens` does, without
//! reloading the model): `CHATTERBOX_SERVE_TOKENS` (default 125: 5 s of audio at 25 tokens a
//! second) for the load levels, `CHATTERBOX_SERVE_MEMORY_TOKENS` (default 20) for the memory
//! phase. English drops the ~20% of random draws that are not speech tokens, so its requests
//! are shorter (`*_audio_s` says how long).
//!
//! Requests: `POST /v1/audio/speech` with a short varied English sentence (one text chunk),
//! `response_format=pcm` (s16le, 24 kHz), `stream_format=audio`, seed = the request's index;
//! with `CHATTERBOX_SERVE_SPEED=X`, `speed=X` (the speech time-stretched: `audio_s` is the
//! stretched length).
//! One request is sent first as a warm-up and not counted.
//!
//! Load levels: for each `N` in `CHATTERBOX_SERVE_CLIENTS` (default `1,2,4,8`), `N` clients
//! (each its own connection pool) take requests from a shared counter until
//! `CHATTERBOX_SERVE_REQUESTS` (default 40) have been sent. Per request: the time to the first
//! body byte (`ttfb`), the time to the last (`latency`), the audio received (bytes / 2 / 24 kHz)
//! and the playback margin: a listener starts playing at the first byte; the bytes of a piece
//! arriving at `t` are due at `t_first + offset / 24 kHz`; the worst margin over the later
//! pieces (ms; negative: the audio ran dry, an underrun), as `stream.rs`'s `underrun_margin`.
//! Records, prefixed `c<N>_`: `ttfb_p50`, `ttfb_p95`, `latency_p50`, `latency_p95` (ms),
//! `rtf` (audio seconds delivered / wall seconds of the level: > 1 keeps up), `audio_s` (mean
//! per request), `audio_min_s` (the shortest request's), `errors` (non-200 answers, broken or
//! empty bodies, bodies of an odd length), `no_speech` (the server's `no_speech` 500: T3
//! drew its stop token first for that text and seed, as random weights do for a few; each is
//! sent again alone after the level and counted here, not as an error, only when it gives
//! `no_speech` again: the model's answer, not a fault of the batch), `underruns` (requests whose margin went negative),
//! `worst_margin` (ms). Then `max_clients_without_underrun`: the largest `N` with no underrun and no error (0: none).
//!
//! Memory phase: `CHATTERBOX_SERVE_MEMORY_CLIENTS` (default 8) clients send
//! `CHATTERBOX_SERVE_MEMORY_REQUESTS` (default 1000) short requests; memory is sampled after a
//! warm-up round of one request per client and after the last request: the process's resident
//! set (`chatterbox_pipeline::resident_memory_bytes`) and, on CUDA, the device's used memory (total - free as the driver reports
//! it), in MB (10^6 bytes). Records: `mem_rss_{loaded,before,after,growth}_mb`,
//! `mem_gpu_used_{loaded,before,after,growth}_mb` (CUDA only), `mem_errors`, `mem_no_speech`,
//! `mem_wall_s`,
//! `mem_ttfb_p50` and `mem_ttfb_p95` (ms, with the voice uploads below running when they are on).
//!
//! Watermark: `CHATTERBOX_SERVE_WATERMARK` = `random` (Perth's architecture with seeded
//! random weights: the shipped model's work per chunk) or the path of Perth's weights
//! (`perth_net_250000.pth.tar`); unset, none (the default `chatterbox serve` watermarks).
//! Voice uploads: with `CHATTERBOX_SERVE_UPLOAD_EVERY_S=S`, a client uploads a 10 s voice
//! (`POST /v1/voices`, one of four names) every `S` seconds while the memory phase runs, each
//! analysed by the worker between the speech requests' work. Records: `mem_uploads`,
//! `mem_upload_errors` (must be 0), `mem_upload_p95_ms`.
//!
//! Every value is stored in the records' `*_ms` fields (one sample); the shape names its unit.
//! The run fails (after writing its records) on any error, or when the RSS grows by more than
//! `CHATTERBOX_SERVE_MAX_GROWTH_MB` (default 64) over the memory phase.
mod capped;
mod client;
mod report;
mod texts;

use anyhow::Context as _;
use candle_core::Device;
use capped::Capped;
use chatterbox_pipeline::{
    perth_watermarker, ChatterboxTts, ChatterboxTurboTts, VoiceClip, Watermarker, FLOW_ROWS,
    S3GEN_SR, S3_SR,
};
use chatterbox_server::{
    DeviceModels, ModelError, ModelId, PipelineModel, Server, ServerConfig, SpeechModel,
};
use chatterbox_testkit::{
    bench_dtype, checkpoint_dir, device_name, env_f64, env_usize, full_size_checkpoint,
    speech_like, test_device, BenchRun, MemorySample,
};
use chatterbox_watermark::PerthWatermarker;
use client::{confirm_no_speech, run_level, upload_voices, wait_ready};
use report::{count_errors, percentile, report_level};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use texts::{sentence, SHORT};

/// One memory reading, after the device has finished its queued work.
fn sample(dev: &Device) -> MemorySample {
    // orders the memory reading after the work queued so far (measurement only)
    let _ = dev.synchronize();
    let gpu = chatterbox_pipeline::device_memory(dev).map(|m| m.used_bytes);
    MemorySample::from_bytes(chatterbox_pipeline::resident_memory_bytes(), gpu)
}

fn parse_clients(s: &str) -> anyhow::Result<Vec<usize>> {
    let v = s
        .split(',')
        .map(|x| x.trim().parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("CHATTERBOX_SERVE_CLIENTS={s:?}: {e}"))?;
    anyhow::ensure!(
        v.iter().all(|&n| n > 0),
        "CHATTERBOX_SERVE_CLIENTS: zero clients"
    );
    Ok(v)
}

async fn bench_main() -> anyhow::Result<()> {
    let threads = env_usize("CHATTERBOX_BENCH_THREADS", 1);
    let gpus = env_usize("CHATTERBOX_SERVE_GPUS", 1).max(1);
    let dev = test_device("CHATTERBOX_BENCH_DEVICE")?;
    let dtype = bench_dtype(&dev);
    let (devs, device) = if dev.is_cuda() && gpus > 1 {
        // the other GPUs of the host, after the one the variable names (GPU 0 for `cuda`)
        let rest = (1..gpus).map(chatterbox_cuda::open);
        let devs = std::iter::once(Ok(dev.clone())).chain(rest);
        (
            devs.collect::<Result<Vec<_>, _>>()?,
            format!("cuda x{gpus}"),
        )
    } else {
        (vec![dev.clone()], device_name(&dev).to_string())
    };
    let variant = std::env::var("CHATTERBOX_SERVE_VARIANT").unwrap_or_else(|_| "turbo".into());
    let clients = parse_clients(
        &std::env::var("CHATTERBOX_SERVE_CLIENTS").unwrap_or_else(|_| "1,2,4,8".into()),
    )?;
    let requests = env_usize("CHATTERBOX_SERVE_REQUESTS", 40).max(1);
    let tokens = env_usize("CHATTERBOX_SERVE_TOKENS", 125).max(1);
    let mem_requests = env_usize("CHATTERBOX_SERVE_MEMORY_REQUESTS", 1000);
    let mem_clients = env_usize("CHATTERBOX_SERVE_MEMORY_CLIENTS", 8).max(1);
    let mem_tokens = env_usize("CHATTERBOX_SERVE_MEMORY_TOKENS", 20).max(1);
    let max_growth = env_f64("CHATTERBOX_SERVE_MAX_GROWTH_MB", 64.0);
    let upload_every = env_f64("CHATTERBOX_SERVE_UPLOAD_EVERY_S", 0.0);
    let watermark = std::env::var("CHATTERBOX_SERVE_WATERMARK").ok();

    let (model, exaggeration, marker) = match variant.as_str() {
        "turbo" => (ModelId::Turbo, 0.0, "t3_turbo_v1.safetensors"),
        "english" => (ModelId::English, 0.5, "t3_cfg.safetensors"),
        v => anyhow::bail!("CHATTERBOX_SERVE_VARIANT={v:?}: turbo or english"),
    };
    let dir = full_size_checkpoint(
        checkpoint_dir("CHATTERBOX_SERVE_CKPT", &variant),
        &variant,
        marker,
    )?;
    let cap = Arc::new(AtomicUsize::new(tokens));
    let batching = chatterbox_pipeline::BatchOptions::default()
        .with_slots(env_usize("CHATTERBOX_SERVE_BATCH", 0))
        .with_positions(tokens.max(mem_tokens) + 512);
    let loader = |dev: Device| {
        let (dir, cap, batching) = (dir.clone(), cap.clone(), batching.clone());
        let watermark = watermark.clone();
        move || -> Result<Vec<Box<dyn SpeechModel>>, ModelError> {
            let t0 = Instant::now();
            let clip = VoiceClip::from_parts(speech_like(S3GEN_SR, 10.0), speech_like(S3_SR, 10.0));
            let marker: Option<Arc<dyn Watermarker>> = match watermark.as_deref() {
                None => None,
                Some("random") => Some(Arc::new(PerthWatermarker::random(0x5eed, &dev)?)),
                Some(path) => Some(perth_watermarker(Path::new(path), &dev)?),
            };
            let inner = if model == ModelId::Turbo {
                let mut tts = ChatterboxTurboTts::from_dir(&dir, false, &dev, dtype)?
                    .with_watermarker(marker);
                tts.prepare_conditionals_from_clip(&clip, exaggeration)?;
                PipelineModel::from(tts)
            } else {
                let mut tts = ChatterboxTts::from_dir(&dir, &dev, dtype)?.with_watermarker(marker);
                tts.prepare_conditionals_from_clip(&clip, exaggeration)?;
                PipelineModel::from(tts)
            };
            eprintln!(
                "loaded {} from {} and prepared the voice in {:.1} s",
                model.name(),
                dir.display(),
                t0.elapsed().as_secs_f64()
            );
            let inner = inner
                .with_batching(batching)
                .with_flow_rows(env_usize("CHATTERBOX_SERVE_FLOW_ROWS", FLOW_ROWS));
            Ok(vec![Box::new(Capped { inner, cap })])
        }
    };
    let mut config = ServerConfig::default();
    config.addr = ([127, 0, 0, 1], 0).into();
    config.queue_capacity = clients
        .iter()
        .copied()
        .chain([mem_clients])
        .max()
        .unwrap_or(8)
        + 8;
    // A slow device must not turn a deep queue into 504s: the bench measures, not times out.
    config.request_timeout = Duration::from_secs(3600);
    let voices =
        std::env::temp_dir().join(format!("chatterbox-serve-bench-{}", std::process::id()));
    if upload_every > 0.0 {
        config.voices_dir = Some(voices.clone());
    }
    let workers = devs
        .iter()
        .enumerate()
        .map(|(i, d)| DeviceModels::new(format!("{device}:{i}"), loader(d.clone())))
        .collect();
    let server = Server::bind(config, workers).await?;
    let base = format!("http://{}", server.local_addr()?);
    let url = format!("{base}/v1/audio/speech");
    eprintln!("serving {} on {base} ({device})", model.name());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        if let Err(e) = server
            .run(async {
                let _ = stop_rx.await;
            })
            .await
        {
            eprintln!("server: {e}");
        }
    });
    wait_ready(&base, &handle).await?;
    let loaded = sample(&dev);

    let mut bench = BenchRun::new("serve", &device, threads, 32);
    let (warm, _) = run_level(&url, model, 1, 1, 1_000_000, sentence).await;
    if let Some(w) = warm.first() {
        eprintln!(
            "warm-up: ttfb {:.1} ms, latency {:.1} ms, {:.2} s of audio{}",
            w.ttfb,
            w.latency,
            w.audio_s,
            w.error
                .as_ref()
                .map_or(String::new(), |e| format!(", error: {e}"))
        );
    }

    let mut errors = 0;
    let mut best = 0;
    for &n in &clients {
        let (mut out, wall) = run_level(&url, model, n, requests, 0, sentence).await;
        confirm_no_speech(&url, model, &mut out, 0, sentence).await;
        let o = &out;
        eprintln!(
            "c{n}: {} requests in {wall:.1} s, ttfb p50 {:.0} ms, latency p50 {:.0} ms, \
             {:.1} s of audio",
            o.len(),
            percentile(&o.iter().map(|x| x.ttfb).collect::<Vec<_>>(), 0.5),
            percentile(&o.iter().map(|x| x.latency).collect::<Vec<_>>(), 0.5),
            o.iter().map(|x| x.audio_s).sum::<f64>()
        );
        let (e, clean) = report_level(&mut bench, n, &out, wall, tokens);
        errors += e;
        if clean {
            best = best.max(n);
        }
    }
    bench.push_value(
        "max_clients_without_underrun",
        format!(
            "count: largest concurrency of {clients:?} with no underrun and no error \
             ({requests} requests, cap {tokens} tokens)"
        ),
        best as f64,
    );

    // Memory: many short requests.
    cap.store(mem_tokens, Ordering::Release);
    let short = |i: usize| SHORT[i % SHORT.len()].to_string();
    let (mut warm, _) = run_level(&url, model, mem_clients, mem_clients, 2_000_000, short).await;
    let mut no_speech = confirm_no_speech(&url, model, &mut warm, 2_000_000, short).await;
    let warm_errors = count_errors("memory warm-up", &warm);
    let before = sample(&dev);
    eprintln!(
        "memory: loaded RSS {:.0} MB{}; before RSS {:.0} MB{}",
        loaded.rss,
        loaded.gpu_text(),
        before.rss,
        before.gpu_text()
    );
    let uploading = Arc::new(std::sync::atomic::AtomicBool::new(upload_every > 0.0));
    let uploader = tokio::spawn(upload_voices(
        format!("{base}/v1/voices"),
        upload_every,
        uploading.clone(),
    ));
    let (mut out, wall) = run_level(&url, model, mem_clients, mem_requests, 3_000_000, short).await;
    uploading.store(false, Ordering::Release);
    let uploads = uploader.await.unwrap_or_default();
    no_speech += confirm_no_speech(&url, model, &mut out, 3_000_000, short).await;
    let after = sample(&dev);
    let mem_errors = warm_errors + count_errors("memory", &out);
    let upload_errors = uploads.iter().filter(|u| u.is_err()).count();
    for e in uploads.iter().filter_map(|u| u.as_ref().err()).take(3) {
        eprintln!("upload: error: {e}");
    }
    errors += mem_errors + upload_errors;
    let what = format!(
        "{mem_requests} requests, {mem_clients} clients, cap {mem_tokens} tokens, MB (10^6 bytes)"
    );
    bench.push_value(
        "mem_rss_loaded_mb",
        format!("RSS once ready, {what}"),
        loaded.rss,
    );
    bench.push_value(
        "mem_rss_before_mb",
        format!("RSS after the load levels and a warm-up round, {what}"),
        before.rss,
    );
    bench.push_value(
        "mem_rss_after_mb",
        format!("RSS after the requests, {what}"),
        after.rss,
    );
    let growth = after.rss - before.rss;
    bench.push_value(
        "mem_rss_growth_mb",
        format!("RSS after - before, {what}"),
        growth,
    );
    if let (Some(l), Some(b), Some(a)) = (loaded.gpu, before.gpu, after.gpu) {
        let what = format!("device used memory (total - free), {what}");
        bench.push_value("mem_gpu_used_loaded_mb", format!("once ready, {what}"), l);
        bench.push_value("mem_gpu_used_before_mb", format!("before, {what}"), b);
        bench.push_value("mem_gpu_used_after_mb", format!("after, {what}"), a);
        bench.push_value(
            "mem_gpu_used_growth_mb",
            format!("after - before, {what}"),
            a - b,
        );
    }
    bench.push_value(
        "mem_errors",
        format!("count: non-200, broken or empty bodies (must be 0), {what}"),
        mem_errors as f64,
    );
    bench.push_value(
        "mem_no_speech",
        format!("count: no_speech answers that the request alone gave again, {what}"),
        no_speech as f64,
    );
    bench.push_value(
        "mem_wall_s",
        format!("seconds (not ms) for the requests, {what}"),
        wall,
    );
    let ttfb: Vec<f64> = out
        .iter()
        .filter(|o| o.error.is_none())
        .map(|o| o.ttfb)
        .collect();
    bench.push_value(
        "mem_ttfb_p50",
        format!("ms to first body byte, p50, {what}"),
        percentile(&ttfb, 0.5),
    );
    bench.push_value(
        "mem_ttfb_p95",
        format!("ms to first body byte, p95, {what}"),
        percentile(&ttfb, 0.95),
    );
    if upload_every > 0.0 {
        let what = format!("voice uploads every {upload_every} s during the memory phase");
        let ms: Vec<f64> = uploads
            .iter()
            .filter_map(|u| u.as_ref().ok().copied())
            .collect();
        bench.push_value(
            "mem_uploads",
            format!("count: {what}"),
            uploads.len() as f64,
        );
        bench.push_value(
            "mem_upload_errors",
            format!("count: failed uploads (must be 0), {what}"),
            upload_errors as f64,
        );
        bench.push_value(
            "mem_upload_p95_ms",
            format!("ms from request to 201, p95, {what}"),
            percentile(&ms, 0.95),
        );
        let _ = std::fs::remove_dir_all(&voices);
    }

    let _ = stop_tx.send(());
    if tokio::time::timeout(Duration::from_secs(60), handle)
        .await
        .is_err()
    {
        eprintln!("the server did not stop within 60 s");
    }
    bench.emit()?;
    anyhow::ensure!(errors == 0, "{errors} requests failed");
    anyhow::ensure!(
        growth <= max_growth,
        "RSS grew by {growth:.1} MB over {mem_requests} requests \
         (> CHATTERBOX_SERVE_MAX_GROWTH_MB = {max_growth})"
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // RUST_LOG=chatterbox_server=info shows the workers' logs (e.g. where a batch's time went)
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?
        .block_on(bench_main())
}
