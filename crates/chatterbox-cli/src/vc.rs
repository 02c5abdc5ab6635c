//! `chatterbox vc`: voice conversion with `ChatterboxVc`.
use crate::args::VcArgs;
use crate::device;
use crate::input::load_audio;
use crate::output::{summary, Output};
use crate::progress::Progress;
use crate::source::{read_config, Source};
use anyhow::{Context, Result};
use chatterbox_pipeline::{ChatterboxVc, VcOptions};
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
    let source_audio = load_audio(&args.source, "source recording")?;
    let target_audio = match &args.target {
        Some(p) => Some(load_audio(p, "target voice clip")?),
        None => None,
    };
    let config = rt.config.as_deref().map(read_config).transpose()?;
    let src = Source::resolve(rt.model_dir.as_deref(), "ResembleAI/chatterbox")?;
    let progress = Progress::new(rt.quiet);
    let dev = device::open(rt.device)?;
    let dtype = device::dtype(rt.dtype);

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
    let mut vc = loaded.context("cannot load the voice conversion model")?;
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

    let step = progress.step(format!(
        "Converting {:.1} s of speech",
        source_audio.duration_secs()
    ));
    let started = Instant::now();
    let mut opts = VcOptions::default();
    opts.seed = rt.seed;
    let audio = vc
        .generate(&source_audio, &opts)
        .context("voice conversion failed")?;
    step.done("Converted");
    out.write(&audio, rt.wav_format)?;
    progress.note(summary(&out, audio.duration_secs(), started.elapsed()));
    Ok(())
}
