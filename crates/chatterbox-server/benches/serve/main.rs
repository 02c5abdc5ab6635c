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
//! `CHATTERBOX_SERVE_CHUNKS_PER_CALL=R`: chunks per batched flow call (default
//! `chatterbox_pipeline::CHUNKS_PER_CALL`; 1: each stream's flow alone).
//! `CHATTERBOX_SERVE_HORIZON_MS=H`: how far ahead of its listener a chunk counts as urgent
//! (default 0: none, every chunk runs as soon as it is due, most urgent first).
//! `CHATTERBOX_SERVE_PACED=0`: streams keep the model's chunk schedule under load (default 1:
//! the server's paced schedules, `PipelineModel::with_paced_schedule`).
//! `CHATTERBOX_SERVE_GRID=N`: chunks that can wait run every `N`th round, together
//! (`PipelineModel::with_chunk_grid`; 0: every chunk in the round it falls due; unset: the
//! server's default, `chatterbox_server::CHUNK_GRID` on CUDA).
//! `CHATTERBOX_SERVE_FIT=0|1|2`: live streams' hops are not fitted as their chunks are made,
//! fitted on the measured and forecast rounds, or on those and at least admission's round
//! budget (`PipelineModel::with_hop_fitting`, `with_round_budget`; unset: the server's
//! default, 2 on CUDA).
//!
//! Request length: random weights rarely draw the stop token, so every request runs to its
//! token cap. The bench wraps the model in a [`SpeechModel`] that caps `max_new_tokens` at a
//! value the bench sets between phases (what `ServerConfig::max_new_tokens` does, without
//! reloading the model), or at a request's own cap registered by its seed (the open loop):
//! `CHATTERBOX_SERVE_TOKENS` (default 125: 5 s of audio at 25 tokens a second) for the load
//! levels, `CHATTERBOX_SERVE_MEMORY_TOKENS` (default 20) for the memory phase. English drops
//! the ~20% of random draws that are not speech tokens, so its requests are shorter
//! (`*_audio_s` says how long).
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
//! `CHATTERBOX_SERVE_CLIENTS=none` skips the load levels (e.g. for the open loop alone).
//! `CHATTERBOX_SERVE_ADMISSION` = `capacity` (default, the server's: seated while the measured
//! costs keep every stream ahead of its listener) | `slots` (seated while the batch has a free
//! slot).
//! `CHATTERBOX_SERVE_EXPECT=0`: streams are paced on the batch's measured pace alone, not the
//! round forecast for the load the server holds; another number scales that forecast (1.3:
//! plan on rounds 30 % slower than forecast).
//! `CHATTERBOX_SERVE_QUEUE=Q`: the server's queue capacity (default: the largest of the
//! levels' and the memory phase's clients, plus 8); beyond it a request gets 429.
//!
//! Open loop (issue 43, `open_loop.rs`), after the load levels, when `CHATTERBOX_SERVE_RATES`
//! is set (requests per second, e.g. `2,5,10`): for each rate, requests arrive as a Poisson
//! process (exponential gaps `-ln(U) / rate`), each sent at its scheduled time by its own
//! tokio task whatever the others are doing, over `CHATTERBOX_SERVE_OPEN_SECS` (default 20)
//! seconds of arrivals, or exactly `CHATTERBOX_SERVE_OPEN_REQUESTS` requests when that is set;
//! the phase ends when the last answer does. Each request's length is drawn **log-uniformly**
//! in `CHATTERBOX_SERVE_LENGTHS` (seconds of audio, default `2-30`; one value: all alike) and
//! enforced as its own token cap (seconds x 25 tokens, rounded; the cap decides the length
//! since random weights rarely draw the stop token; English is shorter, as above), found by
//! the request's seed in the wrapper model below. A share `CHATTERBOX_SERVE_WHOLE_FRACTION`
//! (default 0.25) are whole-file requests (no `stream_format`), the rest stream
//! (`stream_format=audio`). Arrival gaps, lengths and kinds come from SplitMix64 seeded with
//! `CHATTERBOX_SERVE_SEED` (default 43), the same draws at every rate: request `k` has the same
//! text, seed, length and kind at every rate, only its time scales by `1 / rate`. Refusals
//! (429, 503) are counted with their `Retry-After`, not retried. `/metrics` is read every
//! 250 ms for the queue's depth and the jobs running. Records, prefixed `r<rate>_`: `sent`,
//! `offered_rps` (sent / seconds of arrivals: the window, or the last arrival's time for a
//! count), `completed`, `refused`, `retry_after_max` (s), `failed` (other errors: must be 0), `no_speech` (as above),
//! `streams`, `ttfb_p50`, `ttfb_p95`, `ttfb_p99` (ms, streaming requests), `ttfb_over_1s`
//! (streaming requests that waited over 1 s for their first byte: queued), `wholes`,
//! `whole_p50`, `whole_p95` (ms to the last byte of the whole files), `underruns` (streams that
//! ran dry, margin as above), `worst_margin` (ms), `rtf` (audio seconds delivered / wall
//! seconds of the phase, from its start to the last byte: about rate x mean length while the
//! server keeps up), `achieved_rps` (completed / wall), `audio_s` (mean per completed request), `wall_s`, `queue_max`, `queue_mean`, `running_max`
//! (the gauges read), `send_lag_max` (ms: the latest a request left after its time, the bench's
//! own lag; it should stay small). A line per rate on stderr says the same. A quick check on
//! the CPU with a tiny checkpoint (its speech position table holds 512 tokens: lengths up to
//! about 15 s; the tiny Turbo draws its stop token after a few tokens, the tiny English runs
//! to its caps): `CHATTERBOX_SERVE_VARIANT=english CHATTERBOX_SERVE_CKPT=<tiny dir>
//! CHATTERBOX_SERVE_CLIENTS=none CHATTERBOX_SERVE_MEMORY_REQUESTS=0
//! CHATTERBOX_SERVE_RATES=0.5,2 CHATTERBOX_SERVE_OPEN_SECS=5 CHATTERBOX_SERVE_LENGTHS=2-15`.
//!
//! Memory phase (`memory.rs`): `CHATTERBOX_SERVE_MEMORY_CLIENTS` (default 8) clients send
//! `CHATTERBOX_SERVE_MEMORY_REQUESTS` (default 1000; 0 skips the phase) short requests; memory is sampled after a
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
mod memory;
mod open_loop;
mod report;
mod texts;

use anyhow::Context as _;
use candle_core::Device;
use capped::{Capped, Caps};
use chatterbox_pipeline::{
    perth_watermarker, ChatterboxTts, ChatterboxTurboTts, VoiceClip, Watermarker, CHUNKS_PER_CALL,
    S3GEN_SR, S3_SR,
};
use chatterbox_server::{
    DeviceModels, ModelError, ModelId, PipelineModel, Server, ServerConfig, SpeechModel,
};
use chatterbox_testkit::{
    bench_dtype, checkpoint_dir, device_name, env_f64, env_usize, full_size_checkpoint,
    speech_like, test_device, BenchRun,
};
use chatterbox_watermark::PerthWatermarker;
use client::{confirm_no_speech, run_level, wait_ready};
use memory::sample;
use report::{percentile, report_level};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use texts::sentence;

fn parse_clients(s: &str) -> anyhow::Result<Vec<usize>> {
    if s.trim() == "none" {
        return Ok(Vec::new());
    }
    parse_list(
        "CHATTERBOX_SERVE_CLIENTS",
        s,
        |&n: &usize| n > 0,
        "zero clients",
    )
}

/// `s`, the comma-separated values of the variable `name`, each one that `ok` accepts (else
/// the error says `why`).
fn parse_list<T: std::str::FromStr>(
    name: &str,
    s: &str,
    ok: impl Fn(&T) -> bool,
    why: &str,
) -> anyhow::Result<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    let v = s
        .split(',')
        .map(|x| x.trim().parse::<T>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{name}={s:?}: {e}"))?;
    anyhow::ensure!(v.iter().all(ok), "{name}={s:?}: {why}");
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
    let mem = memory::Memory {
        requests: env_usize("CHATTERBOX_SERVE_MEMORY_REQUESTS", 1000),
        clients: env_usize("CHATTERBOX_SERVE_MEMORY_CLIENTS", 8).max(1),
        tokens: env_usize("CHATTERBOX_SERVE_MEMORY_TOKENS", 20).max(1),
        upload_every: env_f64("CHATTERBOX_SERVE_UPLOAD_EVERY_S", 0.0),
        voices: std::env::temp_dir().join(format!("chatterbox-serve-bench-{}", std::process::id())),
    };
    let max_growth = env_f64("CHATTERBOX_SERVE_MAX_GROWTH_MB", 64.0);
    let watermark = std::env::var("CHATTERBOX_SERVE_WATERMARK").ok();
    let open = open_loop::Plan::from_env()?;

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
    let cap = Arc::new(Caps::new(tokens));
    let longest = open.as_ref().map_or(0, open_loop::Plan::max_tokens);
    let batching = chatterbox_pipeline::BatchOptions::default()
        .with_slots(env_usize("CHATTERBOX_SERVE_BATCH", 0))
        .with_positions(tokens.max(mem.tokens).max(longest) + 512);
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
                .with_chunks_per_call(env_usize(
                    "CHATTERBOX_SERVE_CHUNKS_PER_CALL",
                    CHUNKS_PER_CALL,
                ))
                .with_horizon(match env_usize("CHATTERBOX_SERVE_HORIZON_MS", 0) {
                    0 => None,
                    ms => Some(Duration::from_millis(ms as u64)),
                })
                .with_paced_schedule(env_usize("CHATTERBOX_SERVE_PACED", 1) != 0);
            let inner = match std::env::var("CHATTERBOX_SERVE_GRID") {
                Ok(_) => inner.with_chunk_grid(match env_usize("CHATTERBOX_SERVE_GRID", 0) {
                    0 => None,
                    every => Some(every),
                }),
                Err(_) => inner,
            };
            let inner = match std::env::var("CHATTERBOX_SERVE_FIT") {
                Ok(_) => {
                    let fit = env_usize("CHATTERBOX_SERVE_FIT", 0);
                    inner
                        .with_hop_fitting(fit != 0)
                        .with_round_budget((fit == 2).then(chatterbox_server::round_budget))
                }
                Err(_) => inner,
            };
            Ok(vec![Box::new(Capped { inner, cap })])
        }
    };
    let mut config = ServerConfig::default();
    config.addr = ([127, 0, 0, 1], 0).into();
    let levels_queue = clients.iter().copied().chain([mem.clients]).max();
    config.queue_capacity = env_usize("CHATTERBOX_SERVE_QUEUE", levels_queue.unwrap_or(8) + 8);
    config.capacity_admission = match std::env::var("CHATTERBOX_SERVE_ADMISSION").as_deref() {
        Ok("slots") => false,
        Ok("capacity") | Err(_) => true,
        Ok(v) => anyhow::bail!("CHATTERBOX_SERVE_ADMISSION={v:?}: capacity or slots"),
    };
    // A slow device must not turn a deep queue into 504s: the bench measures, not times out.
    config.request_timeout = Duration::from_secs(3600);
    if mem.upload_every > 0.0 {
        config.voices_dir = Some(mem.voices.clone());
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
    if !clients.is_empty() {
        bench.push_value(
            "max_clients_without_underrun",
            format!(
                "count: largest concurrency of {clients:?} with no underrun and no error \
             ({requests} requests, cap {tokens} tokens)"
            ),
            best as f64,
        );
    }

    // Open loop: Poisson arrivals at each rate.
    if let Some(plan) = &open {
        for &rate in &plan.rates {
            let run = open_loop::run_rate(&base, model, &cap, plan, rate).await;
            errors += open_loop::report_rate(&mut bench, plan, rate, &run);
        }
    }

    // Memory: many short requests.
    let growth = if mem.requests > 0 {
        let (e, growth) = memory::run(&mut bench, &base, model, &cap, &mem, &dev, &loaded).await;
        errors += e;
        growth
    } else {
        0.0
    };

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
        "RSS grew by {growth:.1} MB over {} requests \
         (> CHATTERBOX_SERVE_MAX_GROWTH_MB = {max_growth})",
        mem.requests
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
