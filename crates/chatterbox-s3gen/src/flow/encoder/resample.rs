//! The encoder's two convolutional layers. Port of
//! chatterbox/models/s3gen/transformer/upsample_encoder.py `PreLookaheadLayer` and `Upsample1D`
//! (upstream 5de7a54), on time-major `(batch, time, channels)` tensors.

use super::super::nn::Conv1d;
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

/// `PreLookaheadLayer`: conv (kernel `pre_lookahead_len + 1`) over `pre_lookahead_len` zeros of
/// right context, `leaky_relu(0.01)`, causal conv (kernel 3, 2 zeros on the left), residual.
#[derive(Debug, Clone)]
pub(crate) struct PreLookaheadLayer {
    conv1: Conv1d,
    conv2: Conv1d,
}

impl PreLookaheadLayer {
    pub(crate) fn new(channels: usize, pre_lookahead_len: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            conv1: Conv1d::new(
                channels,
                channels,
                pre_lookahead_len + 1,
                0,
                pre_lookahead_len,
                vb.pp("conv1"),
            )?,
            conv2: Conv1d::new(channels, channels, 3, 2, 0, vb.pp("conv2"))?,
        })
    }
}

impl Module for PreLookaheadLayer {
    fn forward(&self, inputs: &Tensor) -> Result<Tensor> {
        let out = candle_nn::ops::leaky_relu(&self.conv1.forward(inputs)?, 0.01)?;
        self.conv2.forward(&out)? + inputs
    }
}

/// `Upsample1D` (the encoder's, not the decoder's): nearest-neighbour repeat by `stride`, then a
/// conv of kernel `2 stride + 1` over `2 stride` zeros of left context.
#[derive(Debug, Clone)]
pub(crate) struct Upsample1D {
    conv: Conv1d,
    stride: usize,
}

impl Upsample1D {
    pub(crate) fn new(
        channels: usize,
        out_channels: usize,
        stride: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        Ok(Self {
            conv: Conv1d::new(
                channels,
                out_channels,
                2 * stride + 1,
                2 * stride,
                0,
                vb.pp("conv"),
            )?,
            stride,
        })
    }

    pub(crate) fn stride(&self) -> usize {
        self.stride
    }
}

impl Module for Upsample1D {
    fn forward(&self, inputs: &Tensor) -> Result<Tensor> {
        let (b, t, c) = inputs.dims3()?;
        let up = inputs
            .unsqueeze(2)?
            .broadcast_as((b, t, self.stride, c))?
            .reshape((b, t * self.stride, c))?;
        self.conv.forward(&up)
    }
}
