//! The reference voice as S3Gen uses it: `S3Token2Mel.embed_ref`'s `ref_dict` (upstream 5de7a54).
use crate::{PipelineError, Result};
use candle_core::{DType, Device, Tensor};
use chatterbox_s3gen::FlowPrompt;

/// `ref_dict`: the prompt tokens, prompt mel and speaker x-vector of a reference clip
/// (`prompt_token_len` is `prompt_token`'s length; `prompt_feat_len` is always `None` in the
/// reference).
#[derive(Debug, Clone)]
pub struct S3GenRef {
    /// `prompt_token`: S3 speech tokens of the (16 kHz) reference, `(1, n)` u32.
    pub prompt_token: Tensor,
    /// `prompt_feat`: 24 kHz log mel of the reference, `(1, 2 n, 80)` f32.
    pub prompt_feat: Tensor,
    /// `embedding`: CAMPPlus x-vector, `(1, 192)` f32.
    pub embedding: Tensor,
}

impl S3GenRef {
    /// Checks shapes and makes the three tensors contiguous on `device` (tokens u32, the rest
    /// f32).
    pub fn new(
        prompt_token: Tensor,
        prompt_feat: Tensor,
        embedding: Tensor,
        device: &Device,
    ) -> Result<Self> {
        let prompt_token = match prompt_token.rank() {
            1 => prompt_token.unsqueeze(0)?,
            _ => prompt_token,
        };
        let prompt_feat = match prompt_feat.rank() {
            2 => prompt_feat.unsqueeze(0)?,
            _ => prompt_feat,
        };
        let embedding = match embedding.rank() {
            1 => embedding.unsqueeze(0)?,
            _ => embedding,
        };
        let (b, n) = prompt_token
            .dims2()
            .map_err(|_| bad("prompt_token", &prompt_token))?;
        let (bf, frames, bins) = prompt_feat
            .dims3()
            .map_err(|_| bad("prompt_feat", &prompt_feat))?;
        let (be, _) = embedding
            .dims2()
            .map_err(|_| bad("embedding", &embedding))?;
        if b != 1 || bf != 1 || be != 1 || n == 0 || frames == 0 || bins == 0 {
            return Err(PipelineError::InvalidInput {
                what: "S3Gen reference",
                reason: format!(
                    "expected one voice: prompt_token (1, n > 0), prompt_feat (1, frames, bins), \
                     embedding (1, d); got {:?}, {:?}, {:?}",
                    prompt_token.dims(),
                    prompt_feat.dims(),
                    embedding.dims()
                ),
            });
        }
        // Integer tokens travel as i64 in torch files; the flow wants u32.
        let prompt_token = match prompt_token.dtype() {
            DType::U32 => prompt_token,
            DType::I64 | DType::U8 => prompt_token.to_dtype(DType::U32)?,
            other => {
                return Err(PipelineError::InvalidInput {
                    what: "S3Gen reference",
                    reason: format!("prompt_token has dtype {other:?}, expected an integer type"),
                })
            }
        };
        Ok(Self {
            prompt_token: prompt_token.to_device(device)?.contiguous()?,
            prompt_feat: prompt_feat
                .to_dtype(DType::F32)?
                .to_device(device)?
                .contiguous()?,
            embedding: embedding
                .to_dtype(DType::F32)?
                .to_device(device)?
                .contiguous()?,
        })
    }

    /// Number of prompt tokens.
    pub fn n_prompt_tokens(&self) -> usize {
        self.prompt_token.dim(1).unwrap_or(0)
    }

    /// The flow's view of it.
    pub fn flow_prompt(&self) -> FlowPrompt {
        FlowPrompt {
            prompt_token: self.prompt_token.clone(),
            prompt_feat: self.prompt_feat.clone(),
            embedding: self.embedding.clone(),
        }
    }
}

fn bad(what: &str, t: &Tensor) -> PipelineError {
    PipelineError::InvalidInput {
        what: "S3Gen reference",
        reason: format!("{what} has shape {:?}", t.dims()),
    }
}
