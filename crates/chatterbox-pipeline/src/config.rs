//! Hyper-parameters of every model in a checkpoint directory, with the values of the released
//! checkpoints as constructors (the reference hard-codes them in `tts.py`, `mtl_tts.py`,
//! `tts_turbo.py`, `vc.py` and `s3gen.py`, upstream 5de7a54).
use chatterbox_s3gen::flow::FlowConfig;
use chatterbox_s3gen::tokenizer::ModelConfig;
use chatterbox_speaker::{CAMPPlusConfig, VoiceEncConfig};
use chatterbox_t3::T3Config;
use chatterbox_vocoder::HiFTConfig;

/// `S3Token2Wav`'s four parts (chatterbox/models/s3gen/s3gen.py), under their attribute names.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct S3GenConfig {
    /// `tokenizer`: S3TokenizerV2 (25 Hz).
    pub tokenizer: ModelConfig,
    /// `speaker_encoder`: CAMPPlus.
    pub speaker_encoder: CAMPPlusConfig,
    /// `flow`: CausalMaskedDiffWithXvec.
    pub flow: FlowConfig,
    /// `mel2wav`: HiFTGenerator.
    pub mel2wav: HiFTConfig,
}

impl S3GenConfig {
    /// `S3Gen()`: `s3gen.safetensors` / `s3gen.pt`.
    pub fn s3gen() -> Self {
        Self {
            tokenizer: ModelConfig::v2_25hz(),
            speaker_encoder: CAMPPlusConfig::s3gen(),
            flow: FlowConfig::s3gen(),
            mel2wav: HiFTConfig::s3gen(),
        }
    }

    /// `S3Gen(meanflow=True)`: Turbo's `s3gen_meanflow.safetensors`.
    pub fn s3gen_meanflow() -> Self {
        Self {
            flow: FlowConfig::s3gen_meanflow(),
            ..Self::s3gen()
        }
    }
}

/// Everything a text-to-speech checkpoint holds: T3, the VoiceEncoder and S3Gen.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct ChatterboxConfig {
    /// T3 (`t3_*.safetensors`).
    pub t3: T3Config,
    /// The VoiceEncoder (`ve.safetensors` / `ve.pt`).
    pub ve: VoiceEncConfig,
    /// S3Gen (`s3gen*.safetensors` / `s3gen.pt`).
    pub s3gen: S3GenConfig,
}

/// A checkpoint directory holding this file is loaded with its hyper-parameters instead of the
/// released ones (the tiny random checkpoints of `parity/checkpoints.py` write it).
pub const CONFIG_FILE: &str = "chatterbox_config.json";

impl ChatterboxConfig {
    /// Reads a JSON configuration (the format of [`CONFIG_FILE`]).
    pub fn from_json_file(path: impl AsRef<std::path::Path>) -> crate::Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| crate::PipelineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|e| crate::PipelineError::InvalidInput {
            what: "model configuration",
            reason: format!("{}: {e}", path.display()),
        })
    }

    /// The configuration in `dir/`[`CONFIG_FILE`] when there is one, else `default`.
    pub fn from_dir_or(dir: &std::path::Path, default: Self) -> crate::Result<Self> {
        let p = dir.join(CONFIG_FILE);
        if p.is_file() {
            Self::from_json_file(p)
        } else {
            Ok(default)
        }
    }

    /// `ChatterboxTTS` (English).
    pub fn english() -> Self {
        Self {
            t3: T3Config::english_only(),
            ve: VoiceEncConfig::default(),
            s3gen: S3GenConfig::s3gen(),
        }
    }

    /// `ChatterboxMultilingualTTS` (v2 and v3 share the architecture).
    pub fn multilingual() -> Self {
        Self {
            t3: T3Config::multilingual(),
            ..Self::english()
        }
    }

    /// `ChatterboxTurboTTS` (GPT-2 medium T3, meanflow S3Gen).
    pub fn turbo() -> Self {
        Self {
            t3: T3Config::turbo(),
            ve: VoiceEncConfig::default(),
            s3gen: S3GenConfig::s3gen_meanflow(),
        }
    }

    /// `ChatterboxTurboTTS(nano=True)` (GPT-2 small T3, meanflow S3Gen).
    pub fn nano() -> Self {
        Self {
            t3: T3Config::nano(),
            ..Self::turbo()
        }
    }
}
