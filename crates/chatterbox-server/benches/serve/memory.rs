//! The memory phase: many short requests, the process's (and the device's) memory sampled
//! before and after them, with voice uploads alongside when they are on.
use crate::capped::Caps;
use crate::client::{confirm_no_speech, run_level, upload_voices};
use crate::report::{count_errors, percentile};
use crate::texts::SHORT;
use candle_core::Device;
use chatterbox_server::ModelId;
use chatterbox_testkit::{BenchRun, MemorySample};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The memory phase's knobs.
pub struct Memory {
    /// Clients.
    pub clients: usize,
    /// Requests (0: no memory phase).
    pub requests: usize,
    /// Their token cap.
    pub tokens: usize,
    /// Seconds between voice uploads (0: none).
    pub upload_every: f64,
    /// Where the uploaded voices go (removed afterwards).
    pub voices: PathBuf,
}

/// One memory reading, after the device has finished its queued work.
pub fn sample(dev: &Device) -> MemorySample {
    // orders the memory reading after the work queued so far (measurement only)
    let _ = dev.synchronize();
    let gpu = chatterbox_pipeline::device_memory(dev).map(|m| m.used_bytes);
    MemorySample::from_bytes(chatterbox_pipeline::resident_memory_bytes(), gpu)
}

/// Runs the memory phase and writes its records (`loaded`: the reading once the server was
/// ready); the number of errors and the RSS growth in MB.
pub async fn run(
    bench: &mut BenchRun,
    base: &str,
    model: ModelId,
    cap: &Caps,
    mem: &Memory,
    dev: &Device,
    loaded: &MemorySample,
) -> (usize, f64) {
    let url = &format!("{base}/v1/audio/speech");
    cap.set(mem.tokens);
    let short = |i: usize| SHORT[i % SHORT.len()].to_string();
    let (mut warm, _) = run_level(url, model, mem.clients, mem.clients, 2_000_000, short).await;
    let mut no_speech = confirm_no_speech(url, model, &mut warm, 2_000_000, short).await;
    let warm_errors = count_errors("memory warm-up", &warm);
    let before = sample(dev);
    eprintln!(
        "memory: loaded RSS {:.0} MB{}; before RSS {:.0} MB{}",
        loaded.rss,
        loaded.gpu_text(),
        before.rss,
        before.gpu_text()
    );
    let uploading = Arc::new(std::sync::atomic::AtomicBool::new(mem.upload_every > 0.0));
    let uploader = tokio::spawn(upload_voices(
        format!("{base}/v1/voices"),
        mem.upload_every,
        uploading.clone(),
    ));
    let (mut out, wall) = run_level(url, model, mem.clients, mem.requests, 3_000_000, short).await;
    uploading.store(false, Ordering::Release);
    let uploads = uploader.await.unwrap_or_default();
    no_speech += confirm_no_speech(url, model, &mut out, 3_000_000, short).await;
    let after = sample(dev);
    let mem_errors = warm_errors + count_errors("memory", &out);
    let upload_errors = uploads.iter().filter(|u| u.is_err()).count();
    for e in uploads.iter().filter_map(|u| u.as_ref().err()).take(3) {
        eprintln!("upload: error: {e}");
    }
    let what = format!(
        "{} requests, {} clients, cap {} tokens, MB (10^6 bytes)",
        mem.requests, mem.clients, mem.tokens
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
    if mem.upload_every > 0.0 {
        let what = format!(
            "voice uploads every {} s during the memory phase",
            mem.upload_every
        );
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
        let _ = std::fs::remove_dir_all(&mem.voices);
    }
    (mem_errors + upload_errors, growth)
}
