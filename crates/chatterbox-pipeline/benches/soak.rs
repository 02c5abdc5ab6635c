//! `cargo xtask bench soak --threads 2 --no-reference`: the soak of issue 26 (point 12), on a
//! full-size random checkpoint, as JSON records (`CHATTERBOX_BENCH_OUT`, else stdout). There is
//! no reference side (no `parity/bench/soak.py`).
//!
//! Variant: `CHATTERBOX_SOAK_VARIANT` = `english` | `turbo` | `nano` (default `turbo`).
//! Checkpoint: `CHATTERBOX_SOAK_CKPT`, else `/tmp/chatterbox-bench-<variant>`, written on first
//! use by `parity/checkpoints.py --size full` (the parity venv). The voice is the 10 s
//! speech-like clip of `pipeline.rs`, prepared before anything is measured.
//! `CHATTERBOX_BENCH_DEVICE=cuda` (with `--features cuda`) runs on GPU 0 with bf16 T3 and flow.
//!
//! Memory: the process's resident set (`chatterbox_pipeline::resident_memory_bytes`) and, on CUDA, the
//! device's used memory (total - free as the driver reports it, so memory kept in the driver's
//! pool and other processes' memory count too), both in MB (10^6 bytes).
//!
//! Phase 1, the long text: a deterministic text of varied sentences sized for
//! `CHATTERBOX_SOAK_MINUTES` minutes of speech (default 10, at ~14 characters a second),
//! spoken with `generate_stream` (sentence chunks; the samples are counted and dropped), seed
//! `CHATTERBOX_SOAK_SEED` (default 0). Memory is sampled at the start, after every text chunk and at the end; the series goes
//! to a CSV (`CHATTERBOX_SOAK_SERIES`, else `soak-series.csv` beside `CHATTERBOX_BENCH_OUT`,
//! else `target/bench/soak-series.csv`): seconds since the start, seconds of audio so far,
//! RSS MB, GPU MB (empty on the CPU). Random weights rarely draw the stop token, so each chunk
//! runs to `max_new_tokens` = `CHATTERBOX_SOAK_LONG_TOKENS` (default: the mean text chunk's
//! speaking time at 25 tokens a second, ~360 for chunks of ~200 characters), which makes the
//! audio about as long as the text would be spoken; `long_audio_s` says how much came out
//! (English drops the ~20% of random draws that are not speech tokens).
//! Records: `long_rss_start_mb`, `long_rss_max_mb`, `long_rss_end_mb`,
//! `long_gpu_used_{start,max,end}_mb` (CUDA only), `long_audio_s`, `long_wall_s`, `long_rtf`.
//!
//! Phase 2, many generations: `CHATTERBOX_SOAK_GENERATIONS` (default 200) `generate` calls on
//! short varied sentences in the same process, seeds 1, 2, ..., each capped at
//! `CHATTERBOX_SOAK_TOKENS` (default 60) speech tokens. Records: `many_rss_after_first_mb`,
//! `many_rss_after_last_mb`, `many_rss_max_mb`, `many_rss_growth_mb` (last - first), the
//! `many_gpu_used_*` equivalents (CUDA only), `many_wall_s`.
//!
//! Every value is stored in the records' `*_ms` fields (one sample); the shape names its unit.
//! The leak check: the run fails (after writing its records) when the RSS grows by more than
//! `CHATTERBOX_SOAK_MAX_GROWTH_MB` (default 64) between the first and the last generation of
//! phase 2. `CHATTERBOX_SOAK_SKIP_LONG=1` / `CHATTERBOX_SOAK_SKIP_MANY=1` skip a phase.
use candle_core::Device;
use chatterbox_pipeline::{
    Audio, ChatterboxTts, ChatterboxTurboTts, GenerateOptions, Progress, VoiceClip, S3GEN_SR, S3_SR,
};
use chatterbox_testkit::{
    bench_dtype, checkpoint_dir, device_name, env_f64, env_usize, full_size_checkpoint,
    speech_like, test_device, BenchRun, MemorySample,
};
use std::cell::Cell;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Sentence templates: `{p}` a person, `{c}` a place, `{t}` a thing, `{n}` a number.
const TEMPLATES: [&str; 32] = [
    "{p} walked to {c} early in the morning and bought {n} loaves of bread.",
    "Nobody expected the {t} to last for {n} years, but it never broke.",
    "In {c}, the trains leave every {n} minutes, even on a quiet Sunday.",
    "{p} said the {t} was far too heavy to carry up the stairs alone.",
    "We counted {n} birds on the roof before the rain began to fall.",
    "Have you ever seen a {t} as old as the one in the museum of {c}?",
    "The meeting with {p} lasted {n} minutes longer than anyone had planned.",
    "After the storm, the road to {c} was closed for {n} days.",
    "{p} keeps a small {t} on the desk, next to a photograph of the sea.",
    "It took {n} tries to open the door, and then it simply swung open.",
    "The market in {c} sells fresh fish, ripe fruit and an old {t} or two.",
    "When the lights went out, {p} lit {n} candles and kept on reading.",
    "Please remember to bring the {t} when you come back from {c}.",
    "The recipe asks for {n} eggs, a cup of milk and a pinch of salt.",
    "{p} laughed so loudly that the whole room turned to look.",
    "There are {n} steps between the river and the church in {c}.",
    "Why would anyone leave a {t} in the middle of the garden path?",
    "On the {n}th floor, {p} found a window that looked over the whole city.",
    "The children of {c} built a {t} out of cardboard and string.",
    "{p} wrote {n} letters that winter and posted every one of them.",
    "A cold wind came down from the hills and rattled the {t}.",
    "The bus to {c} was late again, by almost {n} minutes.",
    "Nobody in the village knew who had painted the {t} bright yellow.",
    "{p} planted {n} apple trees behind the house last spring.",
    "The old clock in {c} strikes the hour a little before everyone else's.",
    "If the weather holds, we will sail to {c} in {n} days.",
    "{p} found the {t} under a pile of newspapers in the attic.",
    "The concert hall holds {n} people, and tonight every seat is taken.",
    "Slowly, carefully, {p} put the {t} back on the top shelf.",
    "From the top of the hill you can see {c} and the sea beyond it.",
    "The library in {c} lends out {n} books on a busy afternoon.",
    "Wait here, said {p}, and do not touch the {t} until I come back.",
];
const PEOPLE: [&str; 12] = [
    "Anna",
    "Marco",
    "Doctor Patel",
    "Grandma Rose",
    "Kenji",
    "Lucia",
    "Mister Brown",
    "Fatima",
    "Oliver",
    "the captain",
    "Sofia",
    "Uncle Tom",
];
const PLACES: [&str; 10] = [
    "Lisbon",
    "the harbour",
    "Oslo",
    "the old town",
    "Nairobi",
    "the valley",
    "Montreal",
    "the station",
    "Kyoto",
    "the island",
];
const THINGS: [&str; 10] = [
    "lamp",
    "bicycle",
    "violin",
    "suitcase",
    "kettle",
    "map",
    "telescope",
    "blanket",
    "mirror",
    "radio",
];

/// A 64-bit LCG: deterministic text without a dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Sentence `i` of the deterministic sequence (templates in a fixed shuffled order, fillers
/// and numbers drawn from `rng`).
fn sentence(i: usize, rng: &mut Lcg) -> String {
    let t = TEMPLATES[(i * 7 + i / TEMPLATES.len()) % TEMPLATES.len()];
    t.replace("{p}", PEOPLE[rng.next(PEOPLE.len())])
        .replace("{c}", PLACES[rng.next(PLACES.len())])
        .replace("{t}", THINGS[rng.next(THINGS.len())])
        .replace("{n}", &(2 + rng.next(97)).to_string())
}

/// A text of about `chars` characters, in paragraphs of five sentences.
fn long_text(chars: usize) -> String {
    let mut rng = Lcg(0x9e37_79b9_7f4a_7c15);
    let mut text = String::new();
    let mut i = 0;
    while text.len() < chars {
        if i > 0 {
            text.push_str(if i % 5 == 0 { "\n\n" } else { " " });
        }
        text.push_str(&sentence(i, &mut rng));
        i += 1;
    }
    text
}

/// What the soak needs of a model (the same methods, generated per type).
trait Model {
    fn speak_stream(
        &self,
        text: &str,
        o: &GenerateOptions,
        progress: &mut dyn FnMut(&Progress),
        on_audio: &mut dyn FnMut(&[f32]) -> chatterbox_pipeline::Result<()>,
    ) -> chatterbox_pipeline::Result<()>;
    fn speak(&self, text: &str, o: &GenerateOptions) -> chatterbox_pipeline::Result<Audio>;
    fn options(&self) -> GenerateOptions;
}

macro_rules! model {
    ($t:ty) => {
        impl Model for $t {
            fn speak_stream(
                &self,
                text: &str,
                o: &GenerateOptions,
                progress: &mut dyn FnMut(&Progress),
                on_audio: &mut dyn FnMut(&[f32]) -> chatterbox_pipeline::Result<()>,
            ) -> chatterbox_pipeline::Result<()> {
                self.generate_stream(text, o, progress, on_audio)
            }
            fn speak(&self, text: &str, o: &GenerateOptions) -> chatterbox_pipeline::Result<Audio> {
                self.generate(text, o)
            }
            fn options(&self) -> GenerateOptions {
                self.default_options()
            }
        }
    };
}
model!(ChatterboxTts);
model!(ChatterboxTurboTts);

/// Characters of English text spoken in a second, roughly.
const CHARS_PER_S: f64 = 14.0;
/// S3 speech tokens per second of audio.
const TOKENS_PER_S: f64 = 25.0;

/// One memory reading, after the device has finished its queued work.
fn sample(dev: &Device) -> MemorySample {
    // orders the memory reading after the work queued so far (measurement only)
    let _ = dev.synchronize();
    let gpu = chatterbox_pipeline::device_memory(dev).map(|m| m.used_bytes);
    MemorySample::from_bytes(chatterbox_pipeline::resident_memory_bytes(), gpu)
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Where the long text's memory series goes (see the module docs).
fn series_path() -> PathBuf {
    if let Some(p) = std::env::var_os("CHATTERBOX_SOAK_SERIES") {
        return PathBuf::from(p);
    }
    match std::env::var_os("CHATTERBOX_BENCH_OUT") {
        Some(out) => Path::new(&out)
            .parent()
            .unwrap_or(Path::new("."))
            .join("soak-series.csv"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench/soak-series.csv"),
    }
}

/// Phase 1: the long text through `generate_stream`, memory sampled after every text chunk.
fn long_phase(
    bench: &mut BenchRun,
    model: &dyn Model,
    dev: &Device,
    variant: &str,
) -> anyhow::Result<()> {
    let minutes = env_f64("CHATTERBOX_SOAK_MINUTES", 10.0);
    let text = long_text((minutes * 60.0 * CHARS_PER_S).round() as usize);
    let mut opts = model.options();
    // CHATTERBOX_SOAK_SEED: random weights can draw the stop token first for some chunk (the
    // pipeline then fails with NoSpeechTokens, as the reference would); another seed avoids it.
    opts.seed = Some(env_usize("CHATTERBOX_SOAK_SEED", 0) as u64);
    let n_chars = text.chars().count();
    // The mean text chunk's speaking time in speech tokens (25 a second).
    let n_chunks = chatterbox_text::SentenceChunker::new(opts.max_chunk_chars)?
        .split(&text)
        .len()
        .max(1);
    let per_chunk = (n_chars as f64 / CHARS_PER_S * TOKENS_PER_S / n_chunks as f64).ceil();
    opts.max_new_tokens = env_usize("CHATTERBOX_SOAK_LONG_TOKENS", per_chunk as usize);
    eprintln!(
        "soak long text: {variant}, {n_chars} characters (~{minutes} min of speech), \
         {n_chunks} text chunks of at most {} speech tokens",
        opts.max_new_tokens
    );

    let samples = Cell::new(0usize);
    let start = sample(dev);
    let t0 = Instant::now();
    // (seconds since the start, audio seconds so far, memory)
    let mut series = vec![(0.0f64, 0.0f64, start)];
    let mut chunks = 0;
    let mut progress = |p: &Progress| {
        if let Progress::ChunkFinished { index, total, .. } = p {
            let s = sample(dev);
            let (wall, audio) = (
                t0.elapsed().as_secs_f64(),
                samples.get() as f64 / f64::from(S3GEN_SR),
            );
            eprintln!(
                "chunk {}/{total}: {audio:.1} s of audio in {wall:.1} s, RSS {:.0} MB{}",
                index + 1,
                s.rss,
                s.gpu_text()
            );
            series.push((wall, audio, s));
            chunks = *total;
        }
    };
    let mut on_audio = |a: &[f32]| {
        samples.set(samples.get() + a.len());
        Ok(())
    };
    model.speak_stream(&text, &opts, &mut progress, &mut on_audio)?;
    let wall = t0.elapsed().as_secs_f64();
    let end = sample(dev);
    let audio_s = samples.get() as f64 / f64::from(S3GEN_SR);
    series.push((wall, audio_s, end));

    let path = series_path();
    let mut csv = String::from("t_s,audio_s,rss_mb,gpu_used_mb\n");
    for (t, a, s) in &series {
        let gpu = s.gpu.map_or(String::new(), |g| format!("{g:.1}"));
        writeln!(csv, "{t:.2},{a:.2},{:.1},{gpu}", s.rss)?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, csv)?;
    eprintln!(
        "memory series ({} rows) written to {}",
        series.len(),
        path.display()
    );

    let what = format!(
        "{variant}, {n_chars} chars, {chunks} chunks, max {} tokens each",
        opts.max_new_tokens
    );
    let max = |f: &dyn Fn(&MemorySample) -> Option<f64>| {
        series
            .iter()
            .filter_map(|(_, _, s)| f(s))
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    bench.push_value(
        "long_rss_start_mb",
        format!("MB: RSS before the long text ({what})"),
        start.rss,
    );
    if let Some(m) = max(&|s| Some(s.rss)) {
        bench.push_value(
            "long_rss_max_mb",
            format!("MB: highest RSS over the long text ({what})"),
            m,
        );
    }
    bench.push_value(
        "long_rss_end_mb",
        format!("MB: RSS after the long text ({what})"),
        end.rss,
    );
    if let (Some(g0), Some(g1), Some(gm)) = (start.gpu, end.gpu, max(&|s| s.gpu)) {
        bench.push_value(
            "long_gpu_used_start_mb",
            format!("MB: GPU used before the long text ({what})"),
            g0,
        );
        bench.push_value(
            "long_gpu_used_max_mb",
            format!("MB: highest GPU used over the long text ({what})"),
            gm,
        );
        bench.push_value(
            "long_gpu_used_end_mb",
            format!("MB: GPU used after the long text ({what})"),
            g1,
        );
    }
    bench.push_value(
        "long_audio_s",
        format!("seconds of audio (not ms) ({what})"),
        audio_s,
    );
    bench.push_value(
        "long_wall_s",
        format!("seconds of wall time (not ms) ({what})"),
        wall,
    );
    bench.push_value(
        "long_rtf",
        format!("ratio: wall s / audio s ({what})"),
        wall / audio_s,
    );
    Ok(())
}

/// Phase 2: many short generations in one process; returns the RSS growth (MB).
fn many_phase(
    bench: &mut BenchRun,
    model: &dyn Model,
    dev: &Device,
    variant: &str,
) -> anyhow::Result<f64> {
    let n = env_usize("CHATTERBOX_SOAK_GENERATIONS", 200).max(1);
    let mut opts = model.options();
    opts.max_new_tokens = env_usize("CHATTERBOX_SOAK_TOKENS", 60);
    eprintln!(
        "soak generations: {variant}, {n} generations of at most {} tokens",
        opts.max_new_tokens
    );
    let mut rng = Lcg(0x5eed_1234_abcd_ef01);
    let t0 = Instant::now();
    let (mut first, mut last) = (None, None);
    let (mut rss_max, mut gpu_max) = (f64::NEG_INFINITY, None::<f64>);
    let mut audio_s = 0.0;
    for i in 0..n {
        let text = sentence(i * 3 + 1, &mut rng);
        opts.seed = Some(i as u64 + 1);
        let audio = model.speak(&text, &opts)?;
        audio_s += audio.samples.len() as f64 / f64::from(S3GEN_SR);
        let s = sample(dev);
        rss_max = rss_max.max(s.rss);
        if let Some(g) = s.gpu {
            gpu_max = Some(gpu_max.map_or(g, |m| m.max(g)));
        }
        if i == 0 {
            first = Some(s);
        }
        last = Some(s);
        if (i + 1) % 10 == 0 || i == 0 || i + 1 == n {
            eprintln!(
                "generation {}/{n}: {:.1} s, {audio_s:.1} s of audio so far, RSS {:.0} MB{}",
                i + 1,
                t0.elapsed().as_secs_f64(),
                s.rss,
                s.gpu_text()
            );
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let (Some(first), Some(last)) = (first, last) else {
        anyhow::bail!("no generation ran");
    };
    let what = format!(
        "{variant}, {n} generations, max {} tokens",
        opts.max_new_tokens
    );
    bench.push_value(
        "many_rss_after_first_mb",
        format!("MB: RSS after generation 1 ({what})"),
        first.rss,
    );
    bench.push_value(
        "many_rss_after_last_mb",
        format!("MB: RSS after generation {n} ({what})"),
        last.rss,
    );
    bench.push_value(
        "many_rss_max_mb",
        format!("MB: highest RSS after a generation ({what})"),
        rss_max,
    );
    let growth = last.rss - first.rss;
    bench.push_value(
        "many_rss_growth_mb",
        format!("MB: RSS after the last - after the first ({what})"),
        growth,
    );
    if let (Some(g0), Some(g1), Some(gm)) = (first.gpu, last.gpu, gpu_max) {
        bench.push_value(
            "many_gpu_used_after_first_mb",
            format!("MB: GPU used after generation 1 ({what})"),
            g0,
        );
        bench.push_value(
            "many_gpu_used_after_last_mb",
            format!("MB: GPU used after generation {n} ({what})"),
            g1,
        );
        bench.push_value(
            "many_gpu_used_max_mb",
            format!("MB: highest GPU used after a generation ({what})"),
            gm,
        );
        bench.push_value(
            "many_gpu_used_growth_mb",
            format!("MB: GPU used after the last - after the first ({what})"),
            g1 - g0,
        );
    }
    bench.push_value(
        "many_wall_s",
        format!("seconds of wall time (not ms), {audio_s:.1} s of audio ({what})"),
        wall,
    );
    Ok(growth)
}

fn main() -> anyhow::Result<()> {
    let threads = env_usize("CHATTERBOX_BENCH_THREADS", 1);
    let dev = test_device("CHATTERBOX_BENCH_DEVICE")?;
    let (dtype, device) = (bench_dtype(&dev), device_name(&dev));
    let variant = std::env::var("CHATTERBOX_SOAK_VARIANT").unwrap_or_else(|_| "turbo".into());
    let max_growth = env_f64("CHATTERBOX_SOAK_MAX_GROWTH_MB", 64.0);
    let mut bench = BenchRun::new("soak", device, threads, 28);
    let before_load = sample(&dev);
    eprintln!(
        "soak: {variant} on {device}, RSS {:.0} MB{} before loading",
        before_load.rss,
        before_load.gpu_text()
    );
    let clip = VoiceClip::from_parts(speech_like(S3GEN_SR, 10.0), speech_like(S3_SR, 10.0));
    let model: Box<dyn Model> = match variant.as_str() {
        "english" => {
            let dir = full_size_checkpoint(
                checkpoint_dir("CHATTERBOX_SOAK_CKPT", "english"),
                "english",
                "t3_cfg.safetensors",
            )?;
            let mut tts = ChatterboxTts::from_dir(&dir, &dev, dtype)?;
            tts.prepare_conditionals_from_clip(&clip, 0.5)?;
            Box::new(tts)
        }
        "turbo" | "nano" => {
            let nano = variant == "nano";
            let marker = if nano {
                "t3_nano_v1.safetensors"
            } else {
                "t3_turbo_v1.safetensors"
            };
            let dir = full_size_checkpoint(
                checkpoint_dir("CHATTERBOX_SOAK_CKPT", &variant),
                &variant,
                marker,
            )?;
            let mut tts = ChatterboxTurboTts::from_dir(&dir, nano, &dev, dtype)?;
            tts.prepare_conditionals_from_clip(&clip, 0.0)?;
            Box::new(tts)
        }
        v => anyhow::bail!("CHATTERBOX_SOAK_VARIANT={v:?}: expected english, turbo or nano"),
    };
    let loaded = sample(&dev);
    eprintln!(
        "loaded with the voice prepared: RSS {:.0} MB{}",
        loaded.rss,
        loaded.gpu_text()
    );

    if !env_flag("CHATTERBOX_SOAK_SKIP_LONG") {
        long_phase(&mut bench, model.as_ref(), &dev, &variant)?;
    }
    let growth = if env_flag("CHATTERBOX_SOAK_SKIP_MANY") {
        None
    } else {
        Some(many_phase(&mut bench, model.as_ref(), &dev, &variant)?)
    };
    bench.emit()?;
    if let Some(g) = growth {
        if g > max_growth {
            // A plain message and exit status 1, not an error with a backtrace.
            eprintln!(
                "leak check FAILED: RSS grew by {g:.1} MB over the generations \
                 (limit CHATTERBOX_SOAK_MAX_GROWTH_MB = {max_growth})"
            );
            std::process::exit(1);
        }
        eprintln!("leak check passed: RSS grew by {g:.1} MB (limit {max_growth} MB)");
    }
    Ok(())
}
