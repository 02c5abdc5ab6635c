//! Perth, the watermark the reference puts on every output: plugged into the models unless
//! `--no-watermark` (weights from `--watermark-weights`, the cache, or a download), and the
//! `chatterbox watermark detect|apply` commands.
use crate::args::{WatermarkArgs, WatermarkCommand, WeightsArg};
use crate::input::load_audio;
use crate::output::Output;
use anyhow::{Context, Result};
use chatterbox_pipeline::{find_perth_checkpoint, perth_watermarker, Device, Watermarker};
use chatterbox_watermark::PerthWatermarker;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Exit status of `detect` when a file carries no watermark.
const NOT_WATERMARKED: u8 = 3;

/// The checkpoint the options name (found or downloaded now, before any model loads), or
/// `None` with `--no-watermark`.
pub fn checkpoint(args: &WatermarkArgs) -> Result<Option<PathBuf>> {
    if args.no_watermark {
        return Ok(None);
    }
    Ok(Some(find_perth_checkpoint(
        args.weights.watermark_weights.as_deref(),
    )?))
}

/// Perth from `checkpoint` on `device`, for `with_watermarker`.
pub fn load(checkpoint: Option<&PathBuf>, device: &Device) -> Result<Option<Arc<dyn Watermarker>>> {
    checkpoint
        .map(|p| perth_watermarker(p, device))
        .transpose()
        .map_err(Into::into)
}

fn perth(weights: &WeightsArg) -> Result<PerthWatermarker> {
    let path = find_perth_checkpoint(weights.watermark_weights.as_deref())?;
    PerthWatermarker::load(&path, &Device::Cpu)
        .with_context(|| format!("cannot load the Perth weights {}", path.display()))
}

/// Runs `chatterbox watermark ...`.
pub fn run(cmd: WatermarkCommand) -> Result<ExitCode> {
    match cmd {
        WatermarkCommand::Detect { files, weights } => {
            let wm = perth(&weights)?;
            let mut all = true;
            for f in &files {
                let audio = load_audio(f, "file")?;
                let d = wm
                    .detect(&audio.samples, audio.sample_rate)
                    .with_context(|| format!("cannot check {}", f.display()))?;
                let verdict = if d.is_watermarked() {
                    "watermarked"
                } else {
                    all = false;
                    "not watermarked"
                };
                println!("{}\t{verdict}\tscore {:.3}", f.display(), d.score);
            }
            Ok(if all {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(NOT_WATERMARKED)
            })
        }
        WatermarkCommand::Apply {
            input,
            output,
            wav_format,
            weights,
        } => {
            let out = Output::check(&output)?;
            out.refuse_inputs(&[("FILE", input.as_path())])?;
            let audio = load_audio(&input, "file")?;
            let wm = perth(&weights)?;
            let marked = wm
                .apply_watermark(&audio.samples, audio.sample_rate)
                .with_context(|| format!("cannot watermark {}", input.display()))?;
            let mut sink = out.sink(audio.sample_rate, wav_format, false)?;
            sink.push(&marked)?;
            sink.finish()?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
