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
