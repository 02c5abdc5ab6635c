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

/// Largest integer a configuration file may hold: 8 x the largest size in a released model
/// (`max_position_embeddings`, 131072). The constructors compute products of sizes and
/// allocate some buffers before any weight is read, so `usize::MAX` overflowed them and
/// `10^12` asked for terabytes.
const MAX_CONFIG_INT: u64 = 1 << 20;
/// Largest layer or block count (the released models have at most 30): the constructors
/// reserve room for every layer before reading the first one's weights.
const MAX_LAYERS: u64 = 1024;
const LAYER_KEYS: [&str; 7] = [
    "num_hidden_layers",
    "n_layer",
    "n_blocks",
    "num_mid_blocks",
    "num_blocks",
    "num_up_blocks",
    "n_audio_layer",
];
/// Largest FFT or window length (400 in the released models): windows and FFT plans of this
/// length are made when the model is built.
const MAX_FFT: u64 = 1 << 16;
const FFT_KEYS: [&str; 2] = ["n_fft", "win_size"];
/// Kernel-size lists: a zero kernel underflows the vocoder's padding (`kernel - 1`).
const KERNEL_KEYS: [&str; 3] = [
    "resblock_kernel_sizes",
    "source_resblock_kernel_sizes",
    "upsample_kernel_sizes",
];

/// Checks every non-negative integer of a configuration against the bound of its key (`key`:
/// the object key it sits under, arrays included; `path`: where it is, for the message).
fn check_sizes(v: &serde_json::Value, path: &str, key: &str) -> Result<(), String> {
    use serde_json::Value;
    match v {
        Value::Object(m) => m
            .iter()
            .try_for_each(|(k, v)| check_sizes(v, &format!("{path}.{k}"), k)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| check_sizes(v, &format!("{path}[{i}]"), key)),
        Value::Number(n) => {
            let Some(n) = n.as_u64() else {
                return Ok(()); // negative or fractional: serde decides
            };
            let path = path.trim_start_matches('.');
            let max = if LAYER_KEYS.contains(&key) {
                MAX_LAYERS
            } else if FFT_KEYS.contains(&key) {
                MAX_FFT
            } else {
                MAX_CONFIG_INT
            };
            if n > max {
                Err(format!("{path} = {n} is larger than {max}"))
            } else if n == 0 && KERNEL_KEYS.contains(&key) {
                Err(format!("{path} = 0: a kernel size must be at least 1"))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// A checkpoint directory holding this file is loaded with its hyper-parameters instead of the
/// released ones (the tiny random checkpoints of `parity/checkpoints.py` write it).
pub const CONFIG_FILE: &str = "chatterbox_config.json";

impl ChatterboxConfig {
    /// Reads a JSON configuration (the format of [`CONFIG_FILE`]). Integers are bounded before
    /// the models are built from them: layer and block counts by 1024, FFT and window lengths
    /// by 65536, kernel sizes must be positive, any other integer is at most 2^20.
    pub fn from_json_file(path: impl AsRef<std::path::Path>) -> crate::Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| crate::PipelineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let invalid = |reason: String| crate::PipelineError::InvalidInput {
            what: "model configuration",
            reason: format!("{}: {reason}", path.display()),
        };
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        check_sizes(&value, "", "").map_err(invalid)?;
        serde_json::from_value(value).map_err(|e| invalid(e.to_string()))
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
