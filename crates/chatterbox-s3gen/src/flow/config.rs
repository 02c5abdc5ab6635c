//! Hyper-parameters of the flow, with S3Gen's values as constructors. Port of the constructor
//! arguments in chatterbox/models/s3gen/s3gen.py `S3Token2Mel.__init__` and configs.py
//! `CFM_PARAMS` (upstream 5de7a54). Field names are the Python argument names.

use candle_core::DType;

fn default_num_up_blocks() -> usize {
    4
}
fn default_pre_lookahead_len() -> usize {
    3
}
fn default_up_stride() -> usize {
    2
}

/// `UpsampleConformerEncoder`'s arguments (transformer/upsample_encoder.py).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct EncoderConfig {
    /// Width of the token embedding fed to the encoder.
    pub input_size: usize,
    /// Model width (`output_size`).
    pub output_size: usize,
    /// Attention heads of every conformer layer.
    pub attention_heads: usize,
    /// Hidden width of the feed-forward modules.
    pub linear_units: usize,
    /// Conformer layers before the upsampling.
    pub num_blocks: usize,
    /// Conformer layers after the upsampling (hard-coded to 4 in Python). Default: `4`.
    #[serde(default = "default_num_up_blocks")]
    pub num_up_blocks: usize,
    /// Right context of `PreLookaheadLayer` (hard-coded to 3 in Python). Default: `3`.
    #[serde(default = "default_pre_lookahead_len")]
    pub pre_lookahead_len: usize,
    /// Upsampling factor of `Upsample1D` (hard-coded to 2 in Python). Default: `2`.
    #[serde(default = "default_up_stride")]
    pub up_stride: usize,
}

impl EncoderConfig {
    /// S3Gen's encoder: 512 wide, 8 heads, 2048 feed-forward units, 6 + 4 layers.
    pub fn s3gen() -> Self {
        Self {
            input_size: 512,
            output_size: 512,
            attention_heads: 8,
            linear_units: 2048,
            num_blocks: 6,
            num_up_blocks: 4,
            pre_lookahead_len: 3,
            up_stride: 2,
        }
    }
}

/// `ConditionalDecoder`'s arguments (decoder.py): the CFM estimator.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct DecoderConfig {
    /// Channels of the packed input `[x, mu, spks, cond]` (4 x 80).
    pub in_channels: usize,
    /// Mel bins out.
    pub out_channels: usize,
    /// Causal convolutions (S3Gen: `true`, the only variant ported).
    #[serde(default = "yes")]
    pub causal: bool,
    /// Channels per U-Net level (S3Gen: one level of 256, the only layout ported).
    pub channels: Vec<usize>,
    /// Width of one attention head.
    pub attention_head_dim: usize,
    /// Transformer blocks per stage.
    pub n_blocks: usize,
    /// Middle stages.
    pub num_mid_blocks: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// Feed-forward activation (S3Gen: `"gelu"`, the only one ported).
    #[serde(default = "gelu")]
    pub act_fn: String,
    /// Meanflow time mixing (`time_embed_mixer`, the extra `r` input; Turbo's checkpoint).
    /// Default: `false`.
    #[serde(default)]
    pub meanflow: bool,
}

fn yes() -> bool {
    true
}
fn gelu() -> String {
    "gelu".to_string()
}

impl DecoderConfig {
    /// S3Gen's estimator: channels `[256]`, 8 heads of 64, 4 transformer blocks per stage,
    /// 12 middle stages.
    pub fn s3gen() -> Self {
        Self {
            in_channels: 320,
            out_channels: 80,
            causal: true,
            channels: vec![256],
            attention_head_dim: 64,
            n_blocks: 4,
            num_mid_blocks: 12,
            num_heads: 8,
            act_fn: gelu(),
            meanflow: false,
        }
    }

    /// The meanflow estimator of `s3gen_meanflow.safetensors` (Turbo).
    pub fn s3gen_meanflow() -> Self {
        Self {
            meanflow: true,
            ..Self::s3gen()
        }
    }

    /// Width of the time embedding (`channels[0] * 4`).
    pub fn time_embed_dim(&self) -> usize {
        self.channels.first().copied().unwrap_or(0) * 4
    }
}

/// Time schedule of the Euler solver (`t_scheduler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeScheduler {
    /// `t = 1 - cos(linspace(0, 1, n + 1) * pi / 2)`.
    Cosine,
    /// `t = linspace(0, 1, n + 1)`.
    Linear,
}

/// `CFM_PARAMS` (configs.py): the parts inference uses.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct CfmConfig {
    /// Classifier-free guidance weight: `v = (1 + w) v_cond - w v_uncond`.
    pub inference_cfg_rate: f64,
    /// Time schedule (meanflow always uses the linear one).
    pub t_scheduler: TimeScheduler,
}

impl CfmConfig {
    /// S3Gen's `CFM_PARAMS`: guidance 0.7, cosine schedule.
    pub fn s3gen() -> Self {
        Self {
            inference_cfg_rate: 0.7,
            t_scheduler: TimeScheduler::Cosine,
        }
    }
}

impl Default for CfmConfig {
    fn default() -> Self {
        Self::s3gen()
    }
}

/// `CausalMaskedDiffWithXvec`'s arguments (flow.py) with its two sub-modules' configurations.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct FlowConfig {
    /// Token embedding width.
    pub input_size: usize,
    /// Mel bins.
    pub output_size: usize,
    /// Width of the speaker x-vector (CAMPPlus: 192).
    pub spk_embed_dim: usize,
    /// Speech-token vocabulary (6561); larger ids are rejected.
    pub vocab_size: usize,
    /// Mel frames per token.
    pub token_mel_ratio: usize,
    /// Look-ahead tokens trimmed when `finalize` is false.
    pub pre_lookahead_len: usize,
    /// The encoder.
    pub encoder: EncoderConfig,
    /// The estimator.
    pub decoder: DecoderConfig,
    /// The solver.
    #[serde(default)]
    pub cfm: CfmConfig,
}

impl FlowConfig {
    /// S3Gen's flow (`s3gen.safetensors`, the `flow.*` keys).
    pub fn s3gen() -> Self {
        Self {
            input_size: 512,
            output_size: 80,
            spk_embed_dim: 192,
            vocab_size: 6561,
            token_mel_ratio: 2,
            pre_lookahead_len: 3,
            encoder: EncoderConfig::s3gen(),
            decoder: DecoderConfig::s3gen(),
            cfm: CfmConfig::s3gen(),
        }
    }

    /// The meanflow flow of Turbo (`s3gen_meanflow.safetensors`).
    pub fn s3gen_meanflow() -> Self {
        Self {
            decoder: DecoderConfig::s3gen_meanflow(),
            ..Self::s3gen()
        }
    }

    /// Whether this is a meanflow model (2-step solver without guidance).
    pub fn meanflow(&self) -> bool {
        self.decoder.meanflow
    }
}

/// Knobs of one [`CausalMaskedDiffWithXvec::inference`](super::CausalMaskedDiffWithXvec::inference) call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FlowOptions {
    /// Euler steps. Default: `None` (10, or 2 for a meanflow model, as `S3Token2Wav.flow_inference`).
    pub n_timesteps: Option<usize>,
    /// Whether the token stream is complete. When false, the last `pre_lookahead_len` tokens only
    /// serve as look-ahead and their mel frames are not generated (streaming). Default: `true`.
    pub finalize: bool,
}

impl Default for FlowOptions {
    fn default() -> Self {
        Self {
            n_timesteps: None,
            finalize: true,
        }
    }
}

impl FlowOptions {
    /// Sets the number of Euler steps.
    pub fn with_n_timesteps(mut self, n: usize) -> Self {
        self.n_timesteps = Some(n);
        self
    }

    /// Sets `finalize`.
    pub fn with_finalize(mut self, finalize: bool) -> Self {
        self.finalize = finalize;
        self
    }
}

/// Whether a dtype can run the estimator (the solver itself always runs in f32).
pub(crate) fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
}
