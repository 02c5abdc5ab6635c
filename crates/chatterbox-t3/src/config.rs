//! Port of chatterbox/models/t3/modules/t3_config.py and chatterbox/models/t3/llama_configs.py
//! (upstream 5de7a54).
use crate::{Result, T3Error};
use std::collections::HashMap;
use std::path::Path;

/// `rope_scaling` of a Llama config (`rope_type = "llama3"` is the only kind T3 uses).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct RopeScaling {
    /// Long-wavelength divisor. Default in Llama_520M: `8.0`.
    pub factor: f64,
    /// Default in Llama_520M: `4.0`.
    pub high_freq_factor: f64,
    /// Default in Llama_520M: `1.0`.
    pub low_freq_factor: f64,
    /// Default in Llama_520M: `8192`.
    pub original_max_position_embeddings: usize,
    /// Only `"llama3"` is supported.
    pub rope_type: String,
}

/// The transformers `LlamaConfig` fields T3's backbone uses (`LLAMA_520M_CONFIG_DICT`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct LlamaConfig {
    /// Model width. Llama_520M: `1024`.
    pub hidden_size: usize,
    /// SwiGLU inner width. Llama_520M: `4096`.
    pub intermediate_size: usize,
    /// Decoder layers. Llama_520M: `30`.
    pub num_hidden_layers: usize,
    /// Attention heads. Llama_520M: `16`.
    pub num_attention_heads: usize,
    /// Key/value heads (must equal `num_attention_heads`). Llama_520M: `16`.
    pub num_key_value_heads: usize,
    /// Per-head width. Llama_520M: `64`.
    pub head_dim: usize,
    /// RMSNorm epsilon. Llama_520M: `1e-5`.
    pub rms_norm_eps: f64,
    /// RoPE base. Llama_520M: `500000.0`.
    pub rope_theta: f64,
    /// llama3 frequency scaling; `None` is plain RoPE.
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// Unused by T3 (its own tables bound the length). Llama_520M: `131072`.
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
}

fn default_max_pos() -> usize {
    131_072
}

impl LlamaConfig {
    /// `LLAMA_520M_CONFIG_DICT`: the backbone of T3 English and multilingual.
    pub fn llama_520m() -> Self {
        Self {
            hidden_size: 1024,
            intermediate_size: 4096,
            num_hidden_layers: 30,
            num_attention_heads: 16,
            num_key_value_heads: 16,
            head_dim: 64,
            rms_norm_eps: 1e-5,
            rope_theta: 500_000.0,
            rope_scaling: Some(RopeScaling {
                factor: 8.0,
                high_freq_factor: 4.0,
                low_freq_factor: 1.0,
                original_max_position_embeddings: 8192,
                rope_type: "llama3".into(),
            }),
            max_position_embeddings: 131_072,
        }
    }
}

/// The transformers `GPT2Config` fields T3 Turbo's backbone uses.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct GPT2Config {
    /// Model width. GPT2_medium: `1024`; GPT2_small: `768`.
    pub n_embd: usize,
    /// Attention heads. GPT2_medium: `16`; GPT2_small: `12`.
    pub n_head: usize,
    /// Blocks. GPT2_medium: `24`; GPT2_small: `12`.
    pub n_layer: usize,
    /// Rows of the learned position table `wpe`. Default: `8196`.
    pub n_positions: usize,
    /// LayerNorm epsilon. Default: `1e-5`.
    #[serde(default = "default_ln_eps")]
    pub layer_norm_epsilon: f64,
    /// Only `"gelu_new"` (tanh approximation) is supported. Default: `"gelu_new"`.
    #[serde(default = "default_act")]
    pub activation_function: String,
}

fn default_ln_eps() -> f64 {
    1e-5
}

fn default_act() -> String {
    "gelu_new".into()
}

impl GPT2Config {
    /// `GPT2_MEDIUM_CONFIG`: the backbone of Chatterbox Turbo.
    pub fn gpt2_medium() -> Self {
        Self {
            n_embd: 1024,
            n_head: 16,
            n_layer: 24,
            n_positions: 8196,
            layer_norm_epsilon: 1e-5,
            activation_function: "gelu_new".into(),
        }
    }

    /// `GPT2_SMALL_CONFIG`: the backbone of Chatterbox Nano (Turbo architecture).
    pub fn gpt2_small() -> Self {
        Self {
            n_embd: 768,
            n_head: 12,
            n_layer: 12,
            ..Self::gpt2_medium()
        }
    }
}

/// The transformer behind T3 (`LLAMA_CONFIGS[hp.llama_config_name]`), tagged by `model_type`
/// as in the Python dicts.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(tag = "model_type", rename_all = "lowercase")]
pub enum BackboneConfig {
    /// `LlamaModel` (English and multilingual).
    Llama(LlamaConfig),
    /// `GPT2Model` (Turbo and Nano).
    Gpt2(GPT2Config),
}

impl BackboneConfig {
    /// Model width (`hidden_size`).
    pub fn hidden_size(&self) -> usize {
        match self {
            Self::Llama(c) => c.hidden_size,
            Self::Gpt2(c) => c.n_embd,
        }
    }

    /// Number of transformer layers.
    pub fn num_layers(&self) -> usize {
        match self {
            Self::Llama(c) => c.num_hidden_layers,
            Self::Gpt2(c) => c.n_layer,
        }
    }

    /// Number of attention heads (= key/value heads).
    pub fn num_heads(&self) -> usize {
        match self {
            Self::Llama(c) => c.num_attention_heads,
            Self::Gpt2(c) => c.n_head,
        }
    }

    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        match self {
            Self::Llama(c) => c.head_dim,
            Self::Gpt2(c) => c.n_embd / c.n_head.max(1),
        }
    }
}

/// Hyper-parameters of the `Perceiver` resampler. The reference builds `Perceiver()` with these
/// defaults hard-coded; they are fields here so tiny test models can shrink them.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct PerceiverConfig {
    /// Learned queries (output positions). Default: `32`.
    pub pre_attention_query_token: usize,
    /// Width of each query. Default: `1024`.
    pub pre_attention_query_size: usize,
    /// Attention width. Default: `1024`.
    pub embedding_dim: usize,
    /// Attention heads. Default: `4`.
    pub num_attn_heads: usize,
}

impl Default for PerceiverConfig {
    fn default() -> Self {
        Self {
            pre_attention_query_token: 32,
            pre_attention_query_size: 1024,
            embedding_dim: 1024,
            num_attn_heads: 4,
        }
    }
}

/// `T3Config`: token vocabularies, special tokens, table sizes and which conditioning parts
/// exist, plus the backbone (`LLAMA_CONFIGS[llama_config_name]` in Python) and the perceiver.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default)]
pub struct T3Config {
    /// Start-of-text id. Default: `255`.
    pub start_text_token: u32,
    /// End-of-text id. Default: `0`.
    pub stop_text_token: u32,
    /// Text vocabulary: `704` English, `2454` multilingual, `50276` Turbo. Default: `704`.
    pub text_tokens_dict_size: usize,
    /// Text positions are `max_text_tokens + 2`. Default: `2048`.
    pub max_text_tokens: usize,
    /// Start-of-speech id. Default: `6561`.
    pub start_speech_token: u32,
    /// End-of-speech id. Default: `6562`.
    pub stop_speech_token: u32,
    /// Speech vocabulary: `8194` (Turbo `6563`). Default: `8194`.
    pub speech_tokens_dict_size: usize,
    /// Speech positions are `max_speech_tokens + 4`. Default: `4096`.
    pub max_speech_tokens: usize,
    /// Backbone name in the Python `LLAMA_CONFIGS`. Default: `"Llama_520M"`.
    pub llama_config_name: String,
    /// `Some("learned")` adds T3's own text/speech position embeddings; Turbo has `None`.
    /// Default: `Some("learned")`.
    pub input_pos_emb: Option<String>,
    /// Prompt tokens the pipeline extracts (150 = 6 s; Turbo 375). Default: `150`.
    pub speech_cond_prompt_len: usize,
    /// Only `"voice_encoder"`. Default: `"voice_encoder"`.
    pub encoder_type: String,
    /// VoiceEncoder embedding width. Default: `256`.
    pub speaker_embed_size: usize,
    /// Resample the prompt with the Perceiver (Turbo: no). Default: `true`.
    pub use_perceiver_resampler: bool,
    /// Emotion/exaggeration conditioning slot (Turbo: no). Default: `true`.
    pub emotion_adv: bool,
    /// The transformer. Default: Llama_520M.
    pub backbone: BackboneConfig,
    /// The perceiver (used when `use_perceiver_resampler`). Default: `Perceiver()`'s.
    pub perceiver: PerceiverConfig,
}

impl Default for T3Config {
    fn default() -> Self {
        Self::english_only()
    }
}

/// Width of every real T3 attention head; used to infer head counts from checkpoint shapes.
const REAL_HEAD_DIM: usize = 64;

impl T3Config {
    /// `T3Config.english_only()`: Llama_520M, text vocab 704 (`t3_cfg.safetensors`).
    pub fn english_only() -> Self {
        Self {
            start_text_token: 255,
            stop_text_token: 0,
            text_tokens_dict_size: 704,
            max_text_tokens: 2048,
            start_speech_token: 6561,
            stop_speech_token: 6562,
            speech_tokens_dict_size: 8194,
            max_speech_tokens: 4096,
            llama_config_name: "Llama_520M".into(),
            input_pos_emb: Some("learned".into()),
            speech_cond_prompt_len: 150,
            encoder_type: "voice_encoder".into(),
            speaker_embed_size: 256,
            use_perceiver_resampler: true,
            emotion_adv: true,
            backbone: BackboneConfig::Llama(LlamaConfig::llama_520m()),
            perceiver: PerceiverConfig::default(),
        }
    }

    /// `T3Config.multilingual()`: as English with text vocab 2454 (`t3_mtl23ls_v2` / `_v3`).
    pub fn multilingual() -> Self {
        Self {
            text_tokens_dict_size: 2454,
            ..Self::english_only()
        }
    }

    /// Chatterbox Turbo (`tts_turbo.py`): GPT2_medium, GPT-2 text vocab 50276, speech vocab
    /// 6563, no learned positions, no perceiver, no emotion slot, 375 prompt tokens.
    pub fn turbo() -> Self {
        Self {
            text_tokens_dict_size: 50276,
            speech_tokens_dict_size: 6563,
            llama_config_name: "GPT2_medium".into(),
            input_pos_emb: None,
            speech_cond_prompt_len: 375,
            use_perceiver_resampler: false,
            emotion_adv: false,
            backbone: BackboneConfig::Gpt2(GPT2Config::gpt2_medium()),
            ..Self::english_only()
        }
    }

    /// Chatterbox Nano: the Turbo architecture on GPT2_small (`t3_nano_v1.safetensors`).
    pub fn nano() -> Self {
        Self {
            llama_config_name: "GPT2_small".into(),
            backbone: BackboneConfig::Gpt2(GPT2Config::gpt2_small()),
            ..Self::turbo()
        }
    }

    /// Model width (`n_channels` in Python).
    pub fn n_channels(&self) -> usize {
        self.backbone.hidden_size()
    }

    /// `is_multilingual`: exactly the 2454-token text vocabulary.
    pub fn is_multilingual(&self) -> bool {
        self.text_tokens_dict_size == 2454
    }

    /// Whether the backbone is GPT-2 (Turbo/Nano: `inference_turbo`).
    pub fn is_gpt(&self) -> bool {
        matches!(self.backbone, BackboneConfig::Gpt2(_))
    }

    /// Whether T3's learned text/speech position embeddings exist.
    pub fn has_learned_pos_emb(&self) -> bool {
        self.input_pos_emb.as_deref() == Some("learned")
    }

    /// Rows of `text_pos_emb` (`max_text_tokens + 2`).
    pub fn text_positions(&self) -> usize {
        self.max_text_tokens + 2
    }

    /// Rows of `speech_pos_emb` (`max_speech_tokens + 2 + 2`).
    pub fn speech_positions(&self) -> usize {
        self.max_speech_tokens + 4
    }

    /// The most speech tokens one generation can ask for (`max_new_tokens`, Turbo's
    /// `max_gen_len`), before the prompt is counted: the speech position table when T3 has
    /// learned position embeddings, else the backbone's positions. A generation also needs
    /// room for its prompt, so the usable number is somewhat lower on GPT-2.
    pub fn max_new_tokens_limit(&self) -> usize {
        if self.has_learned_pos_emb() {
            return self.speech_positions();
        }
        match &self.backbone {
            BackboneConfig::Llama(c) => c.max_position_embeddings,
            BackboneConfig::Gpt2(c) => c.n_positions,
        }
    }

    /// A short name of the variant, for messages.
    pub fn variant_name(&self) -> &'static str {
        if self.is_gpt() {
            "Turbo/Nano (GPT-2)"
        } else if self.is_multilingual() {
            "multilingual (Llama)"
        } else {
            "English (Llama)"
        }
    }

    /// Checks the values the model code relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(T3Error::InvalidConfig(m));
        if self.encoder_type != "voice_encoder" {
            return bad(format!(
                "encoder_type {:?} (only \"voice_encoder\")",
                self.encoder_type
            ));
        }
        if let Some(p) = &self.input_pos_emb {
            if p != "learned" {
                return bad(format!("input_pos_emb {p:?} (only \"learned\" or none)"));
            }
        }
        let max_id = self.start_speech_token.max(self.stop_speech_token) as usize;
        if max_id >= self.speech_tokens_dict_size {
            return bad(format!(
                "speech vocab {} has no room for start/stop ids {}/{}",
                self.speech_tokens_dict_size, self.start_speech_token, self.stop_speech_token
            ));
        }
        match &self.backbone {
            BackboneConfig::Llama(c) => {
                if c.num_key_value_heads != c.num_attention_heads {
                    return bad("grouped-query attention (num_key_value_heads != num_attention_heads) is not used by T3".into());
                }
                if c.head_dim % 2 != 0 || c.num_attention_heads == 0 {
                    return bad(format!("head_dim {} must be even", c.head_dim));
                }
                if let Some(r) = &c.rope_scaling {
                    if r.rope_type != "llama3" {
                        return bad(format!("rope_type {:?} (only \"llama3\")", r.rope_type));
                    }
                }
            }
            BackboneConfig::Gpt2(c) => {
                if c.n_head == 0 || c.n_embd % c.n_head != 0 {
                    return bad(format!(
                        "n_embd {} not divisible by n_head {}",
                        c.n_embd, c.n_head
                    ));
                }
                if c.activation_function != "gelu_new" {
                    return bad(format!(
                        "activation_function {:?} (only \"gelu_new\")",
                        c.activation_function
                    ));
                }
            }
        }
        if self.use_perceiver_resampler {
            let p = &self.perceiver;
            if p.num_attn_heads == 0 || !p.embedding_dim.is_multiple_of(p.num_attn_heads) {
                return bad(format!(
                    "perceiver width {} not divisible by {} heads",
                    p.embedding_dim, p.num_attn_heads
                ));
            }
        }
        Ok(())
    }

    /// Infers the configuration of a checkpoint from its tensor shapes (English, multilingual,
    /// Turbo or Nano, or any resized variant). Head counts are not stored in a checkpoint: they
    /// are taken as `width / 64`, as in every released T3.
    pub fn from_tensor_shapes(shapes: &HashMap<String, Vec<usize>>) -> Result<Self> {
        let shape = |k: &str| shapes.get(k);
        let dim = |k: &str, i: usize| -> Result<usize> {
            shapes
                .get(k)
                .and_then(|s| s.get(i).copied())
                .ok_or_else(|| T3Error::WrongVariant {
                    expected: "Chatterbox",
                    reason: format!("missing tensor {k}"),
                })
        };
        let count = |fmt: &dyn Fn(usize) -> String| {
            (0..).take_while(|i| shapes.contains_key(&fmt(*i))).count()
        };
        let mut cfg = if shape("tfmr.layers.0.self_attn.q_proj.weight").is_some() {
            let hidden = dim("tfmr.norm.weight", 0)?;
            let heads = (hidden / REAL_HEAD_DIM).max(1);
            let mut c = Self::english_only();
            c.backbone = BackboneConfig::Llama(LlamaConfig {
                hidden_size: hidden,
                intermediate_size: dim("tfmr.layers.0.mlp.gate_proj.weight", 0)?,
                num_hidden_layers: count(&|i| format!("tfmr.layers.{i}.self_attn.q_proj.weight")),
                num_attention_heads: heads,
                num_key_value_heads: heads,
                head_dim: hidden / heads,
                ..LlamaConfig::llama_520m()
            });
            c
        } else if shape("tfmr.h.0.attn.c_attn.weight").is_some() {
            let n_embd = dim("tfmr.wpe.weight", 1)?;
            let mut c = Self::turbo();
            c.backbone = BackboneConfig::Gpt2(GPT2Config {
                n_embd,
                n_head: (n_embd / REAL_HEAD_DIM).max(1),
                n_layer: count(&|i| format!("tfmr.h.{i}.attn.c_attn.weight")),
                n_positions: dim("tfmr.wpe.weight", 0)?,
                ..GPT2Config::gpt2_medium()
            });
            c.llama_config_name = match (n_embd, c.backbone.num_layers()) {
                (1024, 24) => "GPT2_medium".into(),
                (768, 12) => "GPT2_small".into(),
                _ => "GPT2_custom".into(),
            };
            c
        } else {
            return Err(T3Error::WrongVariant {
                expected: "Chatterbox",
                reason: "neither Llama (tfmr.layers.*) nor GPT-2 (tfmr.h.*) backbone weights found"
                    .into(),
            });
        };
        cfg.text_tokens_dict_size = dim("text_emb.weight", 0)?;
        cfg.speech_tokens_dict_size = dim("speech_emb.weight", 0)?;
        cfg.speaker_embed_size = dim("cond_enc.spkr_enc.weight", 1)?;
        if let Some(s) = shape("text_pos_emb.emb.weight") {
            cfg.input_pos_emb = Some("learned".into());
            cfg.max_text_tokens = s[0].saturating_sub(2);
            cfg.max_speech_tokens = dim("speech_pos_emb.emb.weight", 0)?.saturating_sub(4);
        } else {
            cfg.input_pos_emb = None;
        }
        cfg.emotion_adv = shape("cond_enc.emotion_adv_fc.weight").is_some();
        cfg.use_perceiver_resampler = shape("cond_enc.perceiver.pre_attention_query").is_some();
        if cfg.use_perceiver_resampler {
            cfg.perceiver = PerceiverConfig {
                pre_attention_query_token: dim("cond_enc.perceiver.pre_attention_query", 1)?,
                pre_attention_query_size: dim("cond_enc.perceiver.pre_attention_query", 2)?,
                embedding_dim: dim("cond_enc.perceiver.attn.norm.weight", 0)?,
                num_attn_heads: 4,
            };
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// A configuration from JSON (the field names of the reference's `T3Config`, as
    /// [`T3Config`] derives them), checked with [`T3Config::validate`].
    pub fn from_json(json: &str) -> Result<Self> {
        let cfg: Self = serde_json::from_str(json)
            .map_err(|e| crate::T3Error::InvalidConfig(format!("T3 config JSON: {e}")))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// [`T3Config::from_tensor_shapes`] on the headers of safetensors files (nothing is read
    /// but the headers).
    pub fn from_safetensors<P: AsRef<Path>>(paths: &[P]) -> Result<Self> {
        // SAFETY: the files are memory-mapped read-only; only their headers are parsed here.
        let st = unsafe { candle_core::safetensors::MmapedSafetensors::multi(paths)? };
        let shapes = st
            .tensors()
            .into_iter()
            .map(|(k, v)| (k, v.shape().to_vec()))
            .collect();
        Self::from_tensor_shapes(&shapes)
    }
}
