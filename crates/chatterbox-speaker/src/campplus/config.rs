//! The constructor arguments of `CAMPPlus` in chatterbox/models/s3gen/xvector.py (upstream 5de7a54).
use crate::{Result, SpeakerError};

/// Hyper-parameters of CAMPPlus, with the reference's argument names and defaults (the ones
/// S3Gen uses). The FCM head (32 channels, 2 + 2 residual blocks), the dense block layout
/// (12, 24, 16 layers, kernel 3, dilations 1, 2, 2) and the segment length (100 frames) are
/// hard-coded in the reference and here.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct CAMPPlusConfig {
    /// Filterbank bins of the input features (must be a multiple of 8). Default: `80`.
    pub feat_dim: usize,
    /// Output embedding size. Default: `192`.
    pub embedding_size: usize,
    /// Channels each dense TDNN layer adds. Default: `32`.
    pub growth_rate: usize,
    /// Bottleneck width of a dense layer, in multiples of `growth_rate`. Default: `4`.
    pub bn_size: usize,
    /// Channels after the first TDNN layer. Default: `128`.
    pub init_channels: usize,
    /// Non-linearity after each layer; only `"batchnorm-relu"` is supported.
    /// Default: `"batchnorm-relu"`.
    pub config_str: String,
    /// Activation checkpointing during training; no effect on inference. Default: `true`
    /// (S3Gen passes `false`).
    pub memory_efficient: bool,
    /// `"segment"` (one embedding per utterance); `"frame"` is not supported.
    /// Default: `"segment"`.
    pub output_level: String,
}

impl Default for CAMPPlusConfig {
    fn default() -> Self {
        Self {
            feat_dim: 80,
            embedding_size: 192,
            growth_rate: 32,
            bn_size: 4,
            init_channels: 128,
            config_str: "batchnorm-relu".to_string(),
            memory_efficient: true,
            output_level: "segment".to_string(),
        }
    }
}

impl CAMPPlusConfig {
    /// S3Gen's speaker encoder (`CAMPPlus(memory_efficient=False)`).
    pub fn s3gen() -> Self {
        Self {
            memory_efficient: false,
            ..Self::default()
        }
    }

    /// Rejects configurations the port does not implement or that the reference cannot run.
    pub fn validate(&self) -> Result<()> {
        let bad = |field, reason: &str| {
            Err(SpeakerError::UnsupportedConfig {
                field,
                reason: reason.to_string(),
            })
        };
        if self.config_str != "batchnorm-relu" {
            return bad("config_str", "only \"batchnorm-relu\" is implemented");
        }
        if self.output_level != "segment" {
            return bad("output_level", "only \"segment\" is implemented");
        }
        if self.feat_dim == 0 || !self.feat_dim.is_multiple_of(8) {
            return bad("feat_dim", "must be a positive multiple of 8");
        }
        let bn = self.bn_size * self.growth_rate;
        if self.embedding_size == 0 || self.growth_rate == 0 || self.init_channels < 2 || bn < 2 {
            return bad(
                "embedding_size/growth_rate/bn_size/init_channels",
                "sizes must be positive (init_channels and bn_size * growth_rate at least 2)",
            );
        }
        Ok(())
    }
}
