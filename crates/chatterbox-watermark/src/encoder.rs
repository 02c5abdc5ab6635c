//! Port of perth/perth_net/perth_net_implicit/model/encoder.py (resemble-perth 1.0.1): the
//! `Encoder`, which adds the watermark to the lowest `subband` bins of a magnitude spectrogram
//! as a residual, in the frames `magmask` selects.
use crate::layers::{layer_stack, magmask, run_stack, Conv};
use candle_core::Tensor;
use candle_nn::VarBuilder;

/// `Encoder(hidden, subband)`: `layers.{0..6}` as in model/encoder.py.
#[derive(Debug, Clone)]
pub struct Encoder {
    layers: Vec<Conv>,
    subband: usize,
}

impl Encoder {
    /// Builds the encoder (`vb` at `encoder`).
    pub fn new(hidden: usize, subband: usize, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(Self {
            layers: layer_stack(subband, hidden, subband, vb.pp("layers"))?,
            subband,
        })
    }

    /// `forward(magspec)`: the watermarked `(B, n_freq, T)` magnitudes and the `(B, 1, T)` mask.
    pub fn forward(&self, magspec: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let mask = magmask(magspec)?;
        let n_freq = magspec.dim(1)?;
        let sub = magspec.narrow(1, 0, self.subband)?;
        let res = run_stack(&self.layers, &sub)?.broadcast_mul(&mask)?;
        let low = (sub + res)?;
        let out = if n_freq > self.subband {
            let high = magspec.narrow(1, self.subband, n_freq - self.subband)?;
            Tensor::cat(&[&low, &high], 1)?
        } else {
            low
        };
        Ok((out, mask))
    }
}
