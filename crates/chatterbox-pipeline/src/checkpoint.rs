//! Checkpoint directories in the hub layout: which file each model variant reads (as
//! chatterbox/tts.py, mtl_tts.py, tts_turbo.py and vc.py do at upstream 5de7a54), and opening
//! them.
use crate::error::loading;
use crate::torch_file::check_torch_weights;
use crate::{PipelineError, Result};
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use std::path::{Path, PathBuf};

/// A Chatterbox text-to-speech model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `ChatterboxTTS` (hub `ResembleAI/chatterbox`).
    English,
    /// `ChatterboxMultilingualTTS`, 23 languages (hub `ResembleAI/chatterbox`).
    Multilingual,
    /// `ChatterboxTurboTTS` (hub `ResembleAI/chatterbox-turbo`).
    Turbo,
    /// `ChatterboxTurboTTS(nano=True)` (hub `ResembleAI/chatterbox-nano`).
    Nano,
}

impl Variant {
    /// Every variant.
    pub const ALL: [Variant; 4] = [
        Variant::English,
        Variant::Multilingual,
        Variant::Turbo,
        Variant::Nano,
    ];

    /// Lowercase name (`"english"`, `"multilingual"`, `"turbo"`, `"nano"`).
    pub fn name(self) -> &'static str {
        match self {
            Variant::English => "english",
            Variant::Multilingual => "multilingual",
            Variant::Turbo => "turbo",
            Variant::Nano => "nano",
        }
    }

    /// Parses a name as [`Variant::name`] writes it (case-insensitive).
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|v| v.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| PipelineError::InvalidInput {
                what: "model variant",
                reason: format!("{name:?}; expected one of english, multilingual, turbo, nano"),
            })
    }

    /// The hub repository of its checkpoint.
    pub fn hub_repo(self) -> &'static str {
        match self {
            Variant::English | Variant::Multilingual => "ResembleAI/chatterbox",
            Variant::Turbo => "ResembleAI/chatterbox-turbo",
            Variant::Nano => "ResembleAI/chatterbox-nano",
        }
    }
}

/// Which multilingual T3 checkpoint to load (`t3_model` of `ChatterboxMultilingualTTS`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MultilingualT3 {
    /// `t3_mtl23ls_v2.safetensors` (the reference's default).
    #[default]
    V2,
    /// `t3_mtl23ls_v3.safetensors`.
    V3,
    /// Another `.safetensors` file in the directory.
    File(String),
}

impl MultilingualT3 {
    /// Parses `"v2"`, `"t3_mtl23ls_v2"`, `"v3"`, `"t3_mtl23ls_v3"` or a `.safetensors` file name
    /// (`_resolve_multilingual_t3_model`).
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "v2" | "t3_mtl23ls_v2" => Self::V2,
            "v3" | "t3_mtl23ls_v3" => Self::V3,
            f if f.ends_with(".safetensors") => Self::File(f.to_string()),
            _ => {
                return Err(PipelineError::InvalidInput {
                    what: "multilingual T3 model",
                    reason: format!(
                        "{name:?}; expected v2, v3, t3_mtl23ls_v2, t3_mtl23ls_v3 or a .safetensors file name"
                    ),
                })
            }
        })
    }

    /// The checkpoint file name.
    pub fn file_name(&self) -> &str {
        match self {
            Self::V2 => "t3_mtl23ls_v2.safetensors",
            Self::V3 => "t3_mtl23ls_v3.safetensors",
            Self::File(f) => f,
        }
    }
}

/// The built-in voice some checkpoints ship.
pub const CONDS_FILE: &str = "conds.pt";

/// The files of one variant in its hub layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointFiles {
    /// VoiceEncoder: `ve.safetensors` (`ve.pt` for the multilingual model).
    pub ve: &'static str,
    /// T3 weights.
    pub t3: String,
    /// S3Gen weights: `s3gen.safetensors`, `s3gen.pt` (multilingual) or
    /// `s3gen_meanflow.safetensors` (Turbo, Nano).
    pub s3gen: &'static str,
    /// The tokenizer file that must exist (Turbo: `tokenizer.json` or `vocab.json`, checked by
    /// the tokenizer).
    pub tokenizer: &'static str,
    /// Files fetched from the hub when present (the built-in voice and tokenizer extras).
    pub optional: &'static [&'static str],
}

impl CheckpointFiles {
    /// The layout of `variant` (`mtl` picks the multilingual T3 file).
    pub fn of(variant: Variant, mtl: &MultilingualT3) -> Self {
        match variant {
            Variant::English => Self {
                ve: "ve.safetensors",
                t3: "t3_cfg.safetensors".into(),
                s3gen: "s3gen.safetensors",
                tokenizer: "tokenizer.json",
                optional: &[CONDS_FILE],
            },
            Variant::Multilingual => Self {
                ve: "ve.pt",
                t3: mtl.file_name().to_string(),
                s3gen: "s3gen.pt",
                tokenizer: "grapheme_mtl_merged_expanded_v1.json",
                optional: &[CONDS_FILE, "Cangjie5_TC.json"],
            },
            Variant::Turbo | Variant::Nano => Self {
                ve: "ve.safetensors",
                t3: if variant == Variant::Nano {
                    "t3_nano_v1.safetensors".into()
                } else {
                    "t3_turbo_v1.safetensors".into()
                },
                s3gen: "s3gen_meanflow.safetensors",
                tokenizer: "vocab.json",
                optional: &[
                    CONDS_FILE,
                    "tokenizer.json",
                    "merges.txt",
                    "added_tokens.json",
                    "special_tokens_map.json",
                    "tokenizer_config.json",
                ],
            },
        }
    }

    /// The quantized T3 file that `chatterbox quantize` writes in place of [`Self::t3`]: its
    /// name with `.gguf` (`t3_cfg.gguf`; see `chatterbox_t3::T3::write_quantized`).
    pub fn quantized_t3(&self) -> String {
        Path::new(&self.t3)
            .with_extension("gguf")
            .to_string_lossy()
            .into_owned()
    }

    /// The T3 file a load reads from `dir`: the quantized one when it is there (a folder
    /// `chatterbox quantize` wrote), else [`Self::t3`] (which may be missing).
    pub fn t3_in(&self, dir: &Path) -> String {
        let quantized = self.quantized_t3();
        if dir.join(&quantized).is_file() {
            quantized
        } else {
            self.t3.clone()
        }
    }

    /// Every file name, required ones first.
    pub fn all(&self) -> Vec<String> {
        let mut v = vec![
            self.ve.to_string(),
            self.t3.clone(),
            self.s3gen.to_string(),
            self.tokenizer.to_string(),
        ];
        v.extend(self.optional.iter().map(|s| s.to_string()));
        v
    }
}

/// `dir/file`, or [`PipelineError::MissingFile`] naming it.
pub(crate) fn require(
    dir: &Path,
    file: &str,
    what: &'static str,
    variant: &'static str,
) -> Result<PathBuf> {
    if !dir.is_dir() {
        return Err(PipelineError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "checkpoint directory not found",
            ),
        });
    }
    let p = dir.join(file);
    if p.is_file() {
        Ok(p)
    } else {
        Err(PipelineError::MissingFile {
            dir: dir.to_path_buf(),
            file: file.to_string(),
            what,
            variant,
        })
    }
}

/// `dir/file` when it exists.
pub(crate) fn optional(dir: &Path, file: &str) -> Option<PathBuf> {
    let p = dir.join(file);
    p.is_file().then_some(p)
}

/// Opens a weights file: `.safetensors` memory-mapped, anything else as a torch pickle
/// (`torch.save`d state dict, e.g. `s3gen.pt`, `ve.pt`).
pub(crate) fn var_builder(
    path: &Path,
    dtype: DType,
    device: &Device,
) -> Result<VarBuilder<'static>> {
    let is_st = path.extension().is_some_and(|e| e == "safetensors");
    let vb = if is_st {
        // SAFETY: the file is memory-mapped read-only and must not be modified while the
        // model is built (weights are copied onto the device by the constructors).
        unsafe { VarBuilder::from_mmaped_safetensors(&[path], dtype, device) }
    } else {
        check_torch_weights(path)?;
        VarBuilder::from_pth(path, dtype, device)
    };
    vb.map_err(PipelineError::from).map_err(loading(path))
}
