//! Long voice-conversion sources (issue #26, point 8).
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_pipeline::{
    Audio, ChatterboxConfig, ChatterboxVc, Draws, PipelineError, S3Gen, S3GenOptions, SeededDraws,
    VcOptions, S3GEN_SR, S3_SR,
};
use chatterbox_testkit::{fixtures_root, speech_like};
use chatterbox_vocoder::SineDraws;
use std::collections::HashMap;
use std::time::Instant;

fn fixture(case: &str) -> HashMap<String, Tensor> {
    let path = fixtures_root()
        .join("pipeline")
        .join(format!("{case}.safetensors"));
    candle_core::safetensors::load(path, &Device::Cpu).unwrap()
}

fn f32s(t: &HashMap<String, Tensor>, name: &str) -> Vec<f32> {
    t[name]
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// The tiny english S3Gen of the parity fixtures, with the english case's reference clip as
/// the target voice.
fn tiny_vc() -> ChatterboxVc {
    let t = fixture("english");
    let s3: HashMap<String, Tensor> = t
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("s3gen.").map(|k| (k.to_string(), v.clone())))
        .collect();
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures_root().join("pipeline/english.json")).unwrap(),
    )
    .unwrap();
    let cfg: ChatterboxConfig =
        serde_json::from_value(meta["config"]["chatterbox"].clone()).unwrap();
    let vb = VarBuilder::from_tensors(s3, DType::F32, &Device::Cpu);
    let s3gen = S3Gen::new(&cfg.s3gen, vb, DType::F32).unwrap();
    let mut vc = ChatterboxVc::new(s3gen, None);
    vc.set_target_voice_24k(&f32s(&t, "in.ref_24k")).unwrap();
    vc
}

/// 12 s of source in windows of 4 s overlapping by 1 s: four windows.
fn long_opts() -> VcOptions {
    VcOptions::default().with_seed(3).with_window(4_000, 1_000)
}

fn long_source() -> Vec<f32> {
    speech_like(S3_SR, 12.0)
}

/// The S3 tokenizer's token count for `samples` 16 kHz samples (a mel frame per 160 samples,
/// two stride-2 convolutions): a single pass gives 960 output samples per token.
fn tokens_for(samples: usize) -> usize {
    (samples / 160).div_ceil(4)
}

#[test]
fn long_source_is_converted_window_by_window() {
    let vc = tiny_vc();
    let src = long_source();
    let mut events = Vec::new();
    let audio = vc
        .generate_with_progress(&Audio::new(src.clone(), S3_SR), &long_opts(), &mut |p| {
            events.push((p.done, p.total))
        })
        .unwrap();
    // progress: once before the first window, then after each
    assert_eq!(events, (0..=4).map(|d| (d, 4)).collect::<Vec<_>>());
    // the single pass's length: 960 samples per token of the whole source (the kept stretches
    // of the windows tile the tokens; each crossfade overlaps two of them by its own length)
    assert_eq!(audio.sample_rate, S3GEN_SR);
    assert_eq!(audio.samples.len(), 960 * tokens_for(src.len()));
    let single = vc
        .generate_16k(
            &src,
            &long_opts().with_window(0, 0),
            &mut SeededDraws::new(3),
        )
        .unwrap();
    assert_eq!(audio.samples.len(), single.len());
    assert!(audio.samples.iter().all(|v| v.is_finite()));
    assert!(audio.samples.iter().any(|&v| v != 0.0));
    // the same seed, the same audio; streamed, the same samples
    let again = vc
        .generate(&Audio::new(src.clone(), S3_SR), &long_opts())
        .unwrap();
    assert_eq!(again.samples, audio.samples);
    let mut streamed = Vec::new();
    vc.generate_stream(
        &Audio::new(src, S3_SR),
        &long_opts(),
        &mut |_| {},
        &mut |s| {
            streamed.extend_from_slice(s);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(streamed, audio.samples);
}

#[test]
fn any_length_keeps_the_single_pass_length() {
    let vc = tiny_vc();
    // a partial last token: under 160 samples (no mel frame) and over
    for extra in [1, 100, 300, 639] {
        let src = speech_like(S3_SR, 9.0)[..9 * 16_000 - 640 + extra].to_vec();
        let windowed = vc
            .generate_16k(&src, &long_opts(), &mut SeededDraws::new(0))
            .unwrap();
        let single = vc
            .generate_16k(
                &src,
                &long_opts().with_window(0, 0),
                &mut SeededDraws::new(0),
            )
            .unwrap();
        assert_eq!(windowed.len(), single.len(), "{} samples", src.len());
        assert_eq!(windowed.len(), 960 * tokens_for(src.len()));
    }
}

#[test]
fn joins_are_smooth() {
    let vc = tiny_vc();
    let mut chunks = Vec::new();
    vc.generate_stream(
        &Audio::new(long_source(), S3_SR),
        &long_opts(),
        &mut |_| {},
        &mut |s| {
            chunks.push(s.to_vec());
            Ok(())
        },
    )
    .unwrap();
    // Streaming hands out each window's audio up to the start of the next join's crossfade
    // (50 ms: 1200 samples at 24 kHz), so each chunk boundary opens a join.
    assert_eq!(chunks.len(), 4 + 1);
    let wav: Vec<f32> = chunks.concat();
    let diffs: Vec<f32> = wav.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    let mut sorted = diffs.clone();
    sorted.sort_by(f32::total_cmp);
    let p999 = sorted[sorted.len() * 999 / 1000];
    let joins: Vec<usize> = chunks[..3]
        .iter()
        .scan(0, |at, c| {
            *at += c.len();
            Some(*at)
        })
        .collect();
    // the largest step away from the joins
    let max = diffs
        .iter()
        .enumerate()
        .filter(|(i, _)| !joins.iter().any(|&j| (j - 2..j + 1202).contains(i)))
        .fold(0f32, |m, (_, &d)| m.max(d));
    for at in joins {
        // the crossfade runs over samples at..at + 1200: its edges are where a hard cut would
        // jump, and inside it the two windows' audio is mixed
        let edges = [&diffs[at - 2..at + 2], &diffs[at + 1198..at + 1202]].concat();
        let edge = edges.iter().copied().fold(0.0, f32::max);
        let inside = diffs[at..at + 1200].iter().copied().fold(0.0, f32::max);
        assert!(
            edge <= p999,
            "join at sample {at}: step {edge} above the signal's 99.9th percentile {p999}"
        );
        assert!(
            inside <= max,
            "join at sample {at}: step {inside} in the crossfade above the largest step \
             elsewhere {max}"
        );
    }
}

#[test]
fn short_source_takes_the_single_pass() {
    let vc = tiny_vc();
    let t = fixture("vc");
    let src = f32s(&t, "in.source_16k");
    let mut events = Vec::new();
    let mut draws = RecordedDraws::new(&t);
    let opts = VcOptions::default().with_window(400, 160); // 10 tokens: the source has 15
    let windowed = vc.generate_16k(&src, &opts, &mut draws.clone()).unwrap();
    assert_eq!(windowed.len(), 14_400);
    // up to one window: exactly the old code, tokenizer then S3Gen over the whole source
    let wav = vc
        .generate_16k(&src, &VcOptions::default(), &mut draws)
        .unwrap();
    let tokens = vc
        .s3gen()
        .tokenizer()
        .forward(&[&src], S3_SR, None)
        .unwrap();
    let tokens = tokens.to_vecs().unwrap().remove(0);
    let old = vc
        .s3gen()
        .inference(
            &tokens,
            vc.target().unwrap(),
            &S3GenOptions::default(),
            &mut RecordedDraws::new(&t),
        )
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert_eq!(wav, old);
    // and the reference's output (the parity row's tolerance: 1e-3 of the peak)
    let reference = f32s(&t, "out.wav");
    assert_eq!(wav.len(), reference.len());
    let peak = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = wav
        .iter()
        .zip(&reference)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= 1e-3 * peak, "max error {err} of peak {peak}");
    // progress: one window
    vc.generate_with_progress(&Audio::new(src, S3_SR), &VcOptions::default(), &mut |p| {
        events.push((p.done, p.total))
    })
    .unwrap();
    assert_eq!(events, vec![(0, 1), (1, 1)]);
}

#[test]
fn bad_windows_are_errors() {
    let vc = tiny_vc();
    let src = Audio::new(long_source(), S3_SR);
    for (w, o) in [(4_000, 100), (4_000, 2_500)] {
        let err = vc
            .generate(&src, &VcOptions::default().with_window(w, o))
            .unwrap_err();
        assert!(matches!(err, PipelineError::InvalidInput { .. }), "{err}");
    }
}

/// S3Gen's draws as the reference drew them (the vc fixture's), for one pass.
#[derive(Clone)]
struct RecordedDraws {
    cfm_noise: Tensor,
    phase: Tensor,
    noise_block: Tensor,
}

impl RecordedDraws {
    fn new(t: &HashMap<String, Tensor>) -> Self {
        let get = |k: &str| t[k].to_dtype(DType::F32).unwrap();
        Self {
            cfm_noise: get("in.cfm_noise"),
            phase: get("in.sine_phase"),
            noise_block: get("in.sine_noise_block"),
        }
    }
}

impl Draws for RecordedDraws {
    fn cfm_noise(
        &mut self,
        shape: (usize, usize, usize),
        _: &Device,
    ) -> chatterbox_pipeline::Result<Tensor> {
        let t = self
            .cfm_noise
            .narrow(2, 0, shape.2.min(self.cfm_noise.dim(2)?))?;
        Ok(t)
    }

    fn noised_mels(
        &mut self,
        _: (usize, usize, usize),
        _: &Device,
    ) -> chatterbox_pipeline::Result<Tensor> {
        unreachable!("not a meanflow model")
    }

    fn sine(
        &mut self,
        _: usize,
        _: usize,
        samples: usize,
        _: &Device,
    ) -> chatterbox_pipeline::Result<SineDraws> {
        // The recorder tiled a short noise block over time.
        let reps = samples.div_ceil(self.noise_block.dim(2)?);
        let noise = self
            .noise_block
            .repeat((1, 1, reps))?
            .narrow(2, 0, samples)?;
        Ok(SineDraws::new(self.phase.clone(), noise.contiguous()?))
    }
}

/// Seconds `generate` takes on a full-size checkpoint (`CHATTERBOX_VC_CKPT`: a directory with
/// `s3gen.safetensors`, real or random, e.g. from `cargo xtask random-checkpoint --variant
/// english`) with a 10 s target voice, for sources of 1x, 2x, 4x and 8x
/// `CHATTERBOX_VC_BASE_SECS` (default 5) seconds (`CHATTERBOX_VC_FACTORS`), in one pass
/// (`window_ms = 0`, the reference's way) and windowed (the default options;
/// `CHATTERBOX_VC_MODES=single,windowed`):
/// `cargo test --release -p chatterbox-pipeline --test vc_long -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement (minutes on a CPU), not a check"]
fn cost_per_length() {
    let env = |name: &str| std::env::var(name).ok().filter(|s| !s.is_empty());
    let Some(dir) = env("CHATTERBOX_VC_CKPT") else {
        panic!("set CHATTERBOX_VC_CKPT to a full-size checkpoint directory");
    };
    let base: f64 = env("CHATTERBOX_VC_BASE_SECS")
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let factors: Vec<f64> = env("CHATTERBOX_VC_FACTORS")
        .map(|s| s.split(',').filter_map(|f| f.parse().ok()).collect())
        .unwrap_or_else(|| vec![1.0, 2.0, 4.0, 8.0]);
    let modes = env("CHATTERBOX_VC_MODES").unwrap_or_else(|| "single,windowed".into());
    let mut vc = ChatterboxVc::from_dir(dir, &Device::Cpu, DType::F32).unwrap();
    vc.set_target_voice_24k(&speech_like(S3GEN_SR, 10.0))
        .unwrap();
    for mode in modes.split(',') {
        let opts = match mode {
            "single" => VcOptions::default().with_window(0, 0),
            _ => VcOptions::default(),
        };
        for &f in &factors {
            let secs = base * f;
            let src = Audio::new(speech_like(S3_SR, secs), S3_SR);
            let mut windows = 0;
            let (t, cpu) = (Instant::now(), cpu_secs());
            let out = vc
                .generate_with_progress(&src, &opts, &mut |p| windows = p.total)
                .unwrap();
            let took = t.elapsed().as_secs_f64();
            let cpu = cpu_secs().zip(cpu).map(|(b, a)| b - a).unwrap_or(f64::NAN);
            eprintln!(
                "{mode:>8}: source {secs:5.1} s ({windows} window(s)) -> {:5.1} s of audio in \
                 {took:6.1} s wall, {cpu:6.1} s CPU ({:.2} CPU s per source second)",
                out.duration_secs(),
                cpu / secs
            );
        }
    }
}

/// User + system CPU seconds of this process, all threads (Linux `/proc/self/stat`, 100 ticks
/// per second): the cost, unlike wall time, hardly moves when other work shares the CPU.
fn cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
