//! `nn.Conv1d` and `nn.ConvTranspose1d` with biases, optionally weight-normed (folded at load).
use crate::cpu::{self, Conv1dKernel, PreAct};
use crate::snake::Snake;
use crate::weights::{get, weight_norm};
use crate::Result;
use candle_core::{Module, Tensor};
use candle_nn::{Init, VarBuilder};

/// Padding, stride and dilation of a [`Conv1d`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvCfg {
    pub padding: usize,
    pub stride: usize,
    pub dilation: usize,
}

impl ConvCfg {
    /// "Same" padding for an odd kernel (`get_padding` in hifigan.py).
    pub fn same(kernel: usize, dilation: usize) -> Self {
        Self {
            padding: (kernel * dilation - dilation) / 2,
            stride: 1,
            dilation,
        }
    }
}

/// Whether a layer's weight is stored weight-normed (`weight_norm(Conv1d(...))`) or plain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Norm {
    Weight,
    None,
}

fn bias_init(fan_in: usize) -> Init {
    let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
    Init::Uniform {
        lo: -bound,
        up: bound,
    }
}

/// The activation in front of a convolution, fused into it on the CPU.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Act<'a> {
    Identity,
    Snake(&'a Snake),
    LeakyRelu(f64),
}

/// `F.leaky_relu(x, slope)` with candle ops: `max(x, 0) + slope * min(x, 0)`, exactly torch's
/// `x > 0 ? x : x * slope` for both signs.
pub(crate) fn leaky_relu(x: &Tensor, slope: f64) -> candle_core::Result<Tensor> {
    #[cfg(feature = "cuda")]
    if crate::cuda::applies(x) {
        return crate::cuda_glue::leaky_relu(x, slope);
    }
    x.maximum(0f32)? + (x.minimum(0f32)? * slope)?
}

/// `nn.Conv1d(c_in, c_out, k, stride, padding, dilation)` with a bias.
#[derive(Debug, Clone)]
pub(crate) struct Conv1d {
    weight: Tensor,
    bias: Tensor,
    cfg: ConvCfg,
    /// The CPU implicit-GEMM kernel (stride-1 convolutions loaded on the CPU).
    cpu: Option<Conv1dKernel>,
    /// The 3xTF32 tensor-core form (stride-1 f32 convolutions loaded on a CUDA device).
    #[cfg(feature = "cuda")]
    cuda: Option<crate::cuda_conv::Tf32x3Conv>,
}

impl Conv1d {
    pub fn new(
        vb: VarBuilder,
        c_in: usize,
        c_out: usize,
        kernel: usize,
        cfg: ConvCfg,
        norm: Norm,
    ) -> Result<Self> {
        let weight = match norm {
            Norm::Weight => weight_norm(&vb, (c_out, c_in, kernel))?,
            Norm::None => get(
                &vb,
                (c_out, c_in, kernel),
                "weight",
                candle_nn::init::DEFAULT_KAIMING_NORMAL,
            )?,
        };
        let bias = get(&vb, c_out, "bias", bias_init(c_in * kernel))?;
        let cpu = if weight.device().is_cpu() && cfg.stride == 1 {
            Some(Conv1dKernel::new(
                &weight.flatten_all()?.to_vec1::<f32>()?,
                bias.to_vec1::<f32>()?,
                c_out,
                c_in,
                kernel,
                cfg.padding,
                cfg.dilation,
            ))
        } else {
            None
        };
        #[cfg(feature = "cuda")]
        let cuda = if cfg.stride == 1 {
            crate::cuda_conv::Tf32x3Conv::new(&weight, &bias, cfg.padding, cfg.dilation)?
        } else {
            None
        };
        Ok(Self {
            weight,
            bias: bias.reshape((1, c_out, 1))?,
            cfg,
            cpu,
            #[cfg(feature = "cuda")]
            cuda,
        })
    }

    /// Drops the 3xTF32 tensor-core form: this convolution runs in strict FP32 on a GPU too.
    pub fn strict_fp32(self) -> Self {
        #[cfg(feature = "cuda")]
        return Self { cuda: None, ..self };
        #[cfg(not(feature = "cuda"))]
        self
    }

    /// The convolution as a channels-last Winograd kernel, for "same"-padded stride-1
    /// convolutions with an odd kernel of at least 3 taps.
    pub fn winograd(&self) -> Result<Option<cpu::WinogradConv>> {
        let (c_out, c_in, k) = self.weight.dims3()?;
        let ConvCfg {
            padding,
            stride,
            dilation,
        } = self.cfg;
        if stride != 1 || padding != dilation * (k - 1) / 2 || k % 2 == 0 {
            return Ok(None);
        }
        let w = self.weight.flatten_all()?.to_vec1::<f32>()?;
        let b = self.bias.flatten_all()?.to_vec1::<f32>()?;
        Ok(cpu::WinogradConv::new(&w, b, c_out, c_in, k, dilation))
    }

    /// `conv(act(x)) (+ residual)`. With `fast` and a CPU tensor this is one fused kernel;
    /// otherwise candle ops.
    pub fn forward_with(
        &self,
        x: &Tensor,
        act: Act,
        residual: Option<&Tensor>,
        fast: bool,
    ) -> candle_core::Result<Tensor> {
        if let Some(kernel) = self.cpu.as_ref().filter(|_| fast && x.device().is_cpu()) {
            let pre = match act {
                Act::Identity => PreAct::Identity,
                Act::LeakyRelu(slope) => PreAct::LeakyRelu(slope as f32),
                Act::Snake(s) => match s.host() {
                    Some((alpha, inv_alpha)) => PreAct::Snake { alpha, inv_alpha },
                    None => return self.forward_with(x, act, residual, false),
                },
            };
            return cpu::conv1d(x, kernel, pre, residual);
        }
        #[cfg(feature = "cuda")]
        if let Some(y) = self.forward_cuda(x, act, residual)? {
            return Ok(y);
        }
        let x = match act {
            Act::Identity => x.clone(),
            Act::Snake(s) => s.forward_generic(x)?,
            Act::LeakyRelu(slope) => leaky_relu(x, slope)?,
        };
        let ConvCfg {
            padding,
            stride,
            dilation,
        } = self.cfg;
        #[cfg(feature = "cuda")]
        let y = if crate::cuda::applies(&x) && self.weight.dtype() == x.dtype() {
            crate::cuda::conv1d(&x, &self.weight, padding, stride, dilation)?
        } else {
            x.conv1d(&self.weight, padding, stride, dilation, 1)?
        };
        #[cfg(not(feature = "cuda"))]
        let y = x.conv1d(&self.weight, padding, stride, dilation, 1)?;
        #[cfg(feature = "cuda")]
        if crate::cuda::applies(&y)
            && self.bias.dtype() == candle_core::DType::F32
            && residual.is_none_or(|r| r.is_contiguous() && r.dtype() == y.dtype())
        {
            return crate::cuda_glue::bias_residual(&y, &self.bias, residual);
        }
        let y = y.broadcast_add(&self.bias)?;
        match residual {
            Some(r) => y + r,
            None => Ok(y),
        }
    }
}

#[cfg(feature = "cuda")]
impl Conv1d {
    /// The 3xTF32 tensor-core form, where this convolution has one.
    pub fn tf32x3(&self) -> Option<&crate::cuda_conv::Tf32x3Conv> {
        self.cuda.as_ref()
    }

    /// `conv(act(x)) + bias (+ residual)` as one 3xTF32 tensor-core kernel
    /// (`crate::cuda_conv`), or `None` where that kernel does not apply.
    fn forward_cuda(
        &self,
        x: &Tensor,
        act: Act,
        residual: Option<&Tensor>,
    ) -> candle_core::Result<Option<Tensor>> {
        let contiguous_f32 = |r: &Tensor| r.is_contiguous() && r.dtype() == x.dtype();
        let Some(conv) = self
            .cuda
            .as_ref()
            .filter(|c| c.applies(x) && residual.is_none_or(contiguous_f32))
        else {
            return Ok(None);
        };
        use crate::cuda_conv::PreAct as P;
        let pre = match act {
            Act::Identity => P::Identity,
            Act::LeakyRelu(slope) => P::LeakyRelu(slope as f32),
            Act::Snake(s) => {
                let (alpha, inv_alpha) = s.params();
                P::Snake(alpha, inv_alpha)
            }
        };
        let epi = crate::cuda_conv::Epilogue { residual };
        conv.forward(x, pre, epi).map(Some)
    }
}

impl Module for Conv1d {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_with(x, Act::Identity, None, true)
    }
}

/// `nn.ConvTranspose1d(c_in, c_out, k, stride, padding=(k - stride) / 2)`, weight-normed, with a
/// bias. Runs as an unpadded transposed convolution (candle's fast matmul + col2im path on every
/// backend; a padded one falls back to a direct kernel) and then drops `padding` samples at each
/// end.
#[derive(Debug, Clone)]
pub(crate) struct ConvTranspose1d {
    weight: Tensor,
    bias: Tensor,
    stride: usize,
    padding: usize,
}

impl ConvTranspose1d {
    pub fn new(
        vb: VarBuilder,
        c_in: usize,
        c_out: usize,
        kernel: usize,
        stride: usize,
    ) -> Result<Self> {
        // torch's weight_norm(dim=0) normalises over (c_out, k) for each input channel.
        let weight = weight_norm(&vb, (c_in, c_out, kernel))?;
        let bias = get(&vb, c_out, "bias", bias_init(c_out * kernel))?;
        Ok(Self {
            weight,
            bias: bias.reshape((1, c_out, 1))?,
            stride,
            padding: (kernel - stride) / 2,
        })
    }
}

/// An unpadded `conv_transpose1d` (candle's matmul + col2im path), one batch item at a time:
/// candle 0.11's col2im path mixes up batch items when the batch is larger than 1.
pub(crate) fn conv_transpose1d_unpadded(
    x: &Tensor,
    w: &Tensor,
    stride: usize,
) -> candle_core::Result<Tensor> {
    let b = x.dim(0)?;
    if b == 1 {
        return x.conv_transpose1d(w, 0, 0, stride, 1, 1);
    }
    let ys = (0..b)
        .map(|i| x.narrow(0, i, 1)?.conv_transpose1d(w, 0, 0, stride, 1, 1))
        .collect::<candle_core::Result<Vec<_>>>()?;
    Tensor::cat(&ys, 0)
}

impl ConvTranspose1d {
    /// `forward(x)`, then with `reflect` `nn.ReflectionPad1d((1, 0))` (`x[..., 1]` prepended),
    /// then `+ source` (`decode`'s upsampling step). On CUDA the bias, crop, pad and sum are
    /// one kernel.
    pub fn forward_sum(
        &self,
        x: &Tensor,
        reflect: bool,
        source: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let y = conv_transpose1d_unpadded(x, &self.weight, self.stride)?;
        #[cfg(feature = "cuda")]
        if crate::cuda::applies(&y) && crate::cuda::applies(source) {
            return crate::cuda_glue::ups_sum(&y, &self.bias, self.padding, reflect, source);
        }
        let len = y.dim(2)? - 2 * self.padding;
        let mut y = y.narrow(2, self.padding, len)?.broadcast_add(&self.bias)?;
        if reflect {
            y = Tensor::cat(&[&y.narrow(2, 1, 1)?, &y], 2)?;
        }
        y + source
    }
}

impl Module for ConvTranspose1d {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = conv_transpose1d_unpadded(x, &self.weight, self.stride)?;
        let len = y.dim(2)? - 2 * self.padding;
        y.narrow(2, self.padding, len)?.broadcast_add(&self.bias)
    }
}

#[cfg(test)]
// Reference loops index several arrays at once: clearer as index loops.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};
    use std::collections::HashMap;

    #[test]
    fn transposed_conv_matches_torchs_definition() -> Result<()> {
        let dev = Device::Cpu;
        for (c_in, c_out, k, s) in [(6, 4, 16, 8), (4, 3, 11, 5), (3, 2, 7, 3)] {
            let w = Tensor::randn(0f32, 1.0, (c_in, c_out, k), &dev)?;
            let g = Tensor::ones((c_in, 1, 1), DType::F32, &dev)?;
            let b = Tensor::randn(0f32, 1.0, c_out, &dev)?;
            let ts: HashMap<String, Tensor> = [
                ("parametrizations.weight.original0", g),
                ("parametrizations.weight.original1", w),
                ("bias", b.clone()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let conv = ConvTranspose1d::new(
                VarBuilder::from_tensors(ts, DType::F32, &dev),
                c_in,
                c_out,
                k,
                s,
            )?;
            let x = Tensor::randn(0f32, 1.0, (2, c_in, 9), &dev)?;
            let got = conv.forward(&x)?;
            // torch's definition: y[o, i * s + t - p] += x[c, i] * w[c, o, t], plus the bias.
            let p = (k - s) / 2;
            let l_out = (9 - 1) * s + k - 2 * p;
            let (xv, wv, bv) = (
                x.to_vec3::<f32>()?,
                conv.weight.to_vec3::<f32>()?,
                b.to_vec1::<f32>()?,
            );
            let got = got.to_vec3::<f32>()?;
            for bi in 0..2 {
                for o in 0..c_out {
                    assert_eq!(got[bi][o].len(), l_out);
                    let mut want = vec![bv[o]; l_out];
                    for c in 0..c_in {
                        for i in 0..9 {
                            for t in 0..k {
                                if let Some(j) = (i * s + t).checked_sub(p).filter(|&j| j < l_out) {
                                    want[j] += xv[bi][c][i] * wv[c][o][t];
                                }
                            }
                        }
                    }
                    for (a, w) in got[bi][o].iter().zip(&want) {
                        assert!((a - w).abs() < 1e-4, "{a} vs {w}");
                    }
                }
            }
        }
        Ok(())
    }
}
