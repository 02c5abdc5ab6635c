//! `chatterbox vc`: voice conversion with `ChatterboxVc`.
use crate::args::VcArgs;
use crate::input::load_audio;
use crate::output::{summary, Output};
use crate::progress::{Progress, Step};
use crate::source::{read_config, Source};
use crate::{device, preflight};
use anyhow::{Context, Result};
use chatterbox_pipeline::{ChatterboxVc, VcOptions, VcProgress};
use indicatif::ProgressBar;
use std::time::Instant;

/// Runs `chatterbox vc`.
pub fn run(args: VcArgs) -> Result<()> {
    let rt = &args.runtime;
    // Cheap checks first: nothing expensive runs before they pass.
    device::check_available(rt.device)?;
    let out = Output::check(&rt.output)?;
    let mut inputs = vec![("source", args.source.as_path())];
    if let Some(t) = &args.target {
        inputs.push(("--target", t.as_path()));
    }
    if let Some(c) = &rt.config {
        inputs.push(("--config", c.as_path()));
    }
    out.refuse_inputs(&inputs)?;
    preflight::check_vc_window(args.window_ms, args.overlap_ms)?;
    let source_audio = load_audio(&args.source, "source recording")?;
    preflight::check_vc_source(&args.source, &source_audio)?;
    let target_audio = match &args.target {
        Some(p) => {
            let audio = load_audio(p, "target voice clip")?;
            preflight::check_vc_target(p, &audio)?;
            Some(audio)
        }
        None => None,
    };
    let config = rt.config.as_deref().map(read_config).transpose()?;
    let src = Source::resolve(rt.model_dir.as_deref(), "ResembleAI/chatterbox")?;
    preflight::check_vc_checkpoint(&src, args.target.is_none())?;
    let perth = match &src {
        Source::Dir(d) => crate::watermark::checkpoint(&rt.watermark, &[d.as_path()], false)?,
        Source::Hub(_) => crate::watermark::checkpoint(&rt.watermark, &[], true)?,
    };
    let progress = Progress::new(rt.quiet);
    let dev = device::open(rt.device)?;
    let dtype = device::dtype(rt.dtype, &dev);
    if let Some(w) = device::dtype_warning(&dev, dtype) {
        progress.note(w);
    }

    let step = progress.step(format!(
        "Loading the voice conversion model from {}",
        src.describe()
    ));
    let loaded = match &src {
        Source::Dir(dir) => match &config {
            Some(cfg) => ChatterboxVc::from_dir_with_config(dir, &cfg.s3gen, &dev, dtype)
                .map_err(anyhow::Error::from),
            None => ChatterboxVc::from_dir(dir, &dev, dtype).map_err(anyhow::Error::from),
        },
        Source::Hub(_) => crate::hub::vc(&dev, dtype),
    };
    let mut vc = loaded
        .context("cannot load the voice conversion model")?
        .with_watermarker(crate::watermark::load(perth.as_ref(), &dev)?);
    step.done(format!(
        "Loaded the voice conversion model on {}",
        device::describe(&dev)
    ));

    match (&target_audio, &args.target) {
        (Some(audio), Some(path)) => {
            let step = progress.step("Analysing the target voice");
            vc.set_target_voice(audio)
                .with_context(|| format!("cannot use {} as the target voice", path.display()))?;
            step.done("Analysed the target voice");
        }
        _ => anyhow::ensure!(
            vc.target().is_some(),
            "no target voice: pass --target AUDIO (this checkpoint has no built-in voice conds.pt)"
        ),
    }

    let started = Instant::now();
    let opts = VcOptions::default()
        .with_seed(rt.seed)
        .with_window(args.window_ms, args.overlap_ms);
    // Each window's audio is written as it is final: an error or a signal keeps the file at
    // -o as it was (a signal keeps the finished windows in a partial file; see `interrupt`).
    let mut sink = out.sink(ChatterboxVc::SAMPLE_RATE, rt.wav_format, false)?;
    let mut bar = WindowBar::new(&progress, source_audio.duration_secs());
    let mut write_error = None;
    let result = vc.generate_stream(
        &source_audio,
        &opts,
        &mut |p| bar.event(p),
        &mut |samples| {
            sink.push(samples).map_err(|e| {
                let msg = format!("{e:#}");
                write_error = Some(e);
                chatterbox_pipeline::PipelineError::Io {
                    path: out_path(&out),
                    source: std::io::Error::other(msg),
                }
            })
        },
    );
    if let Some(e) = write_error {
        return Err(e);
    }
    result.context("voice conversion failed")?;
    bar.done();
    let samples = sink.finish()?;
    let secs = samples as f64 / f64::from(ChatterboxVc::SAMPLE_RATE);
    progress.note(summary(&out, secs, started.elapsed()));
    Ok(())
}

/// The output's path as the pipeline's errors name it.
fn out_path(out: &Output) -> std::path::PathBuf {
    match out {
        Output::File(p) => p.clone(),
        Output::Stdout => "-".into(),
    }
}

/// A spinner while the source converts in one pass; a bar of windows when it is long enough to
/// be converted in several (off a terminal, a line per finished window).
struct WindowBar<'a> {
    progress: &'a Progress,
    source_secs: f64,
    step: Option<Step>,
    bar: Option<ProgressBar>,
    started: Instant,
}

impl<'a> WindowBar<'a> {
    fn new(progress: &'a Progress, source_secs: f64) -> Self {
        Self {
            progress,
            source_secs,
            step: Some(progress.step(format!("Converting {source_secs:.1} s of speech"))),
            bar: None,
            started: Instant::now(),
        }
    }

    fn event(&mut self, p: &VcProgress) {
        if p.total < 2 {
            return;
        }
        // dropping the spinner clears it
        self.step = None;
        let bar = self
            .bar
            .get_or_insert_with(|| self.progress.bar(p.total as u64, "converting", "windows"));
        bar.set_position(p.done as u64);
        if p.done > 0 {
            self.progress.plain(format!(
                "  window {}/{} done ({:.0} s elapsed)",
                p.done,
                p.total,
                self.started.elapsed().as_secs_f64()
            ));
        }
    }

    fn done(mut self) {
        if let Some(step) = self.step.take() {
            step.done("Converted");
        }
        if let Some(bar) = self.bar.take() {
            let windows = bar.length().unwrap_or(0);
            bar.finish_and_clear();
            self.progress.note(format!(
                "✓ Converted {:.1} s of speech in {windows} windows ({:.1} s)",
                self.source_secs,
                self.started.elapsed().as_secs_f64()
            ));
        }
    }
}

impl Drop for WindowBar<'_> {
    fn drop(&mut self) {
        // a conversion abandoned by an error leaves no bar behind
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
