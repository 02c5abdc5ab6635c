//! Chatterbox's S3Gen on candle: the S3 speech tokenizer ([`tokenizer`]) that turns 16 kHz audio
//! into 25 Hz speech tokens, and the flow ([`flow`]) that turns speech tokens plus a reference
//! prompt into an 80-bin 24 kHz mel spectrogram.

mod error;
pub mod flow;
pub mod tokenizer;

pub use error::{Result, S3GenError};
