//! Port of `precompute_freqs_cis` / `apply_rotary_emb` in s3tokenizer/model_v2.py: rotary
//! position embedding, "rotate half" layout, theta 1e4, over one 64-wide head.
use crate::Result;
use candle_core::{DType, Device, Tensor};

/// Positions in the reference's table (`precompute_freqs_cis(64, 1024 * 2)`).
pub const ROTARY_POSITIONS: usize = 2048;
const THETA: f64 = 10_000.0;

/// The cosine and sine tables of `precompute_freqs_cis(dim, end)`, each `(end, dim / 2)`.
///
/// The reference keeps a complex table duplicated to `dim` columns (`cat((f, f), -1)`); the
/// rotation only needs its first half. Angles are the f32 products `t * freq` as `torch.outer`
/// computes them, with `freq = 1 / theta^(2i / dim)` evaluated step by step in f32 like torch.
#[derive(Debug, Clone)]
pub struct RotaryEmbedding {
    cos: Tensor,
    sin: Tensor,
}

impl RotaryEmbedding {
    /// The table for `end` positions of `dim`-wide heads, in `dtype` on `device`.
    pub fn new(dim: usize, end: usize, dtype: DType, device: &Device) -> Result<Self> {
        let half = dim / 2;
        let freqs: Vec<f32> = (0..half)
            .map(|i| {
                // f32 exponent, f32 power (glibc powf is correctly rounded here), f32 division
                let exponent = (2 * i) as f32 / dim as f32;
                let power = THETA.powf(exponent as f64) as f32;
                1.0 / power
            })
            .collect();
        let mut cos = Vec::with_capacity(end * half);
        let mut sin = Vec::with_capacity(end * half);
        for t in 0..end {
            for &f in &freqs {
                let angle = (t as f32 * f) as f64;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let cos = Tensor::from_vec(cos, (end, half), device)?.to_dtype(dtype)?;
        let sin = Tensor::from_vec(sin, (end, half), device)?.to_dtype(dtype)?;
        Ok(Self { cos, sin })
    }

    /// Positions in the table.
    pub fn len(&self) -> usize {
        self.cos.dims().first().copied().unwrap_or(0)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(cos, sin)` of the first `t` positions, each `(t, dim / 2)`.
    pub fn tables(&self, t: usize) -> Result<(Tensor, Tensor)> {
        Ok((self.cos.narrow(0, 0, t)?, self.sin.narrow(0, 0, t)?))
    }

    /// `apply_rotary_emb` on `x` laid out `(batch, time, heads, head_dim)` (contiguous), for
    /// positions `0..time`: `x * cos + rotate_half(x) * sin`.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let (_, t, _, _) = x.dims4()?;
        let (cos, sin) = self.tables(t)?;
        Ok(candle_nn::rotary_emb::rope_thd(x, &cos, &sin)?)
    }
}
