//! A quantized checkpoint folder (`chatterbox quantize`): a model's files in the hub layout
//! with T3 stored in 8 or 4-bit blocks (or bf16) as `t3_*.gguf`, which every loader here reads
//! in its own format without the full-precision T3 (a smaller download, a faster start, less
//! memory). The flow, HiFT, speaker encoders, tokenizer, built-in voice and config are copied.
use crate::checkpoint::{require, CheckpointFiles, MultilingualT3, Variant};
use crate::config::{ChatterboxConfig, CONFIG_FILE};
use crate::error::loading;
use crate::tts::TtsCore;
use crate::{PipelineError, Result};
use candle_core::{DType, Device};
use chatterbox_t3::{QuantizeReport, WeightFormat, T3};
use std::path::{Path, PathBuf};

/// What [`write_quantized_checkpoint`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantizedCheckpoint {
    /// What T3's quantization did (projections stored in the format, kept, their bytes).
    pub report: QuantizeReport,
    /// The quantized T3 file's name in the folder (`t3_cfg.gguf`, ...).
    pub t3_file: String,
    /// Bytes of the full-precision T3 file read.
    pub t3_bytes_before: u64,
    /// Bytes of the quantized T3 file written.
    pub t3_bytes_after: u64,
    /// The other files copied, by name.
    pub copied: Vec<String>,
}

/// Writes `out`, a checkpoint folder of `variant` (`mtl`: which multilingual T3) whose T3 is
/// `src`'s stored in `format` (q8, q4 or bf16; see [`T3::write_quantized`]), with `src`'s other
/// files of that variant copied (and its [`CONFIG_FILE`], when there is one). `cfg` is the
/// configuration `src` loads with. Before it appears the folder is loaded once on the CPU, so a
/// damaged input file fails here, not at the next use.
///
/// `out` must not exist: the folder is written under a temporary name beside it and renamed at
/// the end, so a failure (or an interruption) never leaves a half-written `out` (a killed
/// process may leave the hidden `.NAME.partial-PID` folder).
pub fn write_quantized_checkpoint(
    src: &Path,
    variant: Variant,
    mtl: &MultilingualT3,
    cfg: &ChatterboxConfig,
    format: WeightFormat,
    out: &Path,
) -> Result<QuantizedCheckpoint> {
    if format.is_exact() {
        return Err(PipelineError::InvalidInput {
            what: "weight format",
            reason: format!("{format} is the full-precision checkpoint: pick q8, q4 or bf16"),
        });
    }
    if out.symlink_metadata().is_ok() {
        return Err(PipelineError::InvalidInput {
            what: "output directory",
            reason: format!(
                "{} already exists; name a new folder (nothing is overwritten)",
                out.display()
            ),
        });
    }
    let files = CheckpointFiles::of(variant, mtl);
    let name = variant.name();
    if src.join(files.quantized_t3()).is_file() && !src.join(&files.t3).is_file() {
        return Err(PipelineError::InvalidInput {
            what: "checkpoint directory",
            reason: format!(
                "{} is already quantized ({}); quantize the full-precision checkpoint",
                src.display(),
                files.quantized_t3()
            ),
        });
    }
    let t3_src = require(src, &files.t3, "T3 weights", name)?;
    for (file, what) in [
        (files.ve, "VoiceEncoder weights"),
        (files.s3gen, "S3Gen weights"),
    ] {
        require(src, file, what, name)?;
    }
    // Turbo's tokenizer is tokenizer.json, or vocab.json with merges.txt
    if !(files.tokenizer == "vocab.json" && src.join("tokenizer.json").is_file()) {
        require(src, files.tokenizer, "text tokenizer", name)?;
    }
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(PipelineError::Io {
            path: parent,
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the output's parent folder does not exist",
            ),
        });
    }
    if out.file_name().is_none() {
        return Err(PipelineError::InvalidInput {
            what: "output directory",
            reason: format!("{} names no folder", out.display()),
        });
    }
    let tmp = Partial::create(partial_folder(out))?;

    let t3_file = files.quantized_t3();
    let report = T3::write_quantized(&cfg.t3, &[&t3_src], format, &tmp.0.join(&t3_file))
        .map_err(PipelineError::from)
        .map_err(loading(&t3_src))?;
    let mut copied = Vec::new();
    let mut names = files.all();
    names.push(CONFIG_FILE.to_string());
    for file in names.iter().filter(|f| **f != files.t3) {
        let from = src.join(file);
        if from.is_file() {
            std::fs::copy(&from, tmp.0.join(file)).map_err(|e| PipelineError::Io {
                path: from.clone(),
                source: e,
            })?;
            copied.push(file.clone());
        }
    }
    // every file as the next load reads it: a damaged voice, flow or tokenizer fails now
    // (named by the source folder: the copies are byte for byte)
    TtsCore::load(&tmp.0, variant, mtl, cfg, &Device::Cpu, DType::F32).map_err(|e| {
        PipelineError::Checkpoint {
            path: src.to_path_buf(),
            source: Box::new(e),
        }
    })?;
    let size = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.len())
            .map_err(|e| PipelineError::Io {
                path: p.to_path_buf(),
                source: e,
            })
    };
    let written = QuantizedCheckpoint {
        report,
        t3_bytes_before: size(&t3_src)?,
        t3_bytes_after: size(&tmp.0.join(&t3_file))?,
        t3_file,
        copied,
    };
    tmp.persist(out)?;
    Ok(written)
}

/// The hidden folder [`write_quantized_checkpoint`] writes `out` in before renaming it
/// (`.NAME.partial-PID` beside it): what a signal handler removes when the process is stopped.
pub fn partial_folder(out: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(out.file_name().unwrap_or_default());
    name.push(format!(".partial-{}", std::process::id()));
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.join(name),
        _ => PathBuf::from(name),
    }
}

/// A folder being written, removed when dropped unless [`Partial::persist`]ed.
struct Partial(PathBuf);

impl Partial {
    fn create(path: PathBuf) -> Result<Self> {
        // a folder of this name left by a killed run of this process id
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).map_err(|e| PipelineError::Io {
            path: path.clone(),
            source: e,
        })?;
        Ok(Self(path))
    }

    /// Renames the folder to `to` (which must not exist).
    fn persist(self, to: &Path) -> Result<()> {
        if to.symlink_metadata().is_ok() {
            return Err(PipelineError::InvalidInput {
                what: "output directory",
                reason: format!("{} appeared while it was written", to.display()),
            });
        }
        std::fs::rename(&self.0, to).map_err(|e| PipelineError::Io {
            path: to.to_path_buf(),
            source: e,
        })
        // `self` drops here: its folder is gone after the rename, so nothing is removed
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
