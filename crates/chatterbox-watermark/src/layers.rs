//! Port of perth/perth_net/perth_net_implicit/model/__init__.py (resemble-perth 1.0.1): the
//! `Conv` block (a same-length `Conv1d`, optionally followed by `LeakyReLU(0.01)`) and
//! `magmask`, the frames loud enough to carry a watermark.
use candle_core::{DType, Module, Tensor};
use candle_nn::{Conv1d, Conv1dConfig, VarBuilder};

/// `LeakyReLU()`'s default negative slope.
const LEAKY_SLOPE: f64 = 0.01;
/// `magmask`'s `p`: a frame is watermarked when its summed magnitude exceeds this fraction of
/// the loudest frame's.
pub(crate) const MAGMASK_P: f64 = 0.05;

/// `Conv` (model/__init__.py): `nn.Conv1d(i, o, k, padding=(k - 1) / 2)` then LeakyReLU.
/// Weights under `conv.weight` / `conv.bias`.
#[derive(Debug, Clone)]
pub struct Conv {
    conv: Conv1d,
    act: bool,
}

impl Conv {
    /// A same-length convolution from `i` to `o` channels with odd kernel `k`.
    pub fn new(
        i: usize,
        o: usize,
        k: usize,
        act: bool,
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        let cfg = Conv1dConfig {
            padding: (k - 1) / 2,
            ..Default::default()
        };
        let conv = candle_nn::conv1d(i, o, k, cfg, vb.pp("conv"))?;
        Ok(Self { conv, act })
    }
}

impl Module for Conv {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.conv.forward(x)?;
        if self.act {
            candle_nn::ops::leaky_relu(&x, LEAKY_SLOPE)
        } else {
            Ok(x)
        }
    }
}

/// The shared layer stack of the encoder and each decoder branch: `Conv(input, hidden, 1)`,
/// five `Conv(hidden, hidden, 7)`, `Conv(hidden, output, 1, act=False)`, under `layers.{i}`.
pub(crate) fn layer_stack(
    input: usize,
    hidden: usize,
    output: usize,
    vb: VarBuilder,
) -> candle_core::Result<Vec<Conv>> {
    let mut layers = Vec::with_capacity(7);
    layers.push(Conv::new(input, hidden, 1, true, vb.pp("0"))?);
    for i in 1..=5 {
        layers.push(Conv::new(hidden, hidden, 7, true, vb.pp(i.to_string()))?);
    }
    layers.push(Conv::new(hidden, output, 1, false, vb.pp("6"))?);
    Ok(layers)
}

/// Runs a layer stack.
pub(crate) fn run_stack(layers: &[Conv], x: &Tensor) -> candle_core::Result<Tensor> {
    let mut x = x.clone();
    for l in layers {
        x = l.forward(&x)?;
    }
    Ok(x)
}

/// `magmask(magspec)`: `(B, n_freq, T)` normalised magnitudes to a `(B, 1, T)` f32 mask, 1
/// where a frame's magnitude sum over all bins exceeds 5 % of the clip's loudest frame's.
pub fn magmask(magspec: &Tensor) -> candle_core::Result<Tensor> {
    let s = magspec.sum_keepdim(1)?; // (B, 1, T)
    let thresh = s.max_keepdim(2)?.affine(MAGMASK_P, 0.0)?; // (B, 1, 1)
    s.broadcast_gt(&thresh)?.to_dtype(DType::F32)
}
