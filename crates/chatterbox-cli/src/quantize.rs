//! `chatterbox quantize`: a checkpoint folder whose T3 is stored in 8 or 4-bit blocks (or
//! bf16), through `chatterbox_pipeline::write_quantized_checkpoint`; `speak`, `vc` and `serve`
//! load it with `--model-dir`.
use crate::args::{CheckpointFormat, Model, QuantizeArgs};
use crate::model::variant;
use crate::progress::Progress;
use crate::source::{read_config, Source};
use crate::{hub, preflight};
use anyhow::{bail, Context, Result};
use chatterbox_pipeline::{
    partial_folder, write_quantized_checkpoint, MultilingualT3, WeightFormat,
};

/// Runs `chatterbox quantize`.
pub fn run(args: QuantizeArgs) -> Result<()> {
    let format = match args.format {
        CheckpointFormat::Q8 => WeightFormat::Q8,
        CheckpointFormat::Q4 => WeightFormat::Q4,
        CheckpointFormat::Bf16 => WeightFormat::Bf16,
    };
    if args.output.symlink_metadata().is_ok() {
        bail!(
            "-o {}: already exists; name a new folder (nothing is overwritten)",
            args.output.display()
        );
    }
    let mtl = match &args.mtl_version {
        Some(v) if args.model != Model::Multilingual => {
            bail!("--mtl-version {v} applies to --model multilingual only")
        }
        Some(v) => MultilingualT3::parse(v)?,
        None => MultilingualT3::V2,
    };
    let v = variant(args.model);
    let config = args.config.as_deref().map(read_config).transpose()?;
    let src = Source::resolve(args.model_dir.as_deref(), v.hub_repo())?;
    let cfg = preflight::effective_config(v, &src, config.as_ref())?;
    let dir = match &src {
        Source::Dir(d) => d.clone(),
        Source::Hub(_) => hub::checkpoint_dir(args.model, &mtl)?,
    };
    // Ctrl-C, SIGTERM, SIGHUP: the half-written hidden folder goes, `-o` never appears
    let partial = partial_folder(&args.output);
    if let Err(e) = ctrlc::set_handler(move || {
        let _ = std::fs::remove_dir_all(&partial);
        eprintln!("\ninterrupted: nothing was written");
        std::process::exit(crate::interrupt::EXIT_INTERRUPTED);
    }) {
        tracing::warn!("cannot handle Ctrl-C: an interrupted run leaves its hidden folder ({e})");
    }
    let progress = Progress::new(args.quiet);
    let step = progress.step(format!(
        "Writing Chatterbox {} from {} with T3 in {format}",
        v.name(),
        src.describe()
    ));
    let written = write_quantized_checkpoint(&dir, v, &mtl, &cfg, format, &args.output)
        .with_context(|| {
            format!(
                "cannot write the {format} checkpoint {}",
                args.output.display()
            )
        })?;
    let r = &written.report;
    let mb = |b: u64| b as f64 / 1e6;
    step.done(format!(
        "Wrote {}: {} {:.1} MB (from {:.1} MB; {} of {} projections in {format}), {} other \
         files copied",
        args.output.display(),
        written.t3_file,
        mb(written.t3_bytes_after),
        mb(written.t3_bytes_before),
        r.quantized,
        r.quantized + r.kept,
        written.copied.len()
    ));
    Ok(())
}
