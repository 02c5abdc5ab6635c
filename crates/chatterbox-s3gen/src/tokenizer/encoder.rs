//! Port of `AudioEncoderV2` in s3tokenizer/model_v2.py: two stride-2 convolutions (GELU) take
//! the 100 Hz mel to 25 Hz, then the FSMN transformer blocks.
use super::attention::AttentionMask;
use super::block::ResidualAttentionBlock;
use super::config::{ModelConfig, HEAD_DIM};
use super::conv::Conv1dGelu;
use super::rotary::{RotaryEmbedding, ROTARY_POSITIONS};
use super::utils::{make_non_pad_mask, mask_to_bias};
use crate::{Result, S3GenError};
use candle_core::Tensor;
use candle_nn::VarBuilder;

/// Stride of each of the two convolutions.
const STRIDE: usize = 2;

/// Frames after a `kernel 3, padding 1` convolution of `stride`: `(n + 2 - 2 - 1) // s + 1`,
/// with Python's floor division (0 stays 0).
pub fn conv_out_len(n: usize, stride: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n - 1) / stride + 1
    }
}

/// The encoder's output for a batch: hidden states `(batch, frames, n_state)` (the quantiser's
/// input) and the valid frames of each row.
#[derive(Debug, Clone)]
pub struct EncoderOutput {
    /// `(batch, frames, n_state)`.
    pub hidden: Tensor,
    /// Valid frames of each row.
    pub lens: Vec<usize>,
}

/// The v2 audio encoder.
///
/// <https://github.com/xingchensong/S3Tokenizer/blob/main/s3tokenizer/model_v2.py>
/// `AudioEncoderV2`
#[derive(Debug, Clone)]
pub struct AudioEncoderV2 {
    conv1: Conv1dGelu,
    conv2: Conv1dGelu,
    blocks: Vec<ResidualAttentionBlock>,
    rotary: RotaryEmbedding,
}

impl AudioEncoderV2 {
    /// Loads `conv1`, `conv2` and `blocks.{i}` under `vb` and builds the rotary table (not a
    /// checkpoint tensor in the reference either).
    pub fn new(cfg: &ModelConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        let d = cfg.n_audio_state;
        let conv1 = Conv1dGelu::new(cfg.n_mels, d, STRIDE, vb.pp("conv1"))?;
        let conv2 = Conv1dGelu::new(d, d, 2, vb.pp("conv2"))?;
        let mut blocks = Vec::with_capacity(cfg.n_audio_layer);
        for i in 0..cfg.n_audio_layer {
            blocks.push(ResidualAttentionBlock::new(
                d,
                cfg.n_audio_head,
                vb.pp("blocks").pp(i),
            )?);
        }
        let rotary = RotaryEmbedding::new(HEAD_DIM, ROTARY_POSITIONS, vb.dtype(), vb.device())?;
        Ok(Self {
            conv1,
            conv2,
            blocks,
            rotary,
        })
    }

    /// Encodes a padded mel batch `x` of shape `(batch, n_mels, frames)` whose row `i` has
    /// `x_len[i]` valid frames; 4 mel frames become one output frame.
    pub fn forward(&self, x: &Tensor, x_len: &[usize]) -> Result<EncoderOutput> {
        let (b, _, t) = x.dims3()?;
        if x_len.len() != b || x_len.iter().any(|&l| l > t) {
            return Err(S3GenError::InvalidInput {
                what: "mel lengths",
                reason: format!("{x_len:?} for a batch of {b} x {t} frames"),
            });
        }
        let t2 = conv_out_len(conv_out_len(t, STRIDE), 2);
        if t2 > self.rotary.len() {
            return Err(S3GenError::InvalidInput {
                what: "mel",
                reason: format!(
                    "{t} frames give {t2} encoder frames, more than the {} rotary positions \
                     (S3TokenizerV2::quantize splits long inputs)",
                    self.rotary.len()
                ),
            });
        }
        let dev = x.device();
        let dtype = x.dtype();
        // With no padding in the batch every mask is all ones (and the bias all zeros): skip them.
        let padded = x_len.iter().any(|&l| l != t);

        // time-major from here on: (b, t, n_mels)
        let x = x.transpose(1, 2)?;
        let x = if padded {
            x.broadcast_mul(
                &make_non_pad_mask(x_len, t, dev)?
                    .to_dtype(dtype)?
                    .unsqueeze(2)?,
            )?
        } else {
            x
        };
        let x = self.conv1.forward(&x)?;
        let len1: Vec<usize> = x_len.iter().map(|&l| conv_out_len(l, STRIDE)).collect();
        let t1 = conv_out_len(t, STRIDE);
        let x = if padded {
            x.broadcast_mul(
                &make_non_pad_mask(&len1, t1, dev)?
                    .to_dtype(dtype)?
                    .unsqueeze(2)?,
            )?
        } else {
            x
        };
        let mut x = self.conv2.forward(&x)?; // (b, t2, n_state)
        let lens: Vec<usize> = len1.iter().map(|&l| conv_out_len(l, 2)).collect();

        let mask = if padded {
            let m = make_non_pad_mask(&lens, t2, dev)?.to_dtype(dtype)?; // (b, t2)
            Some(AttentionMask {
                bias: mask_to_bias(&m)?.reshape((b, 1, 1, t2))?,
                pad: m.unsqueeze(2)?,
            })
        } else {
            None
        };
        for block in &self.blocks {
            x = block.forward(&x, mask.as_ref(), &self.rotary)?;
        }
        Ok(EncoderOutput { hidden: x, lens })
    }
}
