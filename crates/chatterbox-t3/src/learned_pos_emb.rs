//! Port of chatterbox/models/t3/modules/learned_pos_emb.py (upstream 5de7a54).
use crate::backbone::weight;
use crate::{Result, T3Error};
use candle_core::Tensor;
use candle_nn::VarBuilder;

/// `LearnedPositionEmbeddings`: a `[seq_len, dim]` table (`emb.weight`).
#[derive(Debug, Clone)]
pub struct LearnedPositionEmbeddings {
    emb: Tensor,
}

impl LearnedPositionEmbeddings {
    /// Loads `emb.weight` `[seq_len, model_dim]` under `vb`.
    pub fn new(seq_len: usize, model_dim: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            emb: weight(&vb.pp("emb"), &[seq_len, model_dim], "weight")?,
        })
    }

    /// Rows in the table.
    pub fn seq_len(&self) -> usize {
        self.emb.dims()[0]
    }

    /// `forward(x)`: the embeddings of positions `0..len`, `[len, dim]`.
    pub fn forward(&self, len: usize, what: &'static str) -> Result<Tensor> {
        if len > self.seq_len() {
            return Err(T3Error::SequenceTooLong {
                what,
                len,
                max: self.seq_len(),
            });
        }
        Ok(self.emb.narrow(0, 0, len)?)
    }

    /// `get_fixed_embedding(idx)` for device-side indices (u32 `[n]`): `[n, dim]`.
    pub fn get_fixed_embedding(&self, idx: &Tensor) -> Result<Tensor> {
        Ok(self.emb.index_select(idx, 0)?)
    }
}
