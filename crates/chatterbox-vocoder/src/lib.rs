#![doc = include_str!("../README.md")]

mod config;
mod conv;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
mod cuda_conv;
#[cfg(feature = "cuda")]
mod cuda_glue;
mod error;
mod f0_predictor;
mod generator;
mod resblock;
mod snake;
mod source;
#[cfg(any(test, feature = "cuda"))]
mod split_precision;
mod stft;
mod trim_fade;
#[cfg(any(test, feature = "cuda"))]
mod weight_fragments;
mod weights;

pub use config::{F0PredictorConfig, HiFTConfig, IstftParams};
pub use error::{Result, VocoderError};
pub use f0_predictor::ConvRNNF0Predictor;
pub use generator::HiFTGenerator;
pub use resblock::ResBlock;
pub use snake::Snake;
pub use source::{SineDraws, SineGen, SourceModuleHnNSF};
pub use trim_fade::TrimFade;

/// This crate's CUDA kernel sources, for [`chatterbox_cuda::prepare`] to compile before their
/// first use (the wgmma convolution on Hopper only).
#[cfg(feature = "cuda")]
pub fn cuda_kernels() -> Vec<&'static chatterbox_cuda::Ptx> {
    vec![
        &source::cuda_sine::PTX,
        &cuda::PTX,
        &cuda_glue::PTX,
        &cuda_conv::PTX_MMA,
        &cuda_conv::PTX_WGMMA,
    ]
}
