#![doc = include_str!("../README.md")]

mod error;
pub mod flow;
mod linear;
pub mod tokenizer;

pub use error::{Result, S3GenError};
pub use flow::{CausalMaskedDiffWithXvec, FlowConfig, FlowOptions, FlowPrompt};
pub use tokenizer::{S3Tokenizer, SpeechTokens};
