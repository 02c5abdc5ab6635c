//! `cargo xtask bench stream --threads 2`: token-by-token streaming (issue 21) against
//! `generate`, for English (CFG) and Turbo with their default options, on full-size random
//! checkpoints, as JSON records (`CHATTERBOX_BENCH_OUT`, else stdout);
//! `parity/bench/stream.py` times the reference's `generate` on the same checkpoints and text
//! (the reference does not stream: its time to first audio is its whole `generate`).
//!
//! Checkpoints: `CHATTERBOX_STREAM_CKPT_ENGLISH` / `CHATTERBOX_STREAM_CKPT_TURBO`, else
//! `/tmp/chatterbox-bench-english` / `/tmp/chatterbox-bench-turbo`, written on first use by
//! `parity/checkpoints.py --size full` (the parity venv). With existing directories the
//! binary needs no Python.
//!
//! The voice (a 10 s speech-like clip, as in `pipeline.rs`) is prepared before the clock
//! starts. The text is a fixed 3-sentence English text of ~200 characters (one text chunk at
//! the default `max_chunk_chars`), seed 0, `max_new_tokens` = `CHATTERBOX_STREAM_TOKENS`
//! (default 250, ~10 s of audio). The stop token stays on (the pipeline's options cannot turn
//! it off): random weights rarely draw it, and `*_audio_s` shows how much audio came out
//! (English drops drawn ids >= 6561, ~20% of random draws: 250 tokens give ~8 s).
//! Stages, each prefixed with the variant (`english_`, `turbo_`):
//! * `ttfa`: from the `stream()` call to the first `AudioChunk`;
//! * `stream_total`: the whole stream consumed; `generate_total`: `generate`, same options;
//! * `stream_over_generate`: their ratio (a ratio stored in the `*_ms` fields);
//! * `underrun_margin`: a listener starts playing at the first chunk; chunk `i` (at sample
//!   offset `o_i`) is due at `t_first + o_i / 24 kHz`; the worst margin over the later chunks
//!   (ms; negative: the audio ran dry). Chunk 0's margin is 0 by definition; with one chunk
//!   only, 0;
//! * `audio_s`: seconds of audio streamed (stored in the `*_ms` fields);
//! * `synth_chunk_<k>`: `StreamingSynth` alone (flow + HiFT per chunk) fed a fixed
//!   pseudo-random sequence of `CHATTERBOX_STREAM_SYNTH_TOKENS` (default 400) speech tokens one
//!   at a time with the variant's schedule: the time of chunk `k`, whose flow re-runs on the
//!   whole prefix behind the voice's prompt (250 tokens for the 10 s clip; the shape names
//!   both); the last one is `finish`.
//!
//! Knobs: `CHATTERBOX_STREAM_HOPS=12,24,48` replaces both variants' schedule;
//! `CHATTERBOX_BENCH_RUNS` timed runs (median; default 3) after one warm-up;
//! `CHATTERBOX_STREAM_ONLY=english|turbo`; `CHATTERBOX_STREAM_WORD_ALIGNMENT=1` times caption
//! words from T3's alignment heads (`GenerateOptions::word_alignment`, English; issue 44's
//! cost); `CHATTERBOX_BENCH_DEVICE=cuda` (with
//! `--features cuda`) runs on GPU 0 with bf16 T3 and flow.
use candle_core::Device;
use chatterbox_pipeline::{
    Audio, ChatterboxTts, ChatterboxTurboTts, Conditionals, GenerateOptions, S3Gen, S3GenOptions,
    SeededDraws, SpeechStream, StreamSchedule, StreamingSynth, VoiceClip, S3GEN_SR, S3_SR,
};
use chatterbox_testkit::{
    bench_dtype, checkpoint_dir, device_name, env_usize, full_size_checkpoint, speech_like,
    test_device, underrun_margin, BenchRun,
};
use std::time::Instant;

/// Three sentences, 196 characters: one text chunk at `max_chunk_chars` 250.
/// parity/bench/stream.py speaks the same text.
const TEXT: &str = "The quick brown fox jumps over the lazy dog near the old river bank. \
                    Then it runs far away into the green forest, where nobody can find it. \
                    At night it sleeps under a tall oak tree, safe and warm.";

/// `n` speech tokens below 6561, pseudo-random and fixed (a 64-bit LCG).
fn synth_tokens(n: usize) -> Vec<u32> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((x >> 33) % 6561) as u32
        })
        .collect()
}

/// What the bench needs of both models (the same methods, generated per type).
trait Model {
    fn stream_text(
        &self,
        text: &str,
        o: &GenerateOptions,
    ) -> chatterbox_pipeline::Result<SpeechStream<'_>>;
    fn generate_text(&self, text: &str, o: &GenerateOptions) -> chatterbox_pipeline::Result<Audio>;
    fn s3(&self) -> &S3Gen;
    fn voice(&self) -> Option<&Conditionals>;
    fn options(&self) -> GenerateOptions;
}

macro_rules! model {
    ($t:ty) => {
        impl Model for $t {
            fn stream_text(
                &self,
                text: &str,
                o: &GenerateOptions,
            ) -> chatterbox_pipeline::Result<SpeechStream<'_>> {
                self.stream(text, o)
            }
            fn generate_text(
                &self,
                text: &str,
                o: &GenerateOptions,
            ) -> chatterbox_pipeline::Result<Audio> {
                self.generate(text, o)
            }
            fn s3(&self) -> &S3Gen {
                self.s3gen()
            }
            fn voice(&self) -> Option<&Conditionals> {
                self.conditionals()
            }
            fn options(&self) -> GenerateOptions {
                self.default_options()
            }
        }
    };
}
model!(ChatterboxTts);
model!(ChatterboxTurboTts);

fn ms(t: Instant, dev: &Device) -> anyhow::Result<f64> {
    // orders the clock read after the timed device work
    dev.synchronize()?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

struct Settings {
    runs: usize,
    n_tokens: usize,
    n_synth: usize,
    hops: Option<Vec<usize>>,
}

/// A chunk handed out: arrival (ms since the `stream()` call), sample offset, length.
type Arrival = (f64, usize, usize);

/// One streamed generation: arrival times (ms since the `stream()` call), sample offsets and
/// lengths of the chunks, and the total time.
fn stream_once(
    model: &dyn Model,
    opts: &GenerateOptions,
    dev: &Device,
) -> anyhow::Result<(Vec<Arrival>, f64)> {
    let t = Instant::now();
    let stream = model.stream_text(TEXT, opts)?;
    anyhow::ensure!(
        stream.sentences() == 1,
        "the bench text should be one text chunk, got {}",
        stream.sentences()
    );
    let mut chunks = Vec::new();
    for c in stream {
        let c = c?;
        chunks.push((ms(t, dev)?, c.sample_offset, c.samples.len()));
    }
    Ok((chunks, ms(t, dev)?))
}

fn bench_variant(
    bench: &mut BenchRun,
    name: &str,
    model: &dyn Model,
    dev: &Device,
    s: &Settings,
) -> anyhow::Result<()> {
    let mut opts = model.options();
    opts.seed = Some(0);
    opts.max_new_tokens = s.n_tokens;
    if let Some(h) = &s.hops {
        opts.stream = StreamSchedule::new(h.clone());
    }
    // issue 44's cost of caption words timed from T3's alignment heads (English only)
    opts.word_alignment = std::env::var_os("CHATTERBOX_STREAM_WORD_ALIGNMENT").is_some();
    let hops = format!("{:?}", opts.stream.hops);
    let names = [
        "ttfa",
        "stream_total",
        "generate_total",
        "stream_over_generate",
        "underrun_margin",
        "audio_s",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let (mut n_chunks, mut n_samples, mut gen_samples) = (0, 0, 0);
    for run in 0..=s.runs {
        let (chunks, total) = stream_once(model, &opts, dev)?;
        let t = Instant::now();
        let audio = model.generate_text(TEXT, &opts)?;
        let gen = ms(t, dev)?;
        n_chunks = chunks.len();
        n_samples = chunks.last().map_or(0, |c| c.1 + c.2);
        gen_samples = audio.samples.len();
        let ttfa = chunks.first().map_or(f64::NAN, |c| c.0);
        let margin = underrun_margin(&chunks, S3GEN_SR);
        let audio_s = n_samples as f64 / f64::from(S3GEN_SR);
        eprintln!(
            "{name} run {run}{}: ttfa {ttfa:.1} ms, stream {total:.1} ms, generate {gen:.1} ms, \
             {n_chunks} chunks, {audio_s:.2} s of audio (generate {:.2} s), margin {margin:.1} ms",
            if run == 0 { " (warm-up)" } else { "" },
            gen_samples as f64 / f64::from(S3GEN_SR),
        );
        if run > 0 {
            let row = [ttfa, total, gen, total / gen, margin, audio_s];
            for (v, x) in times.iter_mut().zip(row) {
                v.push(x);
            }
        }
    }
    if n_samples != gen_samples {
        eprintln!(
            "note: {name}: the stream gave {n_samples} samples, generate {gen_samples} \
             (different token counts?)"
        );
    }
    let audio_s = n_samples as f64 / f64::from(S3GEN_SR);
    let shapes = [
        format!("first chunk, hops {hops}, max {} tokens", s.n_tokens),
        format!(
            "{n_chunks} chunks, {audio_s:.2} s audio, {} tokens",
            s.n_tokens
        ),
        format!(
            "{:.2} s audio, {} tokens",
            gen_samples as f64 / f64::from(S3GEN_SR),
            s.n_tokens
        ),
        "ratio: stream total / generate total".into(),
        "worst chunk deadline margin (ms, < 0: underrun)".into(),
        "seconds of streamed audio (not ms)".into(),
    ];
    for ((n, mut v), shape) in names.iter().zip(times).zip(shapes) {
        bench.push_times(&format!("{name}_{n}"), shape, &mut v);
    }

    // The flow's prefix cost: StreamingSynth alone, chunk by chunk.
    let conds = model.voice().ok_or_else(|| anyhow::anyhow!("no voice"))?;
    let mut s3opts = S3GenOptions::default();
    s3opts.n_cfm_timesteps = opts.n_cfm_timesteps.or((name == "turbo").then_some(2));
    let tokens = synth_tokens(s.n_synth);
    let prompt = conds.gen.n_prompt_tokens();
    let mut per_chunk: Vec<Vec<f64>> = Vec::new();
    let mut shapes: Vec<String> = Vec::new();
    for run in 0..=s.runs {
        let mut synth = StreamingSynth::new(
            model.s3(),
            &conds.gen,
            opts.stream.clone(),
            s3opts.clone(),
            SeededDraws::new(0),
        )?;
        let mut row = Vec::new();
        let mut shape = Vec::new();
        let mut start = 0;
        // `hop`: the tokens the chunk made final; `None` for the last chunk (`finish`).
        let mut record = |took: f64, hop: Option<usize>, n: usize| {
            let k = row.len();
            let end = hop.map_or(n, |h| start + h);
            let sh = format!(
                "new tokens {start}..{end}, flow on {prompt} prompt + {n} tokens{}, flow+HiFT",
                if hop.is_none() { " (finish)" } else { "" }
            );
            eprintln!("{name} synth run {run}: chunk {k} {took:.1} ms, {sh}");
            row.push(took);
            shape.push(sh);
            start = end;
        };
        for (i, &tok) in tokens.iter().enumerate() {
            let t = Instant::now();
            let chunks = synth.push_chunks(&[tok])?;
            let took = ms(t, dev)?;
            for c in &chunks {
                record(
                    took / chunks.len() as f64,
                    Some(opts.stream.hop(c.index)),
                    i + 1,
                );
            }
        }
        let t = Instant::now();
        synth.finish_chunk()?;
        record(ms(t, dev)?, None, tokens.len());
        if run > 0 {
            per_chunk.resize(row.len(), Vec::new());
            for (v, x) in per_chunk.iter_mut().zip(row) {
                v.push(x);
            }
        }
        shapes = shape;
    }
    for (k, (mut v, shape)) in per_chunk.into_iter().zip(shapes).enumerate() {
        bench.push_times(&format!("{name}_synth_chunk_{k}"), shape, &mut v);
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let threads = env_usize("CHATTERBOX_BENCH_THREADS", 1);
    let dev = test_device("CHATTERBOX_BENCH_DEVICE")?;
    let (dtype, device) = (bench_dtype(&dev), device_name(&dev));
    let hops = match std::env::var("CHATTERBOX_STREAM_HOPS") {
        Ok(h) if !h.trim().is_empty() => Some(
            h.split(',')
                .map(|x| x.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| anyhow::anyhow!("CHATTERBOX_STREAM_HOPS={h:?}: {e}"))?,
        ),
        _ => None,
    };
    let settings = Settings {
        runs: env_usize("CHATTERBOX_BENCH_RUNS", 3).max(1),
        n_tokens: env_usize("CHATTERBOX_STREAM_TOKENS", 250),
        n_synth: env_usize("CHATTERBOX_STREAM_SYNTH_TOKENS", 400),
        hops,
    };
    let only = std::env::var("CHATTERBOX_STREAM_ONLY").unwrap_or_default();
    let mut bench = BenchRun::new("stream", device, threads, 30);
    let clip = VoiceClip::from_parts(speech_like(S3GEN_SR, 10.0), speech_like(S3_SR, 10.0));
    if only.is_empty() || only == "english" {
        let env = "CHATTERBOX_STREAM_CKPT_ENGLISH";
        let dir = full_size_checkpoint(
            checkpoint_dir(env, "english"),
            "english",
            "t3_cfg.safetensors",
        )?;
        let mut tts = ChatterboxTts::from_dir(&dir, &dev, dtype)?;
        tts.prepare_conditionals_from_clip(&clip, 0.5)?;
        bench_variant(&mut bench, "english", &tts, &dev, &settings)?;
    }
    if only.is_empty() || only == "turbo" {
        let env = "CHATTERBOX_STREAM_CKPT_TURBO";
        let dir = full_size_checkpoint(
            checkpoint_dir(env, "turbo"),
            "turbo",
            "t3_turbo_v1.safetensors",
        )?;
        let mut tts = ChatterboxTurboTts::from_dir(&dir, false, &dev, dtype)?;
        tts.prepare_conditionals_from_clip(&clip, 0.0)?;
        bench_variant(&mut bench, "turbo", &tts, &dev, &settings)?;
    }
    bench.emit()?;
    Ok(())
}
