//! The S3 speech tokenizer (S3TokenizerV2, 25 Hz): 16 kHz audio to the 6561 speech tokens that
//! prompt T3 and S3Gen. Port of chatterbox/models/s3tokenizer/s3tokenizer.py (upstream 5de7a54)
//! over s3tokenizer/model_v2.py and utils.py (PyPI s3tokenizer 0.3.0).
//!
//! ```text
//! S3Tokenizer                 s3tokenizer.rs   wav -> log mel (chatterbox-dsp) -> padded batch
//! └── S3TokenizerV2           model.rs         quantize; > 30 s: 30 s windows, merged
//!     ├── AudioEncoderV2      encoder.rs       conv k3 s2 + GELU, x2 (100 Hz -> 25 Hz)
//!     │   ├── Conv1dGelu      conv.rs          (gelu.rs: torch's CPU erf formula)
//!     │   └── ResidualAttentionBlock  block.rs LayerNorm, attention, LayerNorm, GELU MLP
//!     │       └── FSMNMultiHeadAttention  attention.rs  rotary (rotary.rs) + FSMN memory (fsmn.rs)
//!     └── FSQVectorQuantization  quantizer.rs  Linear(d, 8), tanh, 3 levels -> 3^8 codes
//! ```
mod attention;
mod block;
mod config;
mod conv;
#[cfg(feature = "cuda")]
pub(crate) mod cuda_fsmn;
mod encoder;
mod fsmn;
mod gelu;
mod model;
mod quantizer;
mod rotary;
mod s3tokenizer;
mod utils;
mod weights;

pub use attention::{AttentionMask, FSMNMultiHeadAttention, FSMN_KERNEL};
pub use block::ResidualAttentionBlock;
pub use config::{ModelConfig, HEAD_DIM};
pub use conv::Conv1dGelu;
pub use encoder::{conv_out_len, AudioEncoderV2, EncoderOutput};
pub use fsmn::DepthwiseMemory;
pub use model::{Encoded, S3TokenizerV2, Segment, SpeechTokens, MAX_FRAMES};
pub use quantizer::{FSQVectorQuantization, CODEBOOK_SIZE, FSQ_DIM, FSQ_LEVEL};
pub use rotary::{RotaryEmbedding, ROTARY_POSITIONS};
pub use s3tokenizer::{S3Tokenizer, S3_HOP, S3_SR, S3_TOKEN_HOP, S3_TOKEN_RATE, SPEECH_VOCAB_SIZE};
pub use utils::{make_non_pad_mask, mask_to_bias, merge_tokenized_segments};
