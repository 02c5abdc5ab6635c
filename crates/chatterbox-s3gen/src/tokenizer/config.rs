//! Port of `ModelConfig` in s3tokenizer/model_v2.py (PyPI s3tokenizer 0.3.0).
use crate::{Result, S3GenError};

/// Head width the encoder's rotary table is built for (`precompute_freqs_cis(64, 2048)` is
/// hard-coded in `AudioEncoderV2`), so `n_audio_state / n_audio_head` must be 64.
pub const HEAD_DIM: usize = 64;

/// Hyper-parameters of [`S3TokenizerV2`](super::S3TokenizerV2), with the reference's field
/// names.
///
/// <https://github.com/xingchensong/S3Tokenizer/blob/main/s3tokenizer/model_v2.py> `ModelConfig`
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ModelConfig {
    /// Mel bins of the input. Default: `128`.
    pub n_mels: usize,
    /// Audio context of the v1 model's positional embedding; unused by v2. Default: `1500`.
    pub n_audio_ctx: usize,
    /// Width of the encoder. Default: `1280`.
    pub n_audio_state: usize,
    /// Attention heads (of width 64). Default: `20`.
    pub n_audio_head: usize,
    /// Transformer blocks. Default: `6`.
    pub n_audio_layer: usize,
    /// Codebook size. `S3TokenizerV2` overwrites it with `3^8` for every v2 model, and so does
    /// this port: the FSQ quantiser always yields 6561 codes. Default: `6561`.
    pub n_codebook_size: usize,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self::v2_25hz()
    }
}

impl ModelConfig {
    /// `speech_tokenizer_v2_25hz` as chatterbox builds it (`S3Tokenizer()` ignores any config it
    /// is given): 128 mels, 1280 wide, 20 heads, 6 layers, 6561 codes.
    pub fn v2_25hz() -> Self {
        Self {
            n_mels: 128,
            n_audio_ctx: 1500,
            n_audio_state: 1280,
            n_audio_head: 20,
            n_audio_layer: 6,
            n_codebook_size: 3usize.pow(8),
        }
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.n_audio_state / self.n_audio_head.max(1)
    }

    /// Checks what the reference asserts or silently requires.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| {
            Err(S3GenError::InvalidInput {
                what: "tokenizer ModelConfig",
                reason,
            })
        };
        if self.n_mels == 0 || self.n_audio_state == 0 || self.n_audio_head == 0 {
            return bad(format!("sizes must be positive: {self:?}"));
        }
        if !self.n_audio_state.is_multiple_of(self.n_audio_head) || self.head_dim() != HEAD_DIM {
            return bad(format!(
                "n_audio_state / n_audio_head must be {HEAD_DIM} (the rotary table's width), got \
                 {} / {}",
                self.n_audio_state, self.n_audio_head
            ));
        }
        Ok(())
    }
}
