//! The VoiceEncoder (chatterbox/models/voice_encoder/, upstream 5de7a54): utterance and
//! speaker embeddings for T3's conditioning.
mod config;
#[cfg(feature = "cuda")]
pub(crate) mod cuda_lstm;
mod lstm;
mod model;
mod partials;

pub use config::VoiceEncConfig;
pub use model::VoiceEncoder;
pub use partials::{frame_step, num_partials, partial_ranges, EmbedOptions, PartialEmbeds};
