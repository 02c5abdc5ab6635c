//! The encoder's input layer and relative positional encoding. Port of
//! chatterbox/models/s3gen/transformer/subsampling.py `LinearNoSubsampling` and
//! transformer/embedding.py `EspnetRelPositionalEncoding` (upstream 5de7a54).

use super::super::nn::{layer_norm, Linear};
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{LayerNorm, VarBuilder};

/// `EspnetRelPositionalEncoding.position_encoding` for `size` frames: `(1, 2 size - 1, d_model)`,
/// row `r` holding relative position `size - 1 - r` (keys to the left first).
///
/// Computed in f32 the way the reference fills its table (`div_term = exp(2i * -(ln 1e4 / d))`,
/// `sin/cos(position * div_term)`); the table does not depend on its `max_len`, so it is built for
/// exactly the positions needed.
pub(crate) fn espnet_rel_pos_emb(
    size: usize,
    d_model: usize,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    let scale = (-(10000f64.ln() / d_model as f64)) as f32;
    let div: Vec<f32> = (0..d_model / 2)
        .map(|i| ((2 * i) as f32 * scale).exp())
        .collect();
    let rows = 2 * size - 1;
    let mut pe = vec![0f32; rows * d_model];
    for (r, row) in pe.chunks_exact_mut(d_model).enumerate() {
        // positive part flipped (size-1 .. 0), then the negative part (-1 .. -(size-1))
        let (p, sign) = if r < size {
            ((size - 1 - r) as f32, 1.0f32)
        } else {
            ((r + 1 - size) as f32, -1.0f32)
        };
        for (i, &d) in div.iter().enumerate() {
            let a = p * d;
            row[2 * i] = sign * a.sin();
            row[2 * i + 1] = a.cos();
        }
    }
    Tensor::from_vec(pe, (1, rows, d_model), device)?.to_dtype(dtype)
}

/// `LinearNoSubsampling` with `EspnetRelPositionalEncoding`: Linear, LayerNorm (eps 1e-5), then
/// `x * sqrt(d_model)` and the relative position table (dropout is inactive at inference).
#[derive(Debug, Clone)]
pub(crate) struct LinearNoSubsampling {
    linear: Linear,
    norm: LayerNorm,
    xscale: f64,
    d_model: usize,
}

impl LinearNoSubsampling {
    pub(crate) fn new(idim: usize, odim: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            linear: Linear::new(idim, odim, true, vb.pp("out.0"))?,
            norm: layer_norm(odim, 1e-5, vb.pp("out.1"))?,
            xscale: (odim as f64).sqrt(),
            d_model: odim,
        })
    }

    /// `(batch, T, idim)` -> the scaled input `(batch, T, odim)` and `pos_emb (1, 2T - 1, odim)`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let x = self.norm.forward(&self.linear.forward(x)?)?;
        let x = x.affine(self.xscale, 0.0)?;
        let pos = espnet_rel_pos_emb(x.dim(1)?, self.d_model, x.dtype(), x.device())?;
        Ok((x, pos))
    }
}
