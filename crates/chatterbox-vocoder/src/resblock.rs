//! Port of `ResBlock` from chatterbox/models/s3gen/hifigan.py (upstream 5de7a54).
use crate::conv::{Act, Conv1d, ConvCfg, Norm};
use crate::cpu::ResBlockKernel;
use crate::snake::Snake;
use crate::Result;
use candle_core::{Module, Tensor};
use candle_nn::VarBuilder;

/// The HiFi-GAN / BigVGAN residual block: for each dilation `d`,
/// `x += conv2(snake2(conv1_d(snake1(x))))` (weight-normed convolutions, "same" padding).
#[derive(Debug, Clone)]
pub struct ResBlock {
    convs1: Vec<Conv1d>,
    convs2: Vec<Conv1d>,
    activations1: Vec<Snake>,
    activations2: Vec<Snake>,
    /// The whole block as one CPU kernel (CPU tensors).
    cpu: Option<ResBlockKernel>,
}

impl ResBlock {
    /// `ResBlock(channels, kernel_size, dilations)`.
    pub fn new(
        channels: usize,
        kernel_size: usize,
        dilations: &[usize],
        vb: VarBuilder,
    ) -> Result<Self> {
        let mut convs1 = Vec::with_capacity(dilations.len());
        let mut convs2 = Vec::with_capacity(dilations.len());
        let mut activations1 = Vec::with_capacity(dilations.len());
        let mut activations2 = Vec::with_capacity(dilations.len());
        for (i, &d) in dilations.iter().enumerate() {
            convs1.push(Conv1d::new(
                vb.pp("convs1").pp(i),
                channels,
                channels,
                kernel_size,
                ConvCfg::same(kernel_size, d),
                Norm::Weight,
            )?);
            convs2.push(Conv1d::new(
                vb.pp("convs2").pp(i),
                channels,
                channels,
                kernel_size,
                ConvCfg::same(kernel_size, 1),
                Norm::Weight,
            )?);
            activations1.push(Snake::new(channels, vb.pp("activations1").pp(i))?);
            activations2.push(Snake::new(channels, vb.pp("activations2").pp(i))?);
        }
        let cpu = if vb.device().is_cpu() {
            let mut layers = Vec::with_capacity(dilations.len());
            for i in 0..dilations.len() {
                let (Some(conv1), Some(conv2), Some(s1), Some(s2)) = (
                    convs1[i].winograd()?,
                    convs2[i].winograd()?,
                    activations1[i].host(),
                    activations2[i].host(),
                ) else {
                    break;
                };
                layers.push(crate::cpu::ResBlockLayer {
                    conv1,
                    snake1: (s1.0.to_vec(), s1.1.to_vec()),
                    conv2,
                    snake2: (s2.0.to_vec(), s2.1.to_vec()),
                });
            }
            (layers.len() == dilations.len()).then(|| ResBlockKernel::new(channels, layers))
        } else {
            None
        };
        Ok(Self {
            convs1,
            convs2,
            activations1,
            activations2,
            cpu,
        })
    }
}

impl ResBlock {
    /// With `fast` on the CPU the whole block is one fused kernel.
    pub(crate) fn forward_with(&self, x: &Tensor, fast: bool) -> candle_core::Result<Tensor> {
        self.forward_sum(x, fast, None, None)
    }

    /// `(sum + block(x)) / div` (each part optional), the generator's
    /// `xs = xs + resblock(x)` ... `xs / num_kernels`. On CUDA the additions and the
    /// division are the last convolution's epilogue; elsewhere they are candle ops.
    pub(crate) fn forward_sum(
        &self,
        x: &Tensor,
        fast: bool,
        sum: Option<&Tensor>,
        div: Option<f32>,
    ) -> candle_core::Result<Tensor> {
        if let Some(kernel) = self.cpu.as_ref().filter(|_| fast && x.device().is_cpu()) {
            return finish(kernel.forward(x)?, sum, div);
        }
        let n = self.convs1.len();
        let mut x = x.clone();
        for i in 0..n {
            let xt =
                self.convs1[i].forward_with(&x, Act::Snake(&self.activations1[i]), None, fast)?;
            let act = Act::Snake(&self.activations2[i]);
            #[cfg(feature = "cuda")]
            if i + 1 == n {
                if let Some(y) = self.convs2[i].forward_cuda(&xt, act, Some(&x), sum, div)? {
                    return Ok(y);
                }
            }
            x = self.convs2[i].forward_with(&xt, act, Some(&x), fast)?;
        }
        finish(x, sum, div)
    }
}

/// `(sum + y) / div` with candle ops (a true division, as torch's).
fn finish(y: Tensor, sum: Option<&Tensor>, div: Option<f32>) -> candle_core::Result<Tensor> {
    let y = match sum {
        Some(s) => (s + y)?,
        None => y,
    };
    match div {
        Some(d) => y.broadcast_div(&Tensor::new(d, y.device())?),
        None => Ok(y),
    }
}

impl Module for ResBlock {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_with(x, true)
    }
}
