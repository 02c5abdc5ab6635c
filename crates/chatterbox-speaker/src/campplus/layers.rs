//! Port of `TDNNLayer`, `TransitLayer`, `DenseLayer` and `StatsPool` in
//! chatterbox/models/s3gen/xvector.py (upstream 5de7a54).
use super::batch_norm::{BatchNorm, ConvWeights};
use crate::weights::tensor;
use crate::Result;
use candle_core::{Tensor, D};
use candle_nn::VarBuilder;

/// Shape of a 1-D convolution.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conv1dShape {
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
    pub dilation: usize,
}

impl Conv1dShape {
    /// Output length for `t_in` input frames (0 when the input is too short).
    pub fn t_out(&self, t_in: usize) -> usize {
        let span = self.dilation * (self.kernel - 1) + 1;
        (t_in + 2 * self.padding)
            .checked_sub(span)
            .map_or(0, |v| v / self.stride + 1)
    }
}

/// `relu(bn(conv1d(x)))` (`config_str="batchnorm-relu"`, no conv bias), the BatchNorm folded
/// into the convolution.
#[derive(Debug, Clone)]
pub(crate) struct TDNNLayer {
    pub(super) conv: ConvWeights,
    pub(super) shape: Conv1dShape,
}

impl TDNNLayer {
    /// `padding = (kernel - 1) / 2 * dilation` (the reference's `padding=-1`).
    pub fn new(
        c_in: usize,
        c_out: usize,
        kernel: usize,
        stride: usize,
        dilation: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        let w = tensor(&vb.pp("linear"), "weight", &[c_out, c_in, kernel])?;
        let bn = BatchNorm::new(c_out, true, vb.pp("nonlinear").pp("batchnorm"))?;
        Ok(Self {
            conv: ConvWeights::folded(w, &bn)?,
            shape: Conv1dShape {
                c_in,
                c_out,
                kernel,
                stride,
                padding: (kernel - 1) / 2 * dilation,
                dilation,
            },
        })
    }

    /// Output frames for `t` input frames.
    pub fn t_out(&self, t: usize) -> usize {
        self.shape.t_out(t)
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let s = &self.shape;
        let y = x.conv1d(&self.conv.weight, s.padding, s.stride, s.dilation, 1)?;
        Ok(self.conv.add_bias(y)?.relu()?)
    }
}

/// `conv1x1(relu(bn(x)))`, halving the channels between dense blocks.
#[derive(Debug, Clone)]
pub(crate) struct TransitLayer {
    pub(super) bn: BatchNorm,
    pub(super) linear: ConvWeights,
    pub(super) c_in: usize,
    pub(super) c_out: usize,
}

impl TransitLayer {
    pub fn new(c_in: usize, c_out: usize, vb: VarBuilder) -> Result<Self> {
        let bn = BatchNorm::new(c_in, true, vb.pp("nonlinear").pp("batchnorm"))?;
        let w = tensor(&vb.pp("linear"), "weight", &[c_out, c_in, 1])?;
        Ok(Self {
            bn,
            linear: ConvWeights::new(w, None)?,
            c_in,
            c_out,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.linear.pointwise(&self.bn.forward(x)?.relu()?)
    }
}

/// `bn(conv1x1(x))` on pooled statistics (`config_str="batchnorm_"`: a BatchNorm without
/// affine parameters), folded into one linear map.
#[derive(Debug, Clone)]
pub(crate) struct DenseLayer {
    pub(super) linear: ConvWeights,
    pub(super) c_in: usize,
    pub(super) c_out: usize,
}

impl DenseLayer {
    pub fn new(c_in: usize, c_out: usize, vb: VarBuilder) -> Result<Self> {
        let w = tensor(&vb.pp("linear"), "weight", &[c_out, c_in, 1])?;
        let bn = BatchNorm::new(c_out, false, vb.pp("nonlinear").pp("batchnorm"))?;
        Ok(Self {
            linear: ConvWeights::folded(w, &bn)?,
            c_in,
            c_out,
        })
    }

    /// `x` `(B, c_in)` -> `(B, c_out)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.linear.weight.reshape((self.c_out, self.c_in))?;
        self.linear.add_bias(x.matmul(&w.t()?)?)
    }
}

/// `StatsPool`: per channel, the mean and the unbiased (N - 1) standard deviation over time,
/// concatenated: `(B, C, T)` -> `(B, 2C)`.
pub(crate) fn statistics_pooling(x: &Tensor) -> Result<Tensor> {
    let t = x.dim(D::Minus1)?;
    let mean = x.mean_keepdim(D::Minus1)?;
    let var = (x.broadcast_sub(&mean)?.sqr()?.sum(D::Minus1)? / (t as f64 - 1.0))?;
    Ok(Tensor::cat(&[&mean.squeeze(D::Minus1)?, &var.sqrt()?], 1)?)
}
