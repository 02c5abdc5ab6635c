#![doc = include_str!("../README.md")]

mod audio_processor;
mod config;
mod decoder;
mod encoder;
mod error;
mod layers;
mod loading;
mod perth_net;
mod polyphase;
mod watermarker;

pub use audio_processor::{AudioProcessor, MagPhase};
pub use config::PerthConfig;
pub use decoder::Decoder;
pub use encoder::Encoder;
pub use error::{Result, WatermarkError};
pub use layers::{magmask, Conv};
pub use loading::{
    load_state_dict, PERTH_CHECKPOINT_FILE, PERTH_CHECKPOINT_IN_WHEEL, PERTH_CHECKPOINT_SHA256,
    PERTH_WHEEL_SHA256, PERTH_WHEEL_URL,
};
pub use perth_net::PerthNet;
pub use polyphase::PolyphaseResampler;
pub use watermarker::{Detection, PerthWatermarker, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE};
