//! The transformer behind T3: transformers' `LlamaModel` (English, multilingual) or
//! `GPT2Model` (Turbo, Nano), both driven by input embeddings and a preallocated KV cache.
mod attention;
mod cpu_attention;
#[cfg(feature = "cuda")]
pub(crate) mod cuda_decode;
#[cfg(feature = "cuda")]
pub(crate) mod cuda_gemv;
#[cfg(feature = "cuda")]
pub(crate) mod cuda_prefill;
mod exp8;
mod gelu;
mod gemv;
mod gpt2;
mod kv_cache;
mod linear;
mod llama;
mod projections;
mod quantize;
mod quantized;
mod rope;
mod silu_mul;

pub use attention::StepIndex;
pub use gpt2::GPT2Model;
pub use kv_cache::KvCache;
pub(crate) use linear::weight;
pub use linear::Linear;
pub use llama::LlamaModel;
pub(crate) use projections::{NamedProjection, Preloaded};
pub use quantize::QuantizeReport;
pub(crate) use quantized::QuantizedWeight;
pub use rope::{llama3_inv_freq, RotaryTables};

use crate::config::BackboneConfig;
use crate::Result;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

/// A T3 backbone (`T3.tfmr`).
#[derive(Debug, Clone)]
pub enum Backbone {
    /// Llama (English, multilingual).
    Llama(LlamaModel),
    /// GPT-2 (Turbo, Nano).
    Gpt2(GPT2Model),
}

impl Backbone {
    /// Loads `tfmr.*` (pass `vb.pp("tfmr")`). `positions` sizes the Llama RoPE tables; GPT-2
    /// is bounded by its `wpe`.
    pub fn new(cfg: &BackboneConfig, positions: usize, vb: VarBuilder) -> Result<Self> {
        Self::build(cfg, positions, vb, &Preloaded::default())
    }

    /// [`Backbone::new`] taking the projections `pre` holds (a quantized checkpoint's) instead
    /// of their tensors.
    pub(crate) fn build(
        cfg: &BackboneConfig,
        positions: usize,
        vb: VarBuilder,
        pre: &Preloaded,
    ) -> Result<Self> {
        Ok(match cfg {
            BackboneConfig::Llama(c) => Self::Llama(LlamaModel::build(c, positions, vb, pre)?),
            BackboneConfig::Gpt2(c) => Self::Gpt2(GPT2Model::build(c, vb, pre)?),
        })
    }

    /// Every projection with its name and checkpoint tensors, under `prefix` (the backbone's
    /// in the checkpoint, `tfmr`).
    pub(crate) fn named_projections(&self, prefix: &str) -> Vec<NamedProjection<'_>> {
        match self {
            Self::Llama(m) => m.named_projections(prefix),
            Self::Gpt2(m) => m.named_projections(prefix),
        }
    }

    /// Whether decode steps may run as fused CUDA kernels where they apply (on by default:
    /// bf16 steps on CUDA; a batched step of more than two rows fuses only its attention).
    /// Off, steps run candle's ops, which round at the same places (GPT-2's GELU aside:
    /// computed in f32, rounded once).
    pub fn set_fused_decode(&mut self, on: bool) {
        match self {
            Self::Llama(m) => m.set_fused_decode(on),
            Self::Gpt2(m) => m.set_fused_decode(on),
        }
    }

    /// Sequence positions the backbone supports.
    pub fn max_positions(&self) -> usize {
        match self {
            Self::Llama(m) => m.max_positions(),
            Self::Gpt2(m) => m.max_positions(),
        }
    }

    /// `(layers, heads, head_dim)` of the KV caches.
    pub fn cache_shape(&self) -> (usize, usize, usize) {
        match self {
            Self::Llama(m) => {
                let c = m.config();
                (c.num_hidden_layers, c.num_attention_heads, c.head_dim)
            }
            Self::Gpt2(m) => {
                let c = m.config();
                (c.n_layer, c.n_head, c.n_embd / c.n_head)
            }
        }
    }

    /// One zeroed cache per layer, for `batch` rows and `capacity` positions.
    pub fn new_caches(
        &self,
        batch: usize,
        capacity: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<Vec<KvCache>> {
        let (layers, heads, head_dim) = self.cache_shape();
        (0..layers)
            .map(|_| KvCache::new(batch, heads, capacity, head_dim, dtype, dev))
            .collect()
    }

    /// Prefill at the caches' next positions (eager; from 0 when they are empty); returns the
    /// final-norm hidden states `[B, T, C]`. `B` may be 1 for a prefix every row shares.
    pub fn prefill(
        &self,
        embeds: &Tensor,
        caches: &mut [KvCache],
        hidden: Option<&mut Vec<Tensor>>,
    ) -> Result<Tensor> {
        match self {
            Self::Llama(m) => m.prefill(embeds, caches, hidden),
            Self::Gpt2(m) => m.prefill(embeds, caches, hidden),
        }
    }

    /// One decode step `[B, 1, C]` -> `[B, 1, C]` (capturable).
    pub fn decode(
        &self,
        embed: &Tensor,
        step: &StepIndex,
        caches: &mut [KvCache],
    ) -> Result<Tensor> {
        match self {
            Self::Llama(m) => m.decode(embed, step, caches),
            Self::Gpt2(m) => m.decode(embed, step, caches),
        }
    }
}
