//! `chatterbox speak`: text to speech with `ChatterboxTts`, `ChatterboxMultilingualTts` or
//! `ChatterboxTurboTts`: sentence by sentence (`generate_stream`), or token by token with
//! `--stream` (the models' `stream`), each piece written as soon as it is final. A text chunk
//! whose speech reached `--max-new-tokens` before the model drew its stop token is cut there:
//! a warning names it (even with `--quiet`).
use crate::args::{Model, SpeakArgs};
use crate::input::{load_audio, read_text};
use crate::model::{check_stored_format, language, load, options, t3_format, variant, Tts};
use crate::output::{summary, Output, Sink};
use crate::playout::{Decision, Planner, Policy, Produced, SpeechEstimate};
use crate::progress::{Progress, Ticker};
use crate::source::{read_config, Source};
use crate::{device, japanese, preflight, watermark};
use anyhow::{bail, Context, Result};
use chatterbox_pipeline::{
    Audio, ChatterboxTts, Conditionals, GenerateOptions, MultilingualT3, Progress as Event,
    SentenceTiming, Truncation,
};
use indicatif::ProgressBar;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Runs `chatterbox speak`.
pub fn run(args: SpeakArgs) -> Result<()> {
    let rt = &args.runtime;
    // Every cheap check first: nothing expensive runs before they pass.
    device::check_available(rt.device)?;
    let out = Output::check(&rt.output)?;
    if let Some(path) = &args.captions {
        crate::captions::CaptionFormat::of(path)?;
        Output::check(path).context("--captions")?;
        if let Output::File(o) = &out {
            if same_file_or_equal(o, path) {
                bail!("--captions and -o are the same file {}", path.display());
            }
        }
    }
    let save_voice = match &args.save_voice {
        Some(p) => {
            if args.voice.is_none() {
                bail!("--save-voice needs --voice AUDIO: the clip whose voice is saved");
            }
            Output::check(p).context("--save-voice")?;
            Some(p.as_path())
        }
        None => None,
    };
    let mut inputs: Vec<(&str, &std::path::Path)> = Vec::new();
    for (option, path) in [
        ("--voice", &args.voice),
        ("--voice-file", &args.voice_file),
        ("--file", &args.file),
        ("--config", &rt.config),
        ("--lexicon", &args.lexicon),
    ] {
        if let Some(p) = path {
            inputs.push((option, p.as_path()));
        }
    }
    out.refuse_inputs(&inputs)?;
    if let Some(p) = save_voice {
        Output::File(p.to_path_buf())
            .refuse_inputs(&inputs)
            .context("--save-voice")?;
        if let Output::File(o) = &out {
            if same_file_or_equal(o, p) {
                bail!("--save-voice and -o are the same file {}", p.display());
            }
        }
    }
    let language = language(args.model, args.language.as_deref())?;
    let mtl = match &args.mtl_version {
        Some(v) if args.model != Model::Multilingual => {
            bail!("--mtl-version {v} applies to --model multilingual only")
        }
        Some(v) => MultilingualT3::parse(v)?,
        None => MultilingualT3::V2,
    };
    japanese::check_applies(
        args.model == Model::Multilingual,
        args.kakasi_dict.as_deref(),
    )?;
    let mut opts = options(args.model, &args.gen, language.as_deref(), rt.seed)?;
    if let Some(path) = &args.lexicon {
        let lexicon = chatterbox_pipeline::Lexicon::from_file(path).context("--lexicon")?;
        opts.lexicon = Some(Arc::new(lexicon));
    }
    // caption words from T3's alignment heads (English, multilingual) only when asked for
    opts.word_alignment = args.captions.is_some();
    let text = read_text(args.text.as_deref(), args.file.as_deref())?;
    let voice_audio = match &args.voice {
        Some(p) => Some(load_audio(p, "voice clip")?),
        None => None,
    };
    if let Some(p) = &args.voice_file {
        if !p.is_file() {
            bail!("the voice file {} does not exist", p.display());
        }
    }
    if let (Some(audio), Some(path)) = (&voice_audio, &args.voice) {
        preflight::check_voice_clip(path, audio, variant(args.model))?;
    }
    let config = rt.config.as_deref().map(read_config).transpose()?;
    let repo = variant(args.model).hub_repo();
    let src = Source::resolve(rt.model_dir.as_deref(), repo)?;
    let cfg = preflight::effective_config(variant(args.model), &src, config.as_ref())?;
    preflight::check_options(args.model, &opts, &cfg)?;
    preflight::check_text(&text, &opts, &cfg)?;
    let builtin_voice = args.voice.is_none() && args.voice_file.is_none();
    preflight::check_checkpoint(variant(args.model), &mtl, &src, builtin_voice)?;
    let kanji_reader = args
        .kakasi_dict
        .as_deref()
        .map(japanese::load_reader)
        .transpose()?;
    let perth = match &src {
        Source::Dir(d) => watermark::checkpoint(&rt.watermark, &[d.as_path()], false)?,
        Source::Hub(_) => watermark::checkpoint(&rt.watermark, &[], true)?,
    };
    let dev = device::open(rt.device)?;
    let dtype = device::dtype(rt.dtype, &dev);
    let format = t3_format(args.quantize, &dev, dtype)?;
    let progress = Progress::new(rt.quiet);
    if let Some(w) = device::dtype_warning(&dev, dtype) {
        progress.note(w);
    }

    let step = progress.step(format!(
        "Loading Chatterbox {} from {}",
        variant(args.model).name(),
        src.describe()
    ));
    let tts = load(args.model, &mtl, &src, config.as_ref(), &dev, dtype)
        .with_context(|| format!("cannot load the {} model", variant(args.model).name()))?;
    check_stored_format(args.quantize, tts.t3_format())?;
    let mut tts = tts
        .with_t3_format(format)
        .with_context(|| format!("cannot store T3's weights as {format}"))?
        .with_watermarker(watermark::load(perth.as_ref(), &dev)?);
    if let Tts::Multilingual(m) = &mut tts {
        if kanji_reader.is_none() && language.as_deref() == Some("ja") && japanese::has_kanji(&text)
        {
            progress.note(japanese::missing_reader_warning());
        }
        m.set_kanji_reader(kanji_reader);
    }
    let stored = tts.t3_format();
    let weights = if stored.is_exact() {
        String::new()
    } else {
        format!(", T3 weights in {stored}")
    };
    step.done(format!(
        "Loaded Chatterbox {} on {}{weights}",
        variant(args.model).name(),
        device::describe(&dev)
    ));

    set_voice(
        &mut tts,
        &args,
        voice_audio.as_ref(),
        &opts,
        &dev,
        &progress,
    )?;
    if let (Some(path), Some(conds)) = (save_voice, tts.conditionals()) {
        conds
            .save(path)
            .with_context(|| format!("cannot save the voice to {}", path.display()))?;
        progress.note(format!("Saved the voice to {}", path.display()));
    }

    let started = Instant::now();
    let mut sink = out.sink(ChatterboxTts::SAMPLE_RATE, rt.wav_format, args.stream)?;
    let cuts = Cuts {
        progress: &progress,
        quiet: rt.quiet,
        max_new_tokens: opts.max_new_tokens,
    };
    let (first_audio, timings) = if args.stream {
        // Standard output plays as it comes (a player reads it): its start is planned. A file
        // is written as the audio comes, unbuffered.
        let playout = matches!(out, Output::Stdout).then(|| Playout::new(args.prebuffer));
        let playout = playout.transpose()?;
        speak_streaming(
            &tts, &text, &opts, &progress, &mut sink, started, &cuts, playout,
        )?
    } else {
        let timings = speak_whole(&tts, &text, &opts, &progress, &mut sink, &out, &cuts)?;
        (None, timings)
    };
    let samples = sink.finish()?;
    if let Some(path) = &args.captions {
        crate::captions::write(path, &timings, ChatterboxTts::SAMPLE_RATE)?;
    }
    let took = started.elapsed();
    let secs = samples as f64 / f64::from(ChatterboxTts::SAMPLE_RATE);
    let mut line = summary(&out, secs, took);
    if let Some(first) = first_audio {
        line.push_str(&format!(", first audio after {:.2} s", first.as_secs_f64()));
        tracing::info!(
            "streamed {secs:.1} s of audio in {:.1} s; first audio after {:.2} s",
            took.as_secs_f64(),
            first.as_secs_f64()
        );
    }
    progress.note(line);
    Ok(())
}

/// Warns about text chunks whose speech was cut at `--max-new-tokens`.
struct Cuts<'a> {
    progress: &'a Progress,
    quiet: bool,
    max_new_tokens: usize,
}

impl Cuts<'_> {
    /// Warns that `cut`'s speech (of `total` text chunks) was cut at the cap: on standard
    /// error above the bars, and even with `--quiet` (the audio lacks part of the text).
    fn warn(&self, cut: &Truncation, total: usize) {
        let line = truncation_warning(cut.sentence, &cut.text, total, self.max_new_tokens);
        if self.quiet {
            // no bars to lift in quiet mode
            eprintln!("{line}");
        } else {
            self.progress.note(line);
        }
    }
}

/// The warning for text chunk `index` (of `total`, from 0), `text`, whose speech was cut at
/// `max_new_tokens`.
fn truncation_warning(index: usize, text: &str, total: usize, max_new_tokens: usize) -> String {
    const SHOWN: usize = 60;
    let text = text.trim();
    let quoted = if text.chars().count() > SHOWN {
        let head: String = text.chars().take(SHOWN - 1).collect();
        format!("{head}…")
    } else {
        text.to_string()
    };
    let which = if total > 1 {
        format!("text chunk {}/{total} {quoted:?}", index + 1)
    } else {
        format!("{quoted:?}")
    };
    format!(
        "warning: the speech of {which} was cut at --max-new-tokens {max_new_tokens}: the model \
         did not finish it; raise --max-new-tokens, or split the text into shorter chunks \
         (--chunk-chars)"
    )
}

/// Speaks `text` sentence chunk by sentence chunk, each written once it is synthesised;
/// returns the sentences' timings.
fn speak_whole(
    tts: &Tts,
    text: &str,
    opts: &GenerateOptions,
    progress: &Progress,
    sink: &mut Sink,
    out: &Output,
    cuts: &Cuts<'_>,
) -> Result<Vec<SentenceTiming>> {
    let mut bars = Bars::new(progress, opts.max_new_tokens);
    let mut write_error = None;
    let result = tts.generate_stream(text, opts, &mut |e| bars.event(e), &mut |samples| {
        sink.push(samples).map_err(|e| {
            let msg = format!("{e:#}");
            write_error = Some(e);
            chatterbox_pipeline::PipelineError::Io {
                path: out_path(out),
                source: std::io::Error::other(msg),
            }
        })
    });
    bars.clear();
    if let Some(e) = write_error {
        return Err(e);
    }
    let report = result.context("speech generation failed")?;
    for cut in &report.truncated {
        cuts.warn(cut, report.sentences);
    }
    Ok(report.captions)
}

/// The seconds of audio a listener keeps in hand when generation ends, beyond the largest
/// chunk, where `--stream` buffers a slow generation (`playout::Policy::Adaptive`).
const PLAYOUT_MARGIN_SECS: f64 = 0.5;

/// For tests only, never set by users: a production rate (seconds of audio per wall second)
/// that replaces the measured one in the playout plan of `speak --stream -o -`: the planner's
/// clock reads the audio produced so far divided by it, so a test on a fast machine sees the
/// decisions of a slow one, exactly (tests/playout.rs).
const SIMULATED_RATE_VAR: &str = "CHATTERBOX_STREAM_SIMULATED_RATE";

/// The start of a streamed output that plays as it comes: the chunks held back until the
/// [`Planner`] says the rest can follow in time.
struct Playout {
    planner: Planner,
    policy: Policy,
    /// The rate of `SIMULATED_RATE_VAR`, if set.
    simulated_rate: Option<f64>,
    /// Audio held back.
    pending: Vec<f32>,
    /// The target last reported, seconds.
    shown_target: Option<f64>,
}

impl Playout {
    /// `--prebuffer SECS` (a fixed buffer) or, without it, the adaptive plan.
    fn new(prebuffer: Option<f64>) -> Result<Self> {
        let policy = match prebuffer {
            Some(secs) => Policy::Fixed { secs },
            None => Policy::Adaptive {
                margin_secs: PLAYOUT_MARGIN_SECS,
            },
        };
        let simulated_rate = match std::env::var(SIMULATED_RATE_VAR) {
            Ok(v) => match v.trim().parse::<f64>() {
                Ok(r) if r.is_finite() && r > 0.0 => Some(r),
                _ => bail!("{SIMULATED_RATE_VAR}={v:?}: not a positive number"),
            },
            Err(_) => None,
        };
        Ok(Self {
            planner: Planner::new(policy),
            policy,
            simulated_rate,
            pending: Vec::new(),
            shown_target: None,
        })
    }

    /// Takes a chunk of `samples`, which brought the audio to `produced` samples at
    /// `elapsed` since generation began; returns the audio to write now (empty while
    /// buffering) and reports what it does.
    fn chunk(
        &mut self,
        samples: &[f32],
        produced: usize,
        elapsed: Duration,
        estimate: &SpeechEstimate,
        is_last: bool,
        progress: &Progress,
    ) -> Vec<f32> {
        if self.planner.playing() {
            return samples.to_vec();
        }
        self.pending.extend_from_slice(samples);
        let audio_secs = produced as f64 / f64::from(ChatterboxTts::SAMPLE_RATE);
        let at_secs = match self.simulated_rate {
            Some(rate) => audio_secs / rate,
            None => elapsed.as_secs_f64(),
        };
        let remaining_secs = estimate.remaining_secs(audio_secs);
        let decision = self.planner.observe(Produced {
            at_secs,
            audio_secs,
            remaining_secs,
            is_last,
        });
        tracing::debug!(
            at_secs,
            audio_secs,
            remaining_secs,
            is_last,
            ?decision,
            "playout"
        );
        match decision {
            Decision::Play => return std::mem::take(&mut self.pending),
            Decision::Buffer { target_secs, rate } => {
                // a line when buffering starts and when the target moves by a second or more
                if self
                    .shown_target
                    .is_none_or(|shown| (shown - target_secs).abs() >= 1.0)
                {
                    self.shown_target = Some(target_secs);
                    let line = buffering_line(self.policy, target_secs, rate);
                    tracing::info!("{line}");
                    progress.note(line);
                }
            }
            Decision::Wait => {}
        }
        Vec::new()
    }

    /// Whether audio was held back before playing (a line said so).
    fn buffered(&self) -> bool {
        self.shown_target.is_some()
    }

    /// The audio still held back (after an error, or a stream that ended without its last
    /// chunk): written as it is.
    fn flush(&mut self) -> Vec<f32> {
        std::mem::take(&mut self.pending)
    }
}

/// `buffering 2.1 s of audio before playing: generation runs at 0.60x real time`.
fn buffering_line(policy: Policy, target_secs: f64, rate: f64) -> String {
    match policy {
        Policy::Fixed { secs } => {
            format!("buffering {secs:.1} s of audio before playing (--prebuffer {secs})")
        }
        Policy::Adaptive { .. } if target_secs.is_infinite() => format!(
            "buffering all the audio before playing: generation runs at {rate:.2}x real time"
        ),
        Policy::Adaptive { .. } => format!(
            "buffering {target_secs:.1} s of audio before playing: generation runs at \
             {rate:.2}x real time"
        ),
    }
}

/// Speaks `text` token by token (`--stream`), each chunk of audio written and flushed as it
/// comes (with `playout`, an output that plays as it comes: from when its plan says the rest
/// can follow in time); returns when the first audio was written, counted from `started`,
/// and the sentences' timings.
#[allow(clippy::too_many_arguments)]
fn speak_streaming(
    tts: &Tts,
    text: &str,
    opts: &GenerateOptions,
    progress: &Progress,
    sink: &mut Sink,
    started: Instant,
    cuts: &Cuts<'_>,
    mut playout: Option<Playout>,
) -> Result<(Option<Duration>, Vec<SentenceTiming>)> {
    let bars = Mutex::new(Bars::new(progress, opts.max_new_tokens));
    let lock = || bars.lock().unwrap_or_else(PoisonError::into_inner);
    let mut first = None;
    let mut write = |sink: &mut Sink, samples: &[f32], playout: Option<&Playout>| {
        if first.is_none() && !samples.is_empty() {
            let after = started.elapsed();
            first = Some(after);
            let buffered = playout.filter(|p| p.buffered()).map(|p| {
                let secs = samples.len() as f64 / f64::from(ChatterboxTts::SAMPLE_RATE);
                let rate = p.planner.rate().unwrap_or(f64::NAN);
                format!(
                    ", after buffering {secs:.1} s of audio (generation runs at {rate:.2}x real \
                     time)"
                )
            });
            lock().first_audio(after, buffered.as_deref().unwrap_or(""));
        }
        sink.push(samples)
    };
    let result = (|| -> Result<Vec<SentenceTiming>> {
        let stream = tts
            .stream(text, opts)
            .context("speech generation failed")?
            .with_progress(|e| lock().event(e));
        let total = stream.sentences();
        let mut estimate =
            SpeechEstimate::new(text, total, opts.max_new_tokens, f64::from(opts.speed));
        let mut produced = 0;
        let mut timings = Vec::new();
        // A write error returns here, which drops the stream: no more tokens are drawn.
        for chunk in stream {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    // what was held back is written, as it would have been unbuffered
                    if let Some(p) = playout.as_mut() {
                        let held = p.flush();
                        write(sink, &held, Some(&*p))?;
                    }
                    return Err(anyhow::Error::new(e).context("speech generation failed"));
                }
            };
            produced += chunk.samples.len();
            for t in &chunk.captions {
                let secs = t.end_sample.saturating_sub(t.start_sample) as f64
                    / f64::from(ChatterboxTts::SAMPLE_RATE);
                estimate.finished(&t.text, secs);
            }
            match playout.as_mut() {
                Some(p) => {
                    let ready = p.chunk(
                        &chunk.samples,
                        produced,
                        started.elapsed(),
                        &estimate,
                        chunk.is_last,
                        progress,
                    );
                    write(sink, &ready, Some(&*p))?;
                }
                None => write(sink, &chunk.samples, None)?,
            }
            for cut in &chunk.truncated {
                cuts.warn(cut, total);
            }
            timings.extend(chunk.captions);
        }
        if let Some(p) = playout.as_mut() {
            let held = p.flush();
            write(sink, &held, Some(&*p))?;
        }
        Ok(timings)
    })();
    lock().clear();
    result.map(|timings| (first, timings))
}

/// Whether two paths name one file (existing or not: then compared as spelled, made absolute).
fn same_file_or_equal(a: &std::path::Path, b: &std::path::Path) -> bool {
    if let Ok(same) = same_file::is_same_file(a, b) {
        return same;
    }
    std::path::absolute(a).ok() == std::path::absolute(b).ok()
}

fn out_path(out: &Output) -> std::path::PathBuf {
    match out {
        Output::File(p) => p.clone(),
        Output::Stdout => "-".into(),
    }
}

/// The voice: `--voice` (a clip analysed now), `--voice-file` (saved earlier), else the
/// checkpoint's built-in one.
fn set_voice(
    tts: &mut Tts,
    args: &SpeakArgs,
    clip: Option<&Audio>,
    opts: &GenerateOptions,
    dev: &candle_core::Device,
    progress: &Progress,
) -> Result<()> {
    if let (Some(audio), Some(path)) = (clip, &args.voice) {
        let step = progress.step(format!("Analysing the voice in {}", path.display()));
        tts.prepare_conditionals(audio, opts.exaggeration)
            .with_context(|| format!("cannot use {} as the voice", path.display()))?;
        step.done(format!("Analysed the voice in {}", path.display()));
    } else if let Some(path) = &args.voice_file {
        let conds = Conditionals::load(path, dev)
            .with_context(|| format!("cannot load the voice file {}", path.display()))?;
        tts.set_conditionals(conds);
    } else if tts.conditionals().is_none() {
        bail!(
            "no voice: this checkpoint has no built-in voice (conds.pt); pass --voice AUDIO \
             (a 5-10 s clip of the voice to clone) or --voice-file FILE"
        );
    }
    Ok(())
}

/// A bar of text chunks (long texts only) and a bar of the current chunk's speech tokens; off a
/// terminal, a line per finished chunk and one every few seconds while tokens are drawn.
struct Bars<'a> {
    progress: &'a Progress,
    max_tokens: usize,
    chunks: Option<ProgressBar>,
    tokens: Option<ProgressBar>,
    ticker: Ticker,
    started: Instant,
    audio_samples: usize,
}

impl<'a> Bars<'a> {
    fn new(progress: &'a Progress, max_tokens: usize) -> Self {
        Self {
            progress,
            max_tokens,
            chunks: None,
            tokens: None,
            ticker: progress.ticker(),
            started: Instant::now(),
            audio_samples: 0,
        }
    }

    fn event(&mut self, e: &Event) {
        match e {
            Event::ChunkStarted { index, total, .. } => {
                if *total > 1 && self.chunks.is_none() {
                    self.chunks = Some(self.progress.bar(*total as u64, "text chunks", "chunks"));
                }
                if let Some(t) = self.tokens.take() {
                    t.finish_and_clear();
                }
                let label = if *total > 1 {
                    format!("chunk {}", index + 1)
                } else {
                    "speech".to_string()
                };
                self.tokens = Some(self.progress.bar(self.max_tokens as u64, label, "tokens"));
            }
            Event::Tokens {
                chunk,
                generated,
                max,
            } => {
                if let Some(t) = &self.tokens {
                    t.set_length(*max as u64);
                    t.set_position(*generated as u64);
                }
                if self.ticker.due() {
                    self.progress.plain(format!(
                        "  chunk {}: {generated} speech tokens so far (at most {max})",
                        chunk + 1
                    ));
                }
            }
            Event::ChunkFinished {
                index,
                total,
                samples,
            } => {
                if let Some(c) = &self.chunks {
                    c.set_position(*index as u64 + 1);
                }
                self.audio_samples += samples;
                let secs = *samples as f64 / f64::from(ChatterboxTts::SAMPLE_RATE);
                let all = self.audio_samples as f64 / f64::from(ChatterboxTts::SAMPLE_RATE);
                self.progress.plain(format!(
                    "chunk {}/{total} done: {secs:.1} s of audio ({all:.1} s in all, {:.0} s \
                     elapsed)",
                    index + 1,
                    self.started.elapsed().as_secs_f64()
                ));
            }
            _ => {}
        }
    }

    /// The first streamed audio is out, `after` the start of the generation (`how`: what
    /// came before it, if anything, as `, after ...`).
    fn first_audio(&mut self, after: Duration, how: &str) {
        self.progress.note(format!(
            "first audio after {:.2} s{how}",
            after.as_secs_f64()
        ));
    }

    fn clear(&mut self) {
        for b in [self.tokens.take(), self.chunks.take()]
            .into_iter()
            .flatten()
        {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_chunk_is_named_in_its_warning() {
        let w = truncation_warning(1, "This is a test! ", 3, 16);
        assert!(
            w.starts_with(
                "warning: the speech of text chunk 2/3 \"This is a test!\" was cut at \
                 --max-new-tokens 16:"
            ),
            "{w}"
        );
        assert!(w.contains("raise --max-new-tokens"), "{w}");
        let w = truncation_warning(0, "Hello.", 1, 1000);
        assert!(
            w.starts_with("warning: the speech of \"Hello.\" was cut at"),
            "{w}"
        );
        // a long chunk is shortened, on a character boundary
        let long = "é".repeat(100);
        let w = truncation_warning(0, &long, 1, 5);
        assert!(w.contains(&format!("\"{}…\"", "é".repeat(59))), "{w}");
    }

    #[test]
    fn the_buffering_line_says_how_much_and_why() {
        let adaptive = Policy::Adaptive { margin_secs: 0.5 };
        assert_eq!(
            buffering_line(adaptive, 2.14, 0.6),
            "buffering 2.1 s of audio before playing: generation runs at 0.60x real time"
        );
        assert_eq!(
            buffering_line(adaptive, f64::INFINITY, 0.25),
            "buffering all the audio before playing: generation runs at 0.25x real time"
        );
        assert_eq!(
            buffering_line(Policy::Fixed { secs: 1.5 }, 1.5, 3.0),
            "buffering 1.5 s of audio before playing (--prebuffer 1.5)"
        );
    }

    #[test]
    fn bars_follow_the_events() {
        let p = Progress::new(true);
        let mut b = Bars::new(&p, 100);
        b.event(&Event::ChunkStarted {
            index: 0,
            total: 2,
            chars: 10,
        });
        assert!(b.chunks.is_some());
        b.event(&Event::Tokens {
            chunk: 0,
            generated: 5,
            max: 100,
        });
        assert_eq!(b.tokens.as_ref().map(|t| t.position()), Some(5));
        b.event(&Event::ChunkFinished {
            index: 0,
            total: 2,
            samples: 1,
        });
        assert_eq!(b.chunks.as_ref().map(|t| t.position()), Some(1));
        b.clear();
        assert!(b.tokens.is_none() && b.chunks.is_none());
    }
}
