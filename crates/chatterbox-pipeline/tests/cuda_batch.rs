//! `SpeechBatch` on the GPU at full size, as `chatterbox serve` batches Turbo: 64 streams of
//! different texts and seeds spoken together (all joining at once, more than one flow call's
//! chunks due in a round), watermarked as served, against each stream spoken on its own. The
//! device comes from `chatterbox_cuda::open` (one ordered stream, the streams' host work on
//! rayon's threads) and nothing waits for the device between calls. In f32, with one chunk per
//! flow call every stream's audio is its solo stream's to the bit (batched T3 draws the solo
//! tokens in f32, chatterbox-t3's `tests/cuda_batch.rs`); with shared, padded flow calls it is
//! within [`SHARED_TOL`] of the solo audio's peak. In bf16 (as served), where batched T3 GEMMs
//! may flip random weights' near-ties, every stream of three batches of 64 (two of them
//! scheduled as served: paced, on a chunk grid, hops fitted) must end with finite, non-silent
//! audio: no stream fails (on per-thread streams, unwaited batched calls
//! gave NaN mels under load).
//!
//! The watermark is Perth: the shipped weights when `CHATTERBOX_PERTH` names
//! `perth_net_250000.pth.tar`, else Perth's architecture with seeded random weights (the same
//! kernels and the same work per chunk; the shipped file is 37 MB).
//!
//! Needs a GPU, `--features cuda` (elsewhere the tests are ignored, but still compiled) and a
//! full-size random Turbo checkpoint, `parity/checkpoints.py --variant turbo --size full --out
//! DIR`, in `CHATTERBOX_BATCH_CKPT` (default `/tmp/chatterbox-bench-turbo`, where the serve
//! bench writes it): `cargo test --release -p chatterbox-pipeline --features cuda --test
//! cuda_batch -- --nocapture`.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test

use chatterbox_pipeline::{perth_watermarker, Watermarker};
use chatterbox_pipeline::{
    BatchOptions, ChatterboxTurboTts, Conditionals, DType, Device, GenerateOptions, VoiceClip,
    S3GEN_SR, S3_SR,
};
use chatterbox_testkit::speech_like;
use chatterbox_watermark::PerthWatermarker;
use std::path::PathBuf;
use std::sync::Arc;

/// Tokens per stream (random weights rarely draw the stop token: every stream runs to it).
const TOKENS: usize = 125;

/// Largest `|batched - solo|` over the solo audio's peak with shared flow calls. Measured on an
/// H100 over 24 streams of 5 s (no watermark): 1.6e-4 to 3.6e-4 for most, 1.04e-3 at worst, against 1.4e-4 for
/// the tiny models of `tests/batch.rs` (whose tolerance, the pipeline fixtures' waveform
/// tolerance, is 1e-3): the padded calls' float rounding, carried through 5 s of HiFT.
const SHARED_TOL: f32 = 2e-3;

fn checkpoint() -> PathBuf {
    let dir = std::env::var_os("CHATTERBOX_BATCH_CKPT").map_or_else(
        || PathBuf::from("/tmp/chatterbox-bench-turbo"),
        PathBuf::from,
    );
    assert!(
        dir.join("t3_turbo_v1.safetensors").is_file(),
        "no full-size Turbo checkpoint in {} (parity/checkpoints.py --variant turbo --size full \
         --out DIR, then CHATTERBOX_BATCH_CKPT=DIR)",
        dir.display()
    );
    dir
}

/// Perth on `dev`: see the module docs.
fn perth(dev: &Device) -> Arc<dyn Watermarker> {
    match std::env::var_os("CHATTERBOX_PERTH") {
        Some(path) => perth_watermarker(PathBuf::from(path).as_path(), dev).unwrap(),
        None => Arc::new(PerthWatermarker::random(0x5eed, dev).unwrap()),
    }
}

fn model(dtype: DType) -> (ChatterboxTurboTts, Conditionals) {
    let dev = chatterbox_cuda::open(0).unwrap();
    let mut tts = ChatterboxTurboTts::from_dir(checkpoint(), false, &dev, dtype)
        .unwrap()
        .with_watermarker(Some(perth(&dev)));
    let clip = VoiceClip::from_parts(speech_like(S3GEN_SR, 10.0), speech_like(S3_SR, 10.0));
    tts.prepare_conditionals_from_clip(&clip, 0.0).unwrap();
    let conds = tts.conditionals().cloned().unwrap();
    (tts, conds)
}

/// Stream `i`'s text and options ([`TOKENS`] at most).
fn job(i: usize) -> (String, GenerateOptions) {
    job_of(i, TOKENS)
}

/// Stream `i`'s text and options, `tokens` at most.
fn job_of(i: usize, tokens: usize) -> (String, GenerateOptions) {
    let words = [
        "Good", "morning", "to", "you", "and", "all", "of", "the", "people", "here",
    ];
    let text: Vec<&str> = (0..3 + i % 8)
        .map(|k| words[(i + k) % words.len()])
        .collect();
    let mut o = GenerateOptions::turbo().with_seed(1000 + i as u64);
    o.max_new_tokens = tokens;
    (format!("{}.", text.join(" ")), o)
}

fn solo(tts: &ChatterboxTurboTts, i: usize) -> Vec<f32> {
    let (text, opts) = job(i);
    tts.stream(&text, &opts)
        .unwrap()
        .flat_map(|c| c.unwrap().samples)
        .collect()
}

/// `n` streams through one batch of `n` slots, `chunks_per_call` chunks per flow call at most; each
/// one's audio.
fn batched(
    tts: &ChatterboxTurboTts,
    conds: &Conditionals,
    n: usize,
    chunks_per_call: usize,
) -> Vec<Vec<f32>> {
    batched_of(tts, conds, n, chunks_per_call, TOKENS, false)
}

/// [`batched`] with `tokens` per stream at most; `served`: scheduled as `chatterbox serve`
/// schedules a batch on CUDA (paced schedules, a chunk grid of 10 rounds, hops fitted on at
/// least a 24 ms round), whose chunks then depend on the batch's timing.
fn batched_of(
    tts: &ChatterboxTurboTts,
    conds: &Conditionals,
    n: usize,
    chunks_per_call: usize,
    tokens: usize,
    served: bool,
) -> Vec<Vec<f32>> {
    let opts = BatchOptions::default()
        .with_slots(n)
        .with_positions(tokens + 512);
    let mut batch = tts.batch(opts).unwrap();
    batch.set_chunks_per_call(chunks_per_call);
    if served {
        batch.set_paced_schedule(true);
        batch.set_chunk_grid(Some(10));
        batch.set_hop_fitting(true);
        batch.set_round_budget(Some(std::time::Duration::from_millis(24)));
    }
    for i in 0..n {
        let (text, o) = job_of(i, tokens);
        batch.add(conds, &text, &o).unwrap();
    }
    let out = batch.finish_all();
    let t = batch.timings();
    println!(
        "{n} streams{}: {} rounds, {} flow calls of {:.1} chunks, {} HiFT calls, {} hops fitted",
        if served { " (as served)" } else { "" },
        t.rounds,
        t.flow_calls,
        t.flow_chunks as f64 / t.flow_calls.max(1) as f64,
        t.vocoder_calls,
        t.fitted_hops
    );
    if chunks_per_call > 1 {
        assert!(t.flow_chunks > t.flow_calls, "no flow call was shared");
    }
    out.into_iter()
        .enumerate()
        .map(|(i, (_, audio))| audio.unwrap_or_else(|e| panic!("stream {i} failed: {e}")))
        .collect()
}

#[test]
#[cfg_attr(not(feature = "cuda"), ignore = "needs --features cuda and a GPU")]
fn f32_streams_in_a_batch_equal_their_solo_streams() {
    let (tts, conds) = model(DType::F32);
    let n = 64;
    let want: Vec<Vec<f32>> = (0..n).map(|i| solo(&tts, i)).collect();
    for (i, (got, want)) in batched(&tts, &conds, n, 1).iter().zip(&want).enumerate() {
        assert!(
            got == want,
            "stream {i}: one chunk per flow call differs from solo"
        );
    }
    let mut worst_rel = 0f32;
    for (i, (got, want)) in batched(&tts, &conds, n, 16).iter().zip(&want).enumerate() {
        assert_eq!(got.len(), want.len(), "stream {i}: length");
        let peak = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        println!("stream {i}: max |batched - solo| {worst:.2e} of peak {peak:.2e}");
        assert!(peak > 0.0, "stream {i}: silent");
        assert!(
            worst <= SHARED_TOL * peak,
            "stream {i}: {worst:.2e} > {SHARED_TOL} x {peak:.2e}"
        );
        worst_rel = worst_rel.max(worst / peak);
    }
    println!("shared flow calls: worst |batched - solo| / peak {worst_rel:.2e}");
}

#[test]
#[cfg_attr(not(feature = "cuda"), ignore = "needs --features cuda and a GPU")]
fn bf16_streams_in_a_batch_all_finish_with_finite_audio() {
    let (tts, conds) = model(DType::BF16);
    for served in [false, true, true] {
        let cpc = chatterbox_pipeline::CHUNKS_PER_CALL;
        let got = batched_of(&tts, &conds, 64, cpc, TOKENS, served);
        for (i, audio) in got.iter().enumerate() {
            assert!(
                audio.iter().all(|v| v.is_finite()),
                "stream {i}: not finite"
            );
            assert!(audio.iter().any(|&v| v != 0.0), "stream {i}: silent");
        }
        let shortest = got.iter().map(Vec::len).min().unwrap_or(0);
        println!("shortest stream: {shortest} samples (a stop token can end one early)");
    }
}

/// A batch small enough for `compute-sanitizer` (which runs kernels ~100x slower): 8 bf16
/// streams of 40 tokens, watermarked, sharing flow and HiFT calls as served; every stream ends with
/// finite, non-silent audio. Run under `compute-sanitizer --tool memcheck
/// --track-stream-ordered-races all` with `--exact a_small_batch_runs_clean` (docs/cuda.md).
#[test]
#[cfg_attr(not(feature = "cuda"), ignore = "needs --features cuda and a GPU")]
fn a_small_batch_runs_clean() {
    let (tts, conds) = model(DType::BF16);
    for (i, audio) in batched_of(&tts, &conds, 8, 4, 40, true).iter().enumerate() {
        assert!(
            audio.iter().all(|v| v.is_finite()),
            "stream {i}: not finite"
        );
        assert!(audio.iter().any(|&v| v != 0.0), "stream {i}: silent");
    }
}
