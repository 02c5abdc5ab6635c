#![doc = include_str!("../README.md")]

mod alignment;
mod backbone;
mod batch;
mod cond_enc;
mod config;
mod decode;
mod error;
mod generate;
mod gguf_guard;
mod graph;
mod learned_pos_emb;
mod quantized_checkpoint;
pub mod sampling;
mod t3;
mod weight_format;

pub use alignment::{
    AlignmentAnalysisResult, AlignmentAnalyzerConfig, AlignmentStreamAnalyzer, LLAMA_ALIGNED_HEADS,
};
pub use backbone::{
    llama3_inv_freq, Backbone, GPT2Model, KvCache, Linear, LlamaModel, QuantizeReport,
    RotaryTables, StepIndex,
};
pub use batch::{BatchDecoder, BatchEvent, BatchOptions, RequestId};
pub use cond_enc::{Perceiver, T3Cond, T3CondEnc};
pub use config::{BackboneConfig, GPT2Config, LlamaConfig, PerceiverConfig, RopeScaling, T3Config};
pub use decode::{AttentionSpan, DecodeStep};
pub use error::{Result, T3Error};
pub use generate::{GenerateOptions, TokenStream, TurboOptions, DEFAULT_GRAPH_BUCKET};
pub use learned_pos_emb::LearnedPositionEmbeddings;
pub use quantized_checkpoint::is_quantized_file;
pub use sampling::Sampling;
pub use t3::T3;
pub use weight_format::WeightFormat;

/// This crate's CUDA kernel sources, for [`chatterbox_cuda::prepare`] to compile before their
/// first use.
#[cfg(feature = "cuda")]
pub fn cuda_kernels() -> Vec<&'static chatterbox_cuda::Ptx> {
    vec![
        &backbone::cuda_decode::PTX,
        &backbone::cuda_gemv::PTX,
        &backbone::cuda_prefill::PTX,
        &sampling::cuda_top_k_top_p::PTX,
        &sampling::cuda_probs_filter::PTX,
    ]
}
