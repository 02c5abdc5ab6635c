//! Hyper-parameters of [`RefEncoder`](super::RefEncoder): the constructor arguments of
//! `S3Token2Mel.__init__` in chatterbox/models/s3gen/s3gen.py (upstream 5de7a54) that
//! `embed_ref` uses. Field names are the Python attribute names.
use crate::tokenizer::ModelConfig;
use chatterbox_speaker::CAMPPlusConfig;

/// The two networks of `embed_ref`. The 24 kHz mel (`mel_extractor`) has no parameters in the
/// reference: it is `S3GenMelConfig::default()` of chatterbox-dsp.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct RefEncoderConfig {
    /// `tokenizer`: S3TokenizerV2 (25 Hz). Default: [`ModelConfig::v2_25hz`].
    pub tokenizer: ModelConfig,
    /// `speaker_encoder`: CAMPPlus. Default: [`CAMPPlusConfig::s3gen`].
    pub speaker_encoder: CAMPPlusConfig,
}

impl RefEncoderConfig {
    /// S3Gen's (`s3gen.safetensors`, `s3gen.pt`, `s3gen_meanflow.safetensors`: every released
    /// checkpoint has the same tokenizer and speaker encoder).
    pub fn s3gen() -> Self {
        Self {
            tokenizer: ModelConfig::v2_25hz(),
            speaker_encoder: CAMPPlusConfig::s3gen(),
        }
    }
}

impl Default for RefEncoderConfig {
    fn default() -> Self {
        Self::s3gen()
    }
}
