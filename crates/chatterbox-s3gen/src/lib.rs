#![doc = include_str!("../README.md")]

mod checkpoint;
mod error;
pub mod flow;
mod linear;
pub mod reference;
pub mod tokenizer;

pub use error::{Result, S3GenError};
pub use flow::{CausalMaskedDiffWithXvec, FlowConfig, FlowOptions, FlowPrompt};
pub use reference::{RefEncoder, RefEncoderConfig, DEC_COND_LEN, S3GEN_SR};
pub use tokenizer::{S3Tokenizer, SpeechTokens};

/// This crate's CUDA kernel sources, for [`chatterbox_cuda::prepare`] to compile before their
/// first use.
#[cfg(feature = "cuda")]
pub fn cuda_kernels() -> Vec<&'static chatterbox_cuda::Ptx> {
    let mut v = vec![&tokenizer::cuda_fsmn::PTX, &flow::cuda_attention::PTX];
    v.extend(flow::cuda_ops::PTX);
    v
}
