//! The feature extractors the Chatterbox models consume, one per reference function.
mod kaldi_fbank;
mod s3gen_mel;
mod s3tokenizer_mel;
mod voice_encoder_mel;

pub use kaldi_fbank::{FbankOptions, FbankWindow, KaldiFbank};
pub use s3gen_mel::{S3GenMel, S3GenMelConfig};
pub use s3tokenizer_mel::S3TokenizerMel;
pub use voice_encoder_mel::{VoiceEncoderMel, VoiceEncoderMelConfig};
