//! Port of `BasicResBlock` and `FCM` in chatterbox/models/s3gen/xvector.py (upstream 5de7a54):
//! the 2-D convolutional front end over (frequency, time).
use super::batch_norm::{BatchNorm, ConvWeights};
use crate::weights::tensor;
use crate::Result;
use candle_core::Tensor;
use candle_nn::VarBuilder;

/// FCM's channels (`m_channels`, hard-coded 32).
pub(super) const M_CHANNELS: usize = 32;

fn conv_bn(
    vb: &VarBuilder,
    conv: &str,
    bn: &str,
    c_out: usize,
    c_in: usize,
    k: usize,
) -> Result<ConvWeights> {
    let w = tensor(&vb.pp(conv), "weight", &[c_out, c_in, k, k])?;
    ConvWeights::folded(w, &BatchNorm::new(c_out, true, vb.pp(bn))?)
}

/// Keeps every `stride`-th row (dim 2) of `(B, C, H, W)`.
fn subsample_rows(y: Tensor, stride: usize) -> Result<Tensor> {
    if stride == 1 {
        return Ok(y);
    }
    let h = y.dim(2)?;
    let idx = Tensor::arange_step(0u32, h as u32, stride as u32, y.device())?;
    Ok(y.index_select(&idx, 2)?)
}

/// `bn(conv(x))` for a 3x3 convolution with padding 1 and stride `(stride, 1)`: candle's
/// `conv2d` has one stride for both axes, so the stride-1 output is subsampled.
fn conv3x3(x: &Tensor, w: &ConvWeights, stride: usize) -> Result<Tensor> {
    let y = x.conv2d(&w.weight, 1, 1, 1, 1)?;
    w.add_bias(subsample_rows(y, stride)?)
}

/// A pre-activation-free residual block: `relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))`.
#[derive(Debug, Clone)]
pub(crate) struct BasicResBlock {
    pub(super) conv1: ConvWeights,
    pub(super) conv2: ConvWeights,
    /// 1x1 convolution + BatchNorm when the shape changes; identity otherwise.
    pub(super) shortcut: Option<ConvWeights>,
    pub(super) in_planes: usize,
    pub(super) planes: usize,
    pub(super) stride: usize,
}

impl BasicResBlock {
    pub fn new(in_planes: usize, planes: usize, stride: usize, vb: VarBuilder) -> Result<Self> {
        let shortcut = if stride != 1 || in_planes != planes {
            let sc = vb.pp("shortcut");
            let w = tensor(&sc.pp("0"), "weight", &[planes, in_planes, 1, 1])?;
            Some(ConvWeights::folded(
                w,
                &BatchNorm::new(planes, true, sc.pp("1"))?,
            )?)
        } else {
            None
        };
        Ok(Self {
            conv1: conv_bn(&vb, "conv1", "bn1", planes, in_planes, 3)?,
            conv2: conv_bn(&vb, "conv2", "bn2", planes, planes, 3)?,
            shortcut,
            in_planes,
            planes,
            stride,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let out = conv3x3(x, &self.conv1, self.stride)?.relu()?;
        let out = conv3x3(&out, &self.conv2, 1)?;
        let sc = match &self.shortcut {
            Some(sc) => sc.add_bias(subsample_rows(
                x.conv2d(&sc.weight, 0, 1, 1, 1)?,
                self.stride,
            )?)?,
            None => x.clone(),
        };
        Ok((out + sc)?.relu()?)
    }
}

/// The front end: conv 3x3 (1 -> 32) + BN + ReLU, two stages of two residual blocks (the first
/// of each halving the frequency axis), conv 3x3 with stride (2, 1) + BN + ReLU, then channels
/// and frequency flattened: `(B, feat_dim, T)` -> `(B, 32 * feat_dim / 8, T)`.
#[derive(Debug, Clone)]
#[allow(clippy::upper_case_acronyms)] // named after the reference's class
pub(crate) struct FCM {
    pub(super) conv1: ConvWeights,
    pub(super) blocks: Vec<BasicResBlock>,
    pub(super) conv2: ConvWeights,
    /// `m_channels`.
    pub(super) channels: usize,
}

impl FCM {
    pub fn new(vb: VarBuilder) -> Result<Self> {
        let mut blocks = Vec::with_capacity(4);
        for layer in ["layer1", "layer2"] {
            // num_blocks = [2, 2]: strides [2, 1]
            for (i, stride) in [2, 1].into_iter().enumerate() {
                let vb = vb.pp(layer).pp(i.to_string());
                blocks.push(BasicResBlock::new(M_CHANNELS, M_CHANNELS, stride, vb)?);
            }
        }
        Ok(Self {
            conv1: conv_bn(&vb, "conv1", "bn1", M_CHANNELS, 1, 3)?,
            blocks,
            conv2: conv_bn(&vb, "conv2", "bn2", M_CHANNELS, M_CHANNELS, 3)?,
            channels: M_CHANNELS,
        })
    }

    /// `x`: `(B, feat_dim, T)` -> `(B, 32 * ceil-halved feat_dim, T)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut out = conv3x3(&x.unsqueeze(1)?, &self.conv1, 1)?.relu()?;
        for block in &self.blocks {
            out = block.forward(&out)?;
        }
        let out = conv3x3(&out, &self.conv2, 2)?.relu()?;
        let (b, c, h, t) = out.dims4()?;
        Ok(out.reshape((b, c * h, t))?.contiguous()?)
    }
}

/// Frequency bins after the front end (three halvings with padding 1, kernel 3).
pub(crate) fn fcm_out_height(feat_dim: usize) -> usize {
    let half = |h: usize| (h + 2 - 3) / 2 + 1;
    half(half(half(feat_dim)))
}
