#![doc = include_str!("../README.md")]

mod backbone;
mod cond_enc;
mod config;
mod decode;
mod error;
mod generate;
mod learned_pos_emb;
pub mod sampling;
mod t3;

pub use backbone::{
    llama3_inv_freq, Backbone, GPT2Model, KvCache, Linear, LlamaModel, RotaryTables, StepIndex,
};
pub use cond_enc::{Perceiver, T3Cond, T3CondEnc};
pub use config::{BackboneConfig, GPT2Config, LlamaConfig, PerceiverConfig, RopeScaling, T3Config};
pub use decode::{AttentionSpan, DecodeStep};
pub use error::{Result, T3Error};
pub use generate::{GenerateOptions, TokenStream, TurboOptions};
pub use learned_pos_emb::LearnedPositionEmbeddings;
pub use sampling::Sampling;
pub use t3::T3;
