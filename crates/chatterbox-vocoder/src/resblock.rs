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
    /// `xs = xs + resblock(x)` ... `xs / num_kernels`, the additions and the division as
    /// candle ops (on CUDA the generator runs a stage's blocks together instead:
    /// [`forward_stage_cuda`]).
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
            x = self.convs2[i].forward_with(&xt, act, Some(&x), fast)?;
        }
        finish(x, sum, div)
    }
}

/// The generator's `xs = sum_j resblocks[j](x)`, then `xs / resblocks.len()` (one upsampling
/// stage) on CUDA: the blocks' convolutions at each position run as one launch of the 3xTF32
/// kernel (`cuda_conv::forward_group`), so that one's blocks fill the last wave of another's,
/// and the sum and division are one pass at the end. `None` where the kernel does not apply.
#[cfg(feature = "cuda")]
pub(crate) fn forward_stage_cuda(
    resblocks: &[ResBlock],
    x: &Tensor,
) -> candle_core::Result<Option<Tensor>> {
    use crate::cuda_conv::{forward_group, Epilogue, GroupItem, PreAct, Tf32x3Conv, MAX_GROUP};
    fn snake(s: &Snake) -> PreAct<'_> {
        let (alpha, inv_alpha) = s.params();
        PreAct::Snake(alpha, inv_alpha)
    }
    fn tf(c: &Conv1d) -> candle_core::Result<&Tf32x3Conv> {
        c.tf32x3()
            .ok_or_else(|| candle_core::Error::Msg("hift resblock: no kernel".into()))
    }
    let n = resblocks.first().map_or(0, |r| r.convs1.len());
    let usable = !resblocks.is_empty()
        && resblocks.len() <= MAX_GROUP
        && resblocks.iter().all(|r| {
            r.convs1.len() == n
                && r.convs1.iter().chain(&r.convs2).all(|c| {
                    c.tf32x3()
                        .is_some_and(|c| c.applies_in_group(x, resblocks.len()))
                })
        });
    if !usable || n == 0 {
        return Ok(None);
    }
    let mut xs: Vec<Tensor> = vec![x.clone(); resblocks.len()];
    for i in 0..n {
        let items = resblocks
            .iter()
            .zip(&xs)
            .map(|(r, x)| {
                Ok(GroupItem {
                    conv: tf(&r.convs1[i])?,
                    x,
                    act: snake(&r.activations1[i]),
                    epi: Epilogue::default(),
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let xt = forward_group(&items)?;
        let items = resblocks
            .iter()
            .zip(&xt)
            .zip(&xs)
            .map(|((r, xt), x)| {
                Ok(GroupItem {
                    conv: tf(&r.convs2[i])?,
                    x: xt,
                    act: snake(&r.activations2[i]),
                    epi: Epilogue { residual: Some(x) },
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        xs = forward_group(&items)?;
    }
    crate::cuda_glue::sum_div(&xs, resblocks.len() as f32).map(Some)
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

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn grouped_stage_matches_the_blocks_one_by_one() -> candle_core::Result<()> {
        use candle_core::DType;
        let dev = chatterbox_cuda::open(0)?;
        let varmap = candle_nn::VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
        // long enough for the tensor-core kernels (a block per multiprocessor)
        let (c, t) = (64, 17_001);
        let blocks = [3, 7, 11]
            .iter()
            .enumerate()
            .map(|(j, &k)| ResBlock::new(c, k, &[1, 3, 5], vb.pp(j)))
            .collect::<Result<Vec<_>>>()
            .map_err(candle_core::Error::wrap)?;
        let x = Tensor::randn(0f32, 1.0, (1, c, t), &dev)?;
        let grouped = forward_stage_cuda(&blocks, &x)?.expect("the kernels apply");
        // the generator's loop: xs = xs + block(x), then / 3, each block alone
        let mut xs: Option<Tensor> = None;
        for (j, block) in blocks.iter().enumerate() {
            let div = (j == 2).then_some(3.0);
            xs = Some(block.forward_sum(&x, true, xs.as_ref(), div)?);
        }
        let want = xs.expect("three blocks");
        let diff = (grouped - want)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert_eq!(diff, 0.0);
        // too many blocks for one launch: the caller's loop runs them
        let four = [&blocks[..], &blocks[..1]].concat();
        assert!(forward_stage_cuda(&four, &x)?.is_none());
        Ok(())
    }
}
