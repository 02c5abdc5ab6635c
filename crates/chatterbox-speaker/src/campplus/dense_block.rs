//! Port of `CAMLayer`, `CAMDenseTDNNLayer` and `CAMDenseTDNNBlock` in
//! chatterbox/models/s3gen/xvector.py (upstream 5de7a54): densely connected TDNN layers with
//! context-aware masking.
use super::batch_norm::{BatchNorm, ConvWeights};
use super::layers::Conv1dShape;
use crate::weights::tensor;
use crate::Result;
use candle_core::{Tensor, D};
use candle_nn::VarBuilder;

/// Segment length of the CAM segment pooling (`seg_len`, hard-coded 100 frames).
const SEG_LEN: usize = 100;

/// Context-aware masking: a local dilated convolution, gated by a sigmoid mask computed from
/// the utterance mean plus the mean of the 100-frame segment each frame belongs to.
#[derive(Debug, Clone)]
pub(crate) struct CAMLayer {
    pub(super) linear_local: ConvWeights,
    pub(super) linear1: ConvWeights,
    pub(super) linear2: ConvWeights,
    pub(super) local: Conv1dShape,
}

impl CAMLayer {
    /// `reduction = 2`, no bias on the local convolution (`bias=False` in CAMPPlus).
    pub fn new(
        bn_channels: usize,
        out_channels: usize,
        kernel: usize,
        dilation: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        let red = bn_channels / 2;
        let local = tensor(
            &vb.pp("linear_local"),
            "weight",
            &[out_channels, bn_channels, kernel],
        )?;
        let l1 = vb.pp("linear1");
        let l2 = vb.pp("linear2");
        Ok(Self {
            linear_local: ConvWeights::new(local, None)?,
            linear1: ConvWeights::new(
                tensor(&l1, "weight", &[red, bn_channels, 1])?,
                Some(tensor(&l1, "bias", &[red])?),
            )?,
            linear2: ConvWeights::new(
                tensor(&l2, "weight", &[out_channels, red, 1])?,
                Some(tensor(&l2, "bias", &[out_channels])?),
            )?,
            local: Conv1dShape {
                c_in: bn_channels,
                c_out: out_channels,
                kernel,
                stride: 1,
                padding: (kernel - 1) / 2 * dilation,
                dilation,
            },
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let s = &self.local;
        let y = x.conv1d(&self.linear_local.weight, s.padding, 1, s.dilation, 1)?;
        // The context is constant within a segment, so the two 1x1 layers run once per segment.
        let (b, c, t) = x.dims3()?;
        let n_seg = t.div_ceil(SEG_LEN);
        let sums = x
            .pad_with_zeros(D::Minus1, 0, n_seg * SEG_LEN - t)?
            .reshape((b, c, n_seg, SEG_LEN))?
            .sum(D::Minus1)?;
        let counts: Vec<f32> = (0..n_seg)
            .map(|i| (t - i * SEG_LEN).min(SEG_LEN) as f32)
            .collect();
        let counts = Tensor::from_vec(counts, (1, 1, n_seg), x.device())?.to_dtype(x.dtype())?;
        let context = sums
            .broadcast_div(&counts)?
            .broadcast_add(&x.mean_keepdim(D::Minus1)?)?;
        let context = self.linear1.pointwise(&context)?.relu()?;
        let m = candle_nn::ops::sigmoid(&self.linear2.pointwise(&context)?)?;
        let m = m
            .unsqueeze(3)?
            .broadcast_as((b, s.c_out, n_seg, SEG_LEN))?
            .reshape((b, s.c_out, n_seg * SEG_LEN))?
            .narrow(D::Minus1, 0, t)?;
        Ok((y * m)?)
    }
}

/// `cam(relu(bn2(conv1x1(relu(bn1(x))))))`: a bottleneck to `bn_channels`, then CAM to
/// `growth_rate` new channels. `bn2` is folded into the 1x1 convolution.
#[derive(Debug, Clone)]
pub(crate) struct CAMDenseTDNNLayer {
    pub(super) nonlinear1: BatchNorm,
    pub(super) linear1: ConvWeights,
    pub(super) cam_layer: CAMLayer,
    pub(super) c_in: usize,
    pub(super) bn_channels: usize,
}

impl CAMDenseTDNNLayer {
    pub fn new(
        c_in: usize,
        out_channels: usize,
        bn_channels: usize,
        kernel: usize,
        dilation: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        let nonlinear1 = BatchNorm::new(c_in, true, vb.pp("nonlinear1").pp("batchnorm"))?;
        let w = tensor(&vb.pp("linear1"), "weight", &[bn_channels, c_in, 1])?;
        let bn2 = BatchNorm::new(bn_channels, true, vb.pp("nonlinear2").pp("batchnorm"))?;
        Ok(Self {
            nonlinear1,
            linear1: ConvWeights::folded(w, &bn2)?,
            cam_layer: CAMLayer::new(
                bn_channels,
                out_channels,
                kernel,
                dilation,
                vb.pp("cam_layer"),
            )?,
            c_in,
            bn_channels,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.nonlinear1.forward(x)?.relu()?;
        let h = self.linear1.pointwise(&h)?.relu()?;
        self.cam_layer.forward(&h)
    }
}

/// `num_layers` dense layers, each appending `growth_rate` channels to its input.
#[derive(Debug, Clone)]
pub(crate) struct CAMDenseTDNNBlock {
    pub(super) layers: Vec<CAMDenseTDNNLayer>,
    c_in: usize,
    growth: usize,
}

impl CAMDenseTDNNBlock {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        num_layers: usize,
        c_in: usize,
        growth: usize,
        bn_channels: usize,
        kernel: usize,
        dilation: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        let layers = (0..num_layers)
            .map(|i| {
                CAMDenseTDNNLayer::new(
                    c_in + i * growth,
                    growth,
                    bn_channels,
                    kernel,
                    dilation,
                    vb.pp(format!("tdnnd{}", i + 1)),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            c_in,
            growth,
        })
    }

    /// Output channels.
    pub fn c_out(&self) -> usize {
        self.c_in + self.layers.len() * self.growth
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = x.clone();
        for layer in &self.layers {
            let y = layer.forward(&x)?;
            x = Tensor::cat(&[&x, &y], 1)?;
        }
        Ok(x)
    }
}
