//! The token-to-mel flow: port of chatterbox/models/s3gen/flow.py, flow_matching.py,
//! decoder.py, transformer/ and matcha/ (upstream 5de7a54).
//!
//! ```text
//! CausalMaskedDiffWithXvec            masked_diff.rs (one request), rows.rs (several, padded)
//! ├── input_embedding, spk_embed_affine_layer, encoder_proj
//! ├── UpsampleConformerEncoder        encoder/ (embedding, attention, layer, resample)
//! └── CausalConditionalCFM            cfm.rs (schedule, Euler, guidance)
//!     └── ConditionalDecoder          decoder/ (time, blocks, transformer)
//! ```
//!
//! Random draws are inputs: the solver's initial noise (and meanflow's `noised_mels`) are
//! arguments. The solver state stays f32 whatever dtype the estimator runs in.

mod cfm;
mod config;
#[cfg(feature = "cuda")]
pub(crate) mod cuda_attention;
#[cfg(feature = "cuda")]
pub(crate) mod cuda_ops;
mod decoder;
mod encoder;
mod estimator_calls;
mod estimator_graphs;
pub(crate) mod kernels;
mod mask;
mod masked_diff;
mod nn;
pub(crate) mod ops;
mod rel_attention_cpu;
mod rows;

pub use cfm::{t_span, CausalConditionalCFM};
pub use config::{CfmConfig, DecoderConfig, EncoderConfig, FlowConfig, FlowOptions, TimeScheduler};
pub use decoder::ConditionalDecoder;
pub use encoder::UpsampleConformerEncoder;
pub use estimator_calls::MIN_GRAPH_STEPS;
pub use estimator_graphs::KEPT_GRAPHS;
pub use masked_diff::{CausalMaskedDiffWithXvec, FlowConditioning, FlowPrompt};
pub use rows::FlowRow;
