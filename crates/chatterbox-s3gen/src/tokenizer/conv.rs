//! The encoder's `Conv1d(c_in, c_out, kernel_size=3, stride, padding=1)` followed by GELU
//! (`AudioEncoderV2.conv1` / `conv2` in s3tokenizer/model_v2.py), computed on time-major
//! `(batch, time, channels)` tensors: the taps are gathered into `(batch, t_out, 3 * c_in)`
//! with one `index_select` and multiplied by the weight in one matmul, and the bias is fused into
//! the GELU. This keeps the encoder in the layout its transformer blocks use (no transposes) and
//! works on every backend.
use super::gelu::bias_gelu_owned;
use super::weights;
use crate::Result;
use candle_core::{Tensor, D};
use candle_nn::VarBuilder;

const KERNEL: usize = 3;
const PADDING: usize = 1;

/// `gelu(conv1d(x))` with kernel 3, zero padding 1 and a stride, on `(batch, time, c_in)`.
#[derive(Debug, Clone)]
pub struct Conv1dGelu {
    /// `(KERNEL * c_in, c_out)`: row `k * c_in + i` is the reference's `weight[:, i, k]`.
    weight: Tensor,
    bias: Tensor,
    stride: usize,
}

impl Conv1dGelu {
    /// Loads `weight` `(c_out, c_in, 3)` and `bias` `(c_out,)` under `vb`.
    pub fn new(c_in: usize, c_out: usize, stride: usize, vb: VarBuilder) -> Result<Self> {
        let w = weights::tensor(&vb, "weight", &[c_out, c_in, KERNEL])?;
        let bias = weights::tensor(&vb, "bias", &[c_out])?;
        let weight = w
            .permute((2, 1, 0))?
            .reshape((KERNEL * c_in, c_out))?
            .contiguous()?;
        Ok(Self {
            weight,
            bias,
            stride,
        })
    }

    /// Output frames for `t` input frames: `(t + 2 * 1 - 3) // stride + 1`.
    pub fn out_len(&self, t: usize) -> usize {
        if t == 0 {
            0
        } else {
            (t - 1) / self.stride + 1
        }
    }

    /// `gelu(conv(x))` for `x` of shape `(batch, time, c_in)`: `(batch, t_out, c_out)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, c_in) = x.dims3()?;
        let t_out = self.out_len(t);
        let padded = x.pad_with_zeros(1, PADDING, PADDING)?;
        // output frame j reads padded frames stride * j + k, k = 0..3
        let index: Vec<u32> = (0..t_out)
            .flat_map(|j| (0..KERNEL).map(move |k| (self.stride * j + k) as u32))
            .collect();
        let index = Tensor::from_vec(index, t_out * KERNEL, x.device())?;
        let cols = padded
            .index_select(&index, 1)?
            .reshape((b * t_out, KERNEL * c_in))?;
        let y = cols.matmul(&self.weight)?;
        let c_out = y.dim(D::Minus1)?;
        bias_gelu_owned(y, &self.bias)?
            .reshape((b, t_out, c_out))
            .map_err(Into::into)
    }
}
