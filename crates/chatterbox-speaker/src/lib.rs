#![doc = include_str!("../README.md")]

mod campplus;
mod error;
mod kernels;
mod voice_encoder;
mod weights;

pub use campplus::{CAMPPlus, CAMPPlusConfig};
pub use error::{Result, SpeakerError};
pub use voice_encoder::{
    frame_step, num_partials, partial_ranges, EmbedOptions, PartialEmbeds, VoiceEncConfig,
    VoiceEncoder,
};

/// This crate's CUDA kernel sources, for [`chatterbox_cuda::prepare`] to compile before their
/// first use.
#[cfg(feature = "cuda")]
pub fn cuda_kernels() -> Vec<&'static chatterbox_cuda::Ptx> {
    vec![&voice_encoder::cuda_lstm::PTX]
}
