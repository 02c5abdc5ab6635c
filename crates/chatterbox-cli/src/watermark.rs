//! Perth, the watermark the reference puts on every output: plugged into the models unless
//! `--no-watermark` (weights from `--watermark-weights`, the model directory, the cache, or a
//! download when the model itself comes from the hub), and the
//! `chatterbox watermark detect|apply` commands.
use crate::args::{WatermarkArgs, WatermarkCommand, WeightsArg};
use crate::input::load_audio;
use crate::output::Output;
use anyhow::{Context, Result};
use chatterbox_pipeline::{
    find_perth_checkpoint, perth_cache_path, perth_watermarker, Device, PipelineError, Watermarker,
};
use chatterbox_watermark::{PerthWatermarker, PERTH_CHECKPOINT_FILE};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Exit status of `detect` when a file carries no watermark.
const NOT_WATERMARKED: u8 = 3;

/// The checkpoint to use (`None` with `--no-watermark`), found before any model loads:
/// `--watermark-weights`, else `perth_net_250000.pth.tar` in one of the model directories
/// `dirs`, else the copy cached beside the hub's files; when a model comes from the hub
/// (`may_download`) a missing copy is downloaded, and with `--model-dir` only the network is
/// never touched.
pub fn checkpoint(
    args: &WatermarkArgs,
    dirs: &[&Path],
    may_download: bool,
) -> Result<Option<PathBuf>> {
    if args.no_watermark {
        return Ok(None);
    }
    if let Some(p) = args.weights.watermark_weights.as_deref() {
        return Ok(Some(find_perth_checkpoint(Some(p))?));
    }
    let in_dirs: Vec<PathBuf> = dirs.iter().map(|d| d.join(PERTH_CHECKPOINT_FILE)).collect();
    if let Some(p) = in_dirs.iter().find(|p| p.is_file()) {
        return Ok(Some(p.clone()));
    }
    let cached = perth_cache_path();
    if let Some(p) = cached.as_ref().filter(|p| p.is_file()) {
        return Ok(Some(p.clone()));
    }
    if may_download {
        return Ok(Some(find_perth_checkpoint(None)?));
    }
    let tried: Vec<String> = in_dirs
        .iter()
        .chain(cached.as_ref())
        .map(|p| p.display().to_string())
        .collect();
    Err(PipelineError::WatermarkWeights {
        why: format!(
            "not at {} (with --model-dir nothing is downloaded)",
            tried.join(" or ")
        ),
    }
    .into())
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
