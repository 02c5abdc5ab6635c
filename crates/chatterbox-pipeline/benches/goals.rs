//! `cargo xtask bench goals --threads 2`: issue 41's goals table in one run: every variant's
//! end-to-end speed and memory on the CPU with T3 in f32 and quantized (q8, q4), on full-size
//! random checkpoints, as JSON records (`CHATTERBOX_BENCH_OUT`, else stdout) and a summary
//! table on stdout; `parity/bench/goals.py` runs the reference on the same checkpoints, text,
//! voice and token cap (xtask runs it after this unless `--no-reference`).
//!
//! Each (variant, format) runs in a fresh process (this binary re-executed with
//! `CHATTERBOX_GOALS_CHILD=variant,format`), so that its peak resident memory is its own:
//! - **load**: `from_dir` of the f32 checkpoint (`load_ms`), then `quantize_t3(format)` as
//!   `chatterbox speak --quantize` does (`quantize_ms`; f32: nothing), then the voice from a
//!   10 s speech-like clip (`voice_ms`, as `pipeline.rs` and `stream.rs` prepare it; exaggeration
//!   0.5, Turbo and Nano 0);
//! - **generate**: `generate_with_progress` of one fixed 196-character text (one text chunk;
//!   `stream.rs`'s; `CHATTERBOX_GOALS_TEXT` replaces it), the variant's default options, seed
//!   0, `max_new_tokens` = `CHATTERBOX_GOALS_TOKENS` (default 100, ~4 s of audio). Random
//!   weights rarely draw the stop token, so the cap decides the length; English and
//!   Multilingual drop the drawn ids >= 6561 (~20 %), so `audio_s` says what came out.
//!   Recorded: `total_ms` (the whole call), `audio_s` (seconds, not ms), `rtf` (total / audio,
//!   a ratio), `tokens` (T3 tokens drawn), `t3_prefill_ms` (from the call to T3's first token:
//!   text, conditioning, prefill and the first draw), `t3_decode_per_token_ms` (first to last
//!   token over the tokens between) and `flow_hift_ms` (last token to the end: S3Gen's flow
//!   and HiFT);
//! - **stream** (variants of `CHATTERBOX_GOALS_STREAM`, default `turbo`): `stream()` of the same
//!   text and options after the generation: `ttfa_ms` (to the first chunk), `stream_total_ms`,
//!   `underrun_margin_ms` (as `stream.rs`: a listener starting at the first chunk; < 0: the
//!   audio ran dry) and `stream_audio_s`;
//! - **memory** (MB, from `/proc/self/status`): `rss_loaded_mb` (after load and conversion),
//!   `peak_rss_mb` (VmHWM at the end: the whole process, the f32 weights read before a
//!   conversion included) and `peak_rss_run_mb` (VmHWM reset through `/proc/self/clear_refs`
//!   after load and conversion: the peak of the voice, generation and stream, which is what a
//!   quantized checkpoint folder would need on top of its smaller load);
//! - **floor**: `t3_weights_mb` (T3's projections in the format, `QuantizeReport`), the
//!   parent's STREAM-like triad bandwidth (`triad_gbs`, `threads` threads, best of 5 passes over
//!   3 x 64 MiB, as the `floors` bench) and `decode_floor_ms` (projections / triad: a lower
//!   bound, the head and KV cache left out) with `decode_x_floor` (decode per token over it).
//!
//! Records are named `{variant}_{format}_{metric}` (the reference's f32 rows share the names).
//!
//! Settings: `CHATTERBOX_GOALS_VARIANTS` (default `turbo,nano,english,multilingual`),
//! `CHATTERBOX_GOALS_FORMATS` (default `f32,q8,q4`; bf16 also parses), `CHATTERBOX_GOALS_TOKENS`,
//! `CHATTERBOX_GOALS_RUNS` timed generations (median; default 1) after
//! `CHATTERBOX_GOALS_WARMUP` untimed ones (default 0); `CHATTERBOX_GOALS_CKPT_<VARIANT>` the
//! checkpoint directories (`parity/checkpoints.py --variant V --size full --out DIR`; default
//! `/tmp/chatterbox-bench-<variant>`, written by the parity venv when missing);
//! `CHATTERBOX_GOALS_BUDGET_S` (seconds for all configurations: one not started in time is
//! skipped, a running one is stopped at it; default none) and `CHATTERBOX_GOALS_CONFIG_TIMEOUT_S`
//! (each configuration's limit; default none); `CHATTERBOX_GOALS_TRIAD=0` skips the triad.
//! Threads: `CHATTERBOX_BENCH_THREADS` (default 1) is recorded and, where unset, passed to the
//! children as `RAYON_NUM_THREADS` and `CANDLE_NUM_THREADS` (candle's quantized kernels run on a
//! pool of their own; docs/benchmarks.md "Quantized T3"). CPU only.
use chatterbox_pipeline::{
    Audio, ChatterboxMultilingualTts, ChatterboxTts, ChatterboxTurboTts, GenerateOptions, Progress,
    QuantizeReport, SpeechStream, VoiceClip, WeightFormat, S3GEN_SR, S3_SR,
};
use chatterbox_testkit::{
    checkpoint_dir, emit_records, env_usize, full_size_checkpoint, speech_like, underrun_margin,
    BenchRun,
};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Three sentences, 196 characters: one text chunk at `max_chunk_chars` 250 (`stream.rs`'s).
/// parity/bench/goals.py speaks the same text. `CHATTERBOX_GOALS_TEXT` replaces it (both sides).
const TEXT: &str = "The quick brown fox jumps over the lazy dog near the old river bank. \
                    Then it runs far away into the green forest, where nobody can find it. \
                    At night it sleeps under a tall oak tree, safe and warm.";

/// The text spoken: `CHATTERBOX_GOALS_TEXT`, else [`TEXT`].
fn text() -> String {
    std::env::var("CHATTERBOX_GOALS_TEXT")
        .ok()
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| TEXT.into())
}

const VARIANTS: [&str; 4] = ["turbo", "nano", "english", "multilingual"];

/// A variant's checkpoint: the directory's env, the T3 file that marks it complete.
fn checkpoint(variant: &str) -> anyhow::Result<(String, &'static str)> {
    let marker = match variant {
        "turbo" => "t3_turbo_v1.safetensors",
        "nano" => "t3_nano_v1.safetensors",
        "english" => "t3_cfg.safetensors",
        "multilingual" => "t3_mtl23ls_v2.safetensors",
        v => anyhow::bail!("unknown variant {v:?} (known: {})", VARIANTS.join(", ")),
    };
    Ok((
        format!("CHATTERBOX_GOALS_CKPT_{}", variant.to_uppercase()),
        marker,
    ))
}

fn list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| default.into())
        .split(',')
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The three model types behind one interface.
enum Tts {
    English(ChatterboxTts),
    Multilingual(ChatterboxMultilingualTts),
    Turbo(ChatterboxTurboTts),
}

macro_rules! each {
    ($self:expr, $m:ident => $e:expr) => {
        match $self {
            Tts::English($m) => $e,
            Tts::Multilingual($m) => $e,
            Tts::Turbo($m) => $e,
        }
    };
}

impl Tts {
    fn load(variant: &str, dir: &Path) -> anyhow::Result<Self> {
        let (dev, f32) = (
            chatterbox_pipeline::Device::Cpu,
            chatterbox_pipeline::DType::F32,
        );
        Ok(match variant {
            "english" => Tts::English(ChatterboxTts::from_dir(dir, &dev, f32)?),
            "multilingual" => {
                Tts::Multilingual(ChatterboxMultilingualTts::from_dir(dir, &dev, f32)?)
            }
            "turbo" | "nano" => Tts::Turbo(ChatterboxTurboTts::from_dir(
                dir,
                variant == "nano",
                &dev,
                f32,
            )?),
            v => anyhow::bail!("unknown variant {v:?}"),
        })
    }
    fn quantize(&mut self, format: WeightFormat) -> anyhow::Result<QuantizeReport> {
        Ok(each!(self, m => m.quantize_t3(format))?)
    }
    fn prepare_voice(&mut self, clip: &VoiceClip) -> anyhow::Result<()> {
        let exaggeration = if matches!(self, Tts::Turbo(_)) {
            0.0
        } else {
            0.5
        };
        Ok(each!(self, m => m.prepare_conditionals_from_clip(clip, exaggeration))?)
    }
    fn options(&self) -> GenerateOptions {
        let o = each!(self, m => m.default_options());
        match self {
            Tts::Multilingual(_) => o.with_language("en"),
            _ => o,
        }
    }
    fn generate(
        &self,
        text: &str,
        o: &GenerateOptions,
        progress: &mut dyn FnMut(&Progress),
    ) -> anyhow::Result<Audio> {
        Ok(each!(self, m => m.generate_with_progress(text, o, progress))?)
    }
    fn stream(&self, text: &str, o: &GenerateOptions) -> anyhow::Result<SpeechStream<'_>> {
        Ok(each!(self, m => m.stream(text, o))?)
    }
}

/// `VmHWM` or `VmRSS` of this process, MB (10^6 bytes); NaN where unreadable.
fn proc_status_mb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb * 1024.0 / 1e6)
}

/// Resets VmHWM to the current resident set (Linux >= 4.0); whether it could.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One configuration, in this (child) process: its figures by metric name.
fn child(variant: &str, format: &str, dir: &Path) -> anyhow::Result<BTreeMap<String, f64>> {
    let format: WeightFormat = format.parse()?;
    let n_tokens = env_usize("CHATTERBOX_GOALS_TOKENS", 100);
    let runs = env_usize("CHATTERBOX_GOALS_RUNS", 1).max(1);
    let warmup = env_usize("CHATTERBOX_GOALS_WARMUP", 0);
    let streamed = list("CHATTERBOX_GOALS_STREAM", "turbo").contains(&variant.to_string());
    let text = text();
    let mut out = BTreeMap::new();
    let tag = format!("{variant} {format}");

    let t = Instant::now();
    let mut tts = Tts::load(variant, dir)?;
    out.insert("load_ms".into(), t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    let report = tts.quantize(format)?;
    out.insert("quantize_ms".into(), t.elapsed().as_secs_f64() * 1e3);
    out.insert("t3_weights_mb".into(), report.bytes_after as f64 / 1e6);
    out.insert("rss_loaded_mb".into(), proc_status_mb("VmRSS:"));
    out.insert("peak_rss_load_mb".into(), proc_status_mb("VmHWM:"));
    let reset = reset_peak_rss();

    let clip = VoiceClip::from_parts(speech_like(S3GEN_SR, 10.0), speech_like(S3_SR, 10.0));
    let t = Instant::now();
    tts.prepare_voice(&clip)?;
    out.insert("voice_ms".into(), t.elapsed().as_secs_f64() * 1e3);
    eprintln!(
        "{tag}: loaded in {:.1} s, converted in {:.1} s ({:.0} MB of projections), voice {:.1} s, \
         {:.0} MB resident",
        out["load_ms"] / 1e3,
        out["quantize_ms"] / 1e3,
        out["t3_weights_mb"],
        out["voice_ms"] / 1e3,
        out["rss_loaded_mb"],
    );

    let mut opts = tts.options();
    opts.seed = Some(0);
    opts.max_new_tokens = n_tokens;
    let names = [
        "total_ms",
        "audio_s",
        "rtf",
        "tokens",
        "t3_prefill_ms",
        "t3_decode_per_token_ms",
        "flow_hift_ms",
    ];
    let mut rows: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for run in 0..warmup + runs {
        // times of T3's tokens since the call
        let mut first: Option<f64> = None;
        let (mut last, mut count) = (0.0f64, 0usize);
        let t = Instant::now();
        let audio = tts.generate(&text, &opts, &mut |p| {
            if let Progress::Tokens { .. } = p {
                let at = t.elapsed().as_secs_f64() * 1e3;
                first.get_or_insert(at);
                last = at;
                count += 1;
            }
        })?;
        let total = t.elapsed().as_secs_f64() * 1e3;
        black_box(&audio);
        let audio_s = audio.samples.len() as f64 / f64::from(S3GEN_SR);
        let first = first.unwrap_or(f64::NAN);
        let per_token = (last - first) / (count.max(2) - 1) as f64;
        let row = [
            total,
            audio_s,
            total / 1e3 / audio_s,
            count as f64,
            first,
            per_token,
            total - last,
        ];
        eprintln!(
            "{tag} run {run}{}: {total:.0} ms for {audio_s:.2} s of audio (RTF {:.3}), {count} \
             tokens, prefill {first:.0} ms, decode {per_token:.1} ms/token, flow+HiFT {:.0} ms",
            if run < warmup { " (warm-up)" } else { "" },
            row[2],
            row[6],
        );
        if run >= warmup {
            for (v, x) in rows.iter_mut().zip(row) {
                v.push(x);
            }
        }
    }
    for (n, mut v) in names.iter().zip(rows) {
        out.insert((*n).into(), median(&mut v));
    }

    if streamed {
        let mut rows: Vec<Vec<f64>> = vec![Vec::new(); 4];
        for run in 0..runs {
            let t = Instant::now();
            let mut chunks = Vec::new();
            for c in tts.stream(&text, &opts)? {
                let c = c?;
                chunks.push((
                    t.elapsed().as_secs_f64() * 1e3,
                    c.sample_offset,
                    c.samples.len(),
                ));
            }
            let total = t.elapsed().as_secs_f64() * 1e3;
            let ttfa = chunks.first().map_or(f64::NAN, |c| c.0);
            let margin = underrun_margin(&chunks, S3GEN_SR);
            let audio_s = chunks.last().map_or(0, |c| c.1 + c.2) as f64 / f64::from(S3GEN_SR);
            eprintln!(
                "{tag} stream {run}: first audio {ttfa:.0} ms, {} chunks in {total:.0} ms, \
                 {audio_s:.2} s of audio, margin {margin:.0} ms",
                chunks.len()
            );
            for (v, x) in rows.iter_mut().zip([ttfa, total, margin, audio_s]) {
                v.push(x);
            }
        }
        for (n, mut v) in [
            "ttfa_ms",
            "stream_total_ms",
            "underrun_margin_ms",
            "stream_audio_s",
        ]
        .iter()
        .zip(rows)
        {
            out.insert((*n).into(), median(&mut v));
        }
    }
    out.insert("peak_rss_mb".into(), proc_status_mb("VmHWM:"));
    if reset {
        // the peak since the reset: the voice, generation and stream
        let run_peak = proc_status_mb("VmHWM:");
        let peak = out["peak_rss_load_mb"].max(run_peak);
        out.insert("peak_rss_run_mb".into(), run_peak);
        out.insert("peak_rss_mb".into(), peak);
    }
    Ok(out)
}

/// GB/s of the best of 5 STREAM triad passes (`a = b + s * c`, 3 x 64 MiB of f32) on
/// `threads` threads, counted as STREAM counts it (the `floors` bench's measure).
fn triad(threads: usize) -> f64 {
    const LEN: usize = 16 << 20;
    let mut a = vec![0f32; LEN];
    let b = vec![1f32; LEN];
    let c = vec![2f32; LEN];
    let per = LEN.div_ceil(threads.max(1));
    let mut best = 0f64;
    for _ in 0..5 {
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
        best = best.max(3.0 * (LEN * 4) as f64 / secs / 1e9);
    }
    best
}

/// How a configuration's child ended.
enum Outcome {
    Done(BTreeMap<String, f64>),
    Failed(String),
    TimedOut(f64),
}

/// Runs one configuration in a fresh process of this binary, stopped after `limit`.
fn run_child(
    variant: &str,
    format: &str,
    dir: &Path,
    threads: usize,
    limit: Option<Duration>,
) -> anyhow::Result<Outcome> {
    let out = std::env::temp_dir().join(format!(
        "chatterbox-goals-{}-{variant}-{format}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&out);
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.env("CHATTERBOX_GOALS_CHILD", format!("{variant},{format}"))
        .env("CHATTERBOX_GOALS_CHILD_DIR", dir)
        .env("CHATTERBOX_GOALS_CHILD_OUT", &out)
        .stdout(std::process::Stdio::null());
    for var in ["RAYON_NUM_THREADS", "CANDLE_NUM_THREADS"] {
        if std::env::var_os(var).is_none() {
            cmd.env(var, threads.to_string());
        }
    }
    let started = Instant::now();
    let mut proc = cmd.spawn()?;
    let status = loop {
        if let Some(s) = proc.try_wait()? {
            break s;
        }
        if limit.is_some_and(|l| started.elapsed() > l) {
            let _ = proc.kill();
            let _ = proc.wait();
            return Ok(Outcome::TimedOut(started.elapsed().as_secs_f64()));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !status.success() {
        return Ok(Outcome::Failed(format!("{status}")));
    }
    let text = std::fs::read_to_string(&out)?;
    let _ = std::fs::remove_file(&out);
    Ok(Outcome::Done(serde_json::from_str(&text)?))
}

/// The goal rows (issue 41) from the figures by `(variant, format)`.
fn summary(
    results: &BTreeMap<(String, String), BTreeMap<String, f64>>,
    formats: &[String],
    triad_gbs: f64,
) {
    let get = |v: &str, f: &str, m: &str| {
        results
            .get(&(v.to_string(), f.to_string()))
            .and_then(|r| r.get(m))
            .copied()
    };
    let cell = |x: Option<f64>, digits: usize| {
        x.filter(|x| x.is_finite())
            .map_or("-".to_string(), |x| format!("{x:.digits$}"))
    };
    println!("\nissue 41 goals (Rust; the reference: parity/bench/goals.py)");
    let mut head = format!("{:<34}", "");
    for f in formats {
        head += &format!(" {f:>9}");
    }
    println!("{head}  goal");
    let rows: [(&str, &str, &str, f64, usize, &str); 8] = [
        ("Turbo RTF", "turbo", "rtf", 1.0, 3, "<= 0.5"),
        ("Nano RTF", "nano", "rtf", 1.0, 3, "<= 0.3"),
        ("English RTF", "english", "rtf", 1.0, 3, "<= 1.5"),
        ("Multilingual RTF", "multilingual", "rtf", 1.0, 3, "<= 1.5"),
        (
            "Turbo streamed first audio (s)",
            "turbo",
            "ttfa_ms",
            1e-3,
            2,
            "<= 0.5 s",
        ),
        (
            "Turbo peak resident (GB)",
            "turbo",
            "peak_rss_mb",
            1e-3,
            2,
            "<= 1 GB",
        ),
        (
            "Turbo T3 decode ms/token",
            "turbo",
            "t3_decode_per_token_ms",
            1.0,
            1,
            "",
        ),
        (
            "English T3 decode ms/token",
            "english",
            "t3_decode_per_token_ms",
            1.0,
            1,
            "",
        ),
    ];
    for (label, v, m, scale, digits, goal) in rows {
        let mut line = format!("{label:<34}");
        for f in formats {
            line += &format!(" {:>9}", cell(get(v, f, m).map(|x| x * scale), digits));
        }
        println!("{line}  {goal}");
    }
    for v in ["turbo", "english", "nano", "multilingual"] {
        let mut line = format!("{:<34}", format!("{v} decode / floor (x)"));
        let mut any = false;
        for f in formats {
            let x = get(v, f, "decode_x_floor");
            any |= x.is_some();
            line += &format!(" {:>9}", cell(x, 2));
        }
        if any {
            println!("{line}  q4 <= 1.3");
        }
    }
    println!(
        "(floor: T3's projections in the format / triad {triad_gbs:.1} GB/s; head and KV cache \
         not counted)"
    );
    println!(
        "\n{:<13} {:>5} {:>7} {:>7} {:>6} {:>6} {:>7} {:>6} {:>9} {:>8} {:>9} {:>7} {:>8} {:>8}",
        "variant",
        "fmt",
        "load s",
        "conv s",
        "tokens",
        "audio",
        "total s",
        "RTF",
        "prefill",
        "ms/tok",
        "flow+HiFT",
        "TTFA s",
        "peak MB",
        "run MB"
    );
    for ((v, f), r) in results {
        let g = |m: &str| r.get(m).copied();
        println!(
            "{v:<13} {f:>5} {:>7} {:>7} {:>6} {:>6} {:>7} {:>6} {:>9} {:>8} {:>9} {:>7} {:>8} \
             {:>8}",
            cell(g("load_ms").map(|x| x / 1e3), 1),
            cell(g("quantize_ms").map(|x| x / 1e3), 1),
            cell(g("tokens"), 0),
            cell(g("audio_s"), 2),
            cell(g("total_ms").map(|x| x / 1e3), 1),
            cell(g("rtf"), 3),
            cell(g("t3_prefill_ms"), 0),
            cell(g("t3_decode_per_token_ms"), 1),
            cell(g("flow_hift_ms"), 0),
            cell(g("ttfa_ms").map(|x| x / 1e3), 2),
            cell(g("peak_rss_mb"), 0),
            cell(g("peak_rss_run_mb"), 0),
        );
    }
}

/// What a metric's record says it holds.
fn unit(metric: &str) -> &'static str {
    if metric.ends_with("_ms") {
        "ms"
    } else if metric.ends_with("_mb") {
        "MB (not ms)"
    } else if metric.ends_with("_s") {
        "seconds (not ms)"
    } else if metric == "rtf" || metric.ends_with("_x_floor") {
        "ratio (not ms)"
    } else {
        "count (not ms)"
    }
}

fn main() -> anyhow::Result<()> {
    if let Ok(which) = std::env::var("CHATTERBOX_GOALS_CHILD") {
        let (variant, format) = which
            .split_once(',')
            .ok_or_else(|| anyhow::anyhow!("CHATTERBOX_GOALS_CHILD={which:?}"))?;
        let dir = PathBuf::from(
            std::env::var_os("CHATTERBOX_GOALS_CHILD_DIR")
                .ok_or_else(|| anyhow::anyhow!("no CHATTERBOX_GOALS_CHILD_DIR"))?,
        );
        let out = std::env::var_os("CHATTERBOX_GOALS_CHILD_OUT")
            .ok_or_else(|| anyhow::anyhow!("no CHATTERBOX_GOALS_CHILD_OUT"))?;
        let figures = child(variant, format, &dir)?;
        std::fs::write(out, serde_json::to_string(&figures)?)?;
        return Ok(());
    }

    let threads = env_usize("CHATTERBOX_BENCH_THREADS", 1);
    let n_tokens = env_usize("CHATTERBOX_GOALS_TOKENS", 100);
    let variants = list("CHATTERBOX_GOALS_VARIANTS", &VARIANTS.join(","));
    let formats = list("CHATTERBOX_GOALS_FORMATS", "f32,q8,q4");
    for f in &formats {
        f.parse::<WeightFormat>()?;
    }
    let budget = std::env::var("CHATTERBOX_GOALS_BUDGET_S")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map(Duration::from_secs_f64);
    let per_config = std::env::var("CHATTERBOX_GOALS_CONFIG_TIMEOUT_S")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map(Duration::from_secs_f64);
    let started = Instant::now();
    let mut bench = BenchRun::new("goals", "cpu", threads, 40);

    let triad_gbs = if std::env::var("CHATTERBOX_GOALS_TRIAD").as_deref() == Ok("0") {
        f64::NAN
    } else {
        let g = triad(threads);
        bench.push_value(
            "triad_gbs",
            format!("GB/s (not ms), STREAM triad, 3 x 64 MiB, {threads} threads, best of 5"),
            g,
        );
        g
    };
    emit_records(&bench.records)?;

    let mut results = BTreeMap::new();
    let mut skipped = Vec::new();
    for variant in &variants {
        let (env, marker) = checkpoint(variant)?;
        for format in &formats {
            let left = budget.map(|b| b.saturating_sub(started.elapsed()));
            if left.is_some_and(|l| l.is_zero()) {
                eprintln!("{variant} {format}: skipped (CHATTERBOX_GOALS_BUDGET_S spent)");
                skipped.push(format!("{variant} {format} (budget spent)"));
                continue;
            }
            let dir = full_size_checkpoint(checkpoint_dir(&env, variant), variant, marker)?;
            let limit = match (left, per_config) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            eprintln!("== {variant} {format} ({})", dir.display());
            let mut figures = match run_child(variant, format, &dir, threads, limit)? {
                Outcome::Done(f) => f,
                Outcome::Failed(status) => {
                    eprintln!("{variant} {format}: failed ({status})");
                    skipped.push(format!("{variant} {format} (failed: {status})"));
                    continue;
                }
                Outcome::TimedOut(s) => {
                    eprintln!("{variant} {format}: stopped after {s:.0} s (time limit)");
                    skipped.push(format!("{variant} {format} (stopped after {s:.0} s)"));
                    continue;
                }
            };
            // GB / (GB/s), in ms
            let floor = figures
                .get("t3_weights_mb")
                .map(|mb| mb / 1e3 / triad_gbs * 1e3)
                .filter(|f| f.is_finite());
            let per_token = figures.get("t3_decode_per_token_ms").copied();
            if let (Some(floor), Some(per_token)) = (floor, per_token) {
                figures.insert("decode_floor_ms".into(), floor);
                figures.insert("decode_x_floor".into(), per_token / floor);
            }
            let first = bench.records.len();
            let shape = format!(
                "{n_tokens} tokens max, {}-character text, 10 s voice, T3 {format}, {threads} \
                 threads",
                text().chars().count()
            );
            for (metric, value) in &figures {
                bench.push_value(
                    &format!("{variant}_{format}_{metric}"),
                    format!("{}; {shape}", unit(metric)),
                    *value,
                );
            }
            // each configuration's records as soon as it is done (a later stop keeps them)
            emit_records(&bench.records[first..])?;
            results.insert((variant.clone(), format.clone()), figures);
        }
    }
    summary(&results, &formats, triad_gbs);
    if !skipped.is_empty() {
        println!("\nnot measured: {}", skipped.join("; "));
    }
    println!(
        "\nRust side: {:.0} s, {threads} threads, {n_tokens} tokens max",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
