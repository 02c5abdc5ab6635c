//! CAMPPlus (chatterbox/models/s3gen/xvector.py, upstream 5de7a54): the x-vector network S3Gen
//! conditions its flow on.
mod batch_norm;
mod config;
mod cpu;
mod dense_block;
mod fcm;
mod layers;
mod model;

pub use config::CAMPPlusConfig;
pub use model::CAMPPlus;
