//! Port of `S3TokenizerV2` in s3tokenizer/model_v2.py: encoder + FSQ quantiser, with the
//! sliding-window path for inputs longer than 30 s (`_quantize_mixed_batch`).
use super::config::ModelConfig;
use super::encoder::{AudioEncoderV2, EncoderOutput};
use super::quantizer::FSQVectorQuantization;
use super::utils::merge_tokenized_segments;
use super::weights;
use crate::{Result, S3GenError};
use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;

/// Mel frames in one window of the long-audio path (30 s at 100 frames per second).
pub const MAX_FRAMES: usize = 3000;
/// Frames between window starts (26 s: windows overlap by 4 s).
const FRAMES_PER_STRIDE: usize = MAX_FRAMES - OVERLAP_SECS * 100;
/// Overlap of consecutive windows, in seconds.
const OVERLAP_SECS: usize = 4;
/// Tokens per second of the v2 models.
const TOKEN_RATE: usize = 25;

/// Speech tokens of a batch: codes `(batch, tokens)` (u32, `< 6561`) and each row's length.
/// Positions past a row's length are not tokens of that clip (the reference returns whatever
/// the padded frames encode to, or zeros on the long-audio path).
#[derive(Debug, Clone)]
pub struct SpeechTokens {
    /// `(batch, tokens)`, u32.
    pub tokens: Tensor,
    /// Valid tokens of each row.
    pub lens: Vec<usize>,
}

impl SpeechTokens {
    /// Each row's valid tokens, on the host.
    pub fn to_vecs(&self) -> Result<Vec<Vec<u32>>> {
        let rows = self.tokens.to_vec2::<u32>()?;
        Ok(rows
            .into_iter()
            .zip(&self.lens)
            .map(|(mut r, &l)| {
                r.truncate(l);
                r
            })
            .collect())
    }
}

/// Where a row of the encoded batch came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Row of the input batch.
    pub batch_idx: usize,
    /// Whether that input took the long-audio path (its segments are merged).
    pub is_long_audio: bool,
}

/// An encoded batch and how its rows map to the input: one row per input, or (when some input
/// is longer than 30 s) one row per 30 s window.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The encoder's output.
    pub output: EncoderOutput,
    /// `None`: row `i` is input `i`. `Some`: the windows of `_quantize_mixed_batch`, in order.
    pub segments: Option<Vec<Segment>>,
    /// Inputs in the batch.
    pub batch_size: usize,
}

/// The S3 speech tokenizer, v2 (25 Hz, 6561 FSQ codes).
///
/// <https://github.com/xingchensong/S3Tokenizer/blob/main/s3tokenizer/model_v2.py>
/// `S3TokenizerV2`
#[derive(Debug, Clone)]
pub struct S3TokenizerV2 {
    encoder: AudioEncoderV2,
    quantizer: FSQVectorQuantization,
    config: ModelConfig,
}

impl S3TokenizerV2 {
    /// Loads `encoder.*` and `quantizer.*` under `vb` (`tokenizer` in `s3gen.safetensors`).
    /// A checkpoint without them is [`S3GenError::MissingWeights`].
    pub fn new(cfg: &ModelConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        // the first tensor read, checked up front for a clear error on a checkpoint without
        // tokenizer weights
        weights::tensor(
            &vb.pp("encoder").pp("conv1"),
            "weight",
            &[cfg.n_audio_state, cfg.n_mels, 3],
        )?;
        Ok(Self {
            encoder: AudioEncoderV2::new(cfg, vb.pp("encoder"))?,
            quantizer: FSQVectorQuantization::new(cfg.n_audio_state, vb.pp("quantizer"))?,
            config: cfg.clone(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The encoder.
    pub fn encoder(&self) -> &AudioEncoderV2 {
        &self.encoder
    }

    /// The quantiser.
    pub fn quantizer(&self) -> &FSQVectorQuantization {
        &self.quantizer
    }

    /// `quantize(mel, mel_len)`: speech tokens of a padded mel batch `(batch, n_mels, frames)`
    /// whose row `i` has `mel_len[i]` valid frames.
    pub fn quantize(&self, mel: &Tensor, mel_len: &[usize]) -> Result<SpeechTokens> {
        let encoded = self.encode(mel, mel_len)?;
        self.tokens(&encoded)
    }

    /// The encoder part of [`quantize`](Self::quantize): inputs of at most 3000 frames (30 s)
    /// are encoded as one batch; if any is longer, every input is cut into 30 s windows
    /// starting every 26 s (shorter inputs form one window), each zero-padded to 3000 frames,
    /// and all windows are encoded as one batch.
    pub fn encode(&self, mel: &Tensor, mel_len: &[usize]) -> Result<Encoded> {
        let (b, _, t) = mel.dims3()?;
        if mel_len.len() != b || mel_len.iter().any(|&l| l > t) {
            return Err(S3GenError::InvalidInput {
                what: "mel lengths",
                reason: format!("{mel_len:?} for a batch of {b} x {t} frames"),
            });
        }
        if !mel_len.iter().any(|&l| l > MAX_FRAMES) {
            return Ok(Encoded {
                output: self.encoder.forward(mel, mel_len)?,
                segments: None,
                batch_size: b,
            });
        }
        let mut windows = Vec::new();
        let mut lens = Vec::new();
        let mut segments = Vec::new();
        for (batch_idx, &len) in mel_len.iter().enumerate() {
            let row = mel.get(batch_idx)?;
            let is_long_audio = len > MAX_FRAMES;
            let mut start = 0;
            loop {
                let end = if is_long_audio {
                    (start + MAX_FRAMES).min(len)
                } else {
                    len
                };
                let seg = row.narrow(1, start, end - start)?.pad_with_zeros(
                    1,
                    0,
                    MAX_FRAMES - (end - start),
                )?;
                windows.push(seg);
                lens.push(end - start);
                segments.push(Segment {
                    batch_idx,
                    is_long_audio,
                });
                start += FRAMES_PER_STRIDE;
                if !is_long_audio || start >= len {
                    break;
                }
            }
        }
        let batch = Tensor::stack(&windows, 0)?;
        Ok(Encoded {
            output: self.encoder.forward(&batch, &lens)?,
            segments: Some(segments),
            batch_size: b,
        })
    }

    /// The quantiser part of [`quantize`](Self::quantize), with the long-audio merge: codes of
    /// consecutive windows are joined dropping 2 s of tokens on each side of every overlap, and
    /// rows are zero-padded to the longest.
    pub fn tokens(&self, encoded: &Encoded) -> Result<SpeechTokens> {
        let codes = self.quantizer.encode(&encoded.output.hidden)?;
        let Some(segments) = &encoded.segments else {
            return Ok(SpeechTokens {
                tokens: codes,
                lens: encoded.output.lens.clone(),
            });
        };
        let rows = codes.to_vec2::<u32>()?;
        let mut per_input: Vec<(bool, Vec<Vec<u32>>)> =
            vec![(false, Vec::new()); encoded.batch_size];
        for ((seg, mut row), &len) in segments.iter().zip(rows).zip(&encoded.output.lens) {
            row.truncate(len);
            let input = &mut per_input[seg.batch_idx];
            input.0 = seg.is_long_audio;
            input.1.push(row);
        }
        let merged: Vec<Vec<u32>> = per_input
            .into_iter()
            .map(|(is_long_audio, mut segs)| {
                if is_long_audio {
                    merge_tokenized_segments(&segs, OVERLAP_SECS, TOKEN_RATE)
                } else {
                    segs.pop().unwrap_or_default()
                }
            })
            .collect();
        tokens_tensor(&merged, codes.device())
    }
}

/// Zero-padded `(batch, longest)` u32 tensor of `rows`, with their lengths.
fn tokens_tensor(rows: &[Vec<u32>], device: &Device) -> Result<SpeechTokens> {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut data = vec![0u32; rows.len() * width];
    for (out, r) in data.chunks_exact_mut(width.max(1)).zip(rows) {
        out[..r.len()].copy_from_slice(r);
    }
    let tokens = Tensor::from_vec(data, (rows.len(), width), device)?;
    Ok(SpeechTokens {
        tokens,
        lens: rows.iter().map(Vec::len).collect(),
    })
}
