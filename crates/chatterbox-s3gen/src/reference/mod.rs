//! The reference voice S3Gen conditions its flow on: port of `S3Token2Mel.embed_ref` in
//! chatterbox/models/s3gen/s3gen.py (upstream 5de7a54), built from the parts it uses only (the
//! speech tokenizer, CAMPPlus and the 24 kHz mel), so computing a voice's conditioning needs
//! neither the flow nor the vocoder weights.
//!
//! ```text
//! RefEncoder            encoder.rs   wav -> FlowPrompt (prompt_token, prompt_feat, embedding)
//! ├── S3GenMel          chatterbox-dsp      24 kHz log mel        -> prompt_feat
//! ├── SincResampler     chatterbox-dsp      torchaudio's resampler -> 16 kHz copy
//! ├── CAMPPlus          chatterbox-speaker  x-vector              -> embedding
//! └── S3Tokenizer       tokenizer/          speech tokens         -> prompt_token
//! RefEncoderConfig      config.rs
//! ```
mod config;
mod encoder;

pub use config::RefEncoderConfig;
pub use encoder::{RefEncoder, DEC_COND_LEN, S3GEN_SR};
