//! The token ids a repetition penalty looks at, kept on the device as a `[1, vocab]` mask that
//! each step updates in place (a scatter at the device-side token id).
use crate::Result;
use candle_core::{DType, Device, Tensor};

/// Which token ids have been generated (transformers' `input_ids`, as a set).
#[derive(Debug, Clone)]
pub struct TokenHistory {
    mask: Tensor,
    one: Tensor,
}

impl TokenHistory {
    /// An empty history over `vocab` ids.
    pub fn new(vocab: usize, dev: &Device) -> Result<Self> {
        Ok(Self {
            // u32, not u8: candle's Metal backend has no kernel that scatters into u8.
            mask: Tensor::zeros((1, vocab), DType::U32, dev)?,
            one: Tensor::ones((1, 1), DType::U32, dev)?,
        })
    }

    /// A history holding `ids` (host ids, e.g. for tests).
    pub fn from_ids(ids: &[u32], vocab: usize, dev: &Device) -> Result<Self> {
        let h = Self::new(vocab, dev)?;
        for &id in ids {
            h.push(&Tensor::new(&[[id]], dev)?)?;
        }
        Ok(h)
    }

    /// Adds the id held in the device tensor `id` (u32 `[1, 1]`), in place.
    pub fn push(&self, id: &Tensor) -> Result<()> {
        self.mask.scatter_set(id, &self.one, 1)?;
        Ok(())
    }

    /// Forgets every id, in place.
    pub fn clear(&self) -> Result<()> {
        self.mask.zero_set()?;
        Ok(())
    }

    /// The `[1, vocab]` u32 mask (1 = seen).
    pub fn mask(&self) -> &Tensor {
        &self.mask
    }
}
