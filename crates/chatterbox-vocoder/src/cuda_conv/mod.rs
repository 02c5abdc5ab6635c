//! HiFT's stride-1 convolutions (hifigan.py's `Conv1d` layers and the `Snake` / leaky ReLU in
//! front of them, upstream 5de7a54) on CUDA: one implicit-GEMM kernel on the tensor cores in
//! split precision ("3xTF32"), with the activation applied once in front and the bias and the
//! residual fused.
//!
//! Each f32 operand is split into `hi` (rounded to TF32's 11 significant bits) and
//! `lo = x - hi` (exact in f32), and `x * w` is summed as `lo_w hi_x + hi_w lo_x + hi_w hi_x`.
//! The main term `hi_w hi_x` runs on a TF32 mma. The two cross terms run together on one f16
//! mma of twice the depth (`[2^11 lo_w, hi_w] . [hi_x; 2^11 lo_x]`): `hi` fits f16's 11 bits
//! exactly, and the `2^11` keeps `lo` in f16's normal range; the TF32 operand carries the same
//! `2^11`, which is taken off, exactly, when the group's sum is added. Values are saturated at
//! f16's largest (65504) in the cross terms only, so an input past it costs precision (down to
//! plain TF32's), never an infinity. The dropped `lo_w lo_x` term and the rounding of the `lo`
//! parts are below 2^-22 of each product. The tensor cores also truncate when they add, each
//! addend aligned to the largest, so each group of 8 input channels is summed from zero there
//! and added to the running sums in f32 (one long tensor-core accumulation was 5.8e-6 of the
//! output's scale off an f64 reference on a 64-channel, 11-tap case; per group it is 2e-7 to
//! 6e-7; strict FP32 is ~1e-7, plain TF32, as PyTorch's cuDNN convolutions run, ~1e-3).
//!
//! Two kernels per convolution, in one of two forms ([`Form`]) with the same arithmetic in the
//! same order (their outputs are equal to the bit). A split kernel applies the activation once
//! and writes the input split and laid out for the tensor cores (4 floats per value: 2x the
//! input). The convolution computes 64 output channels x 128 time steps per block: for each
//! group of 8 input channels, `cp.async` copies the window (128 steps plus the kernel's
//! dilated reach) and the block's weights for that group into shared memory, two to four
//! groups ahead, and every tap runs from there: no im2col, and no global loads between the
//! barriers. The weights are split and laid out once, at load time (`weight_fragments`).
//! - `kernel_sm90.cu` (Hopper, sm_90a): one warpgroup per block issues, per group, the TF32 and
//!   the f16 `wgmma` of every tap on operands read straight from shared memory (K-major core
//!   matrices, no swizzle; a tap is the window's descriptor moved by `j * dilation` rows), then
//!   waits once and adds the group's sum. Up to three blocks share a multiprocessor.
//! - `kernel.cu` (sm_80 and newer): 8 warps of 32 x 32 load mma.sync fragments from shared
//!   memory; two blocks per multiprocessor.
//!
//! One launch takes up to three independent convolutions ([`forward_group`]), each with its
//! own sizes, so that one's blocks fill the last wave of another's. The epilogue adds the bias
//! and the residual (all of a thread's residual loads in flight before its first store).
//!
//! On the H100 (20 s of audio, `cargo xtask bench vocoder`): decode 19.4 ms with the window
//! staged (activation and split) by the convolution itself and the weights read through L1,
//! 17.3 with the split kernel and the window by `cp.async`, 14.5 with the weights staged too.
//! Grouping HiFT's three resblocks took the 4 s inference from 6.6 to 5.2 ms. The wgmma form
//! took the convolutions of a 20 s decode from 8.8 to 6.4 ms (CUDA events around each launch,
//! the same binary), the inference from 12.6 to 10.6 ms.
mod launch;

use crate::weight_fragments::{self, Form, BK, BM};
use candle_core::cuda_backend::cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_DYNAMIC_SHARED_SIZE_BYTES;
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{DType, Device, Tensor};
use chatterbox_cuda::Ptx;
use std::sync::OnceLock;

/// Time steps per block (must match `common.cuh`; the channel tiles `BM`, `BK` are
/// `weight_fragments`').
const BN: usize = 128;
/// Threads per block of the split kernels.
const SPLIT_THREADS: usize = 256;

/// The kernels of one [`Form`] and how they are launched.
#[derive(Debug)]
struct Kernels {
    ptx: &'static Ptx,
    split: &'static str,
    /// Rows of the split kernel's grid per group of 8 input channels, and its threads per
    /// time step.
    split_rows: usize,
    split_per_step: usize,
    /// Threads per block of the convolution.
    threads: usize,
    /// The convolution kernel for 2, 3 and 4 channel groups in flight.
    conv: [&'static str; 3],
    /// Blocks per multiprocessor that the groups in flight are picked for.
    blocks_per_sm: usize,
}

const MMA: Kernels = Kernels {
    ptx: &PTX_MMA,
    split: "hift_act_split",
    split_rows: 4,
    split_per_step: 1,
    threads: 256,
    // one kernel: each problem of a launch keeps its own groups in flight
    conv: ["hift_conv_group"; 3],
    blocks_per_sm: 2,
};

const WGMMA: Kernels = Kernels {
    ptx: &PTX_WGMMA,
    split: "hift_act_split_wg",
    split_rows: 1,
    split_per_step: 2,
    threads: 128,
    // one kernel per count: a launch's problems keep the fewest of theirs
    conv: ["hift_conv_wg2", "hift_conv_wg3", "hift_conv_wg4"],
    blocks_per_sm: 3,
};

fn kernels(form: Form) -> &'static Kernels {
    match form {
        Form::Mma => &MMA,
        Form::Wgmma => &WGMMA,
    }
}

/// The channel groups in flight the kernels can keep (`NS` in the sources), most first.
const STEPS: [usize; 3] = [4, 3, 2];

/// Shared memory of one group in flight, in bytes: the window and the block's weights.
fn step_bytes(k: usize, dilation: usize) -> usize {
    (4 * xs_stride(BN + (k - 1) * dilation) + k * (BM / 16) * 64) * 16
}

/// The groups in flight for `k` taps at `dilation`: the most that still let `blocks`
/// blocks share a multiprocessor, else two (`None` if two do not fit a block).
fn pick_steps(
    k: usize,
    dilation: usize,
    (per_block, per_sm): (usize, usize),
    blocks: usize,
) -> Option<usize> {
    let step = step_bytes(k, dilation);
    let fits = |ns: usize| ns * step <= per_block;
    // (the driver reserves 1 KiB of a multiprocessor's shared memory per block)
    let shared = |ns: usize| blocks * (ns * step + 1024) <= per_sm;
    STEPS
        .into_iter()
        .find(|&ns| fits(ns) && shared(ns))
        .or_else(|| Some(2).filter(|&ns| fits(ns)))
}

/// The staged window's row stride (in float4) for `span` steps: the next one that is 2 mod 8,
/// which keeps the mma.sync fragment loads free of bank conflicts.
fn xs_stride(span: usize) -> usize {
    (span + 6).next_multiple_of(8) - 6
}

// mma.sync on TF32 needs sm_80 or newer; the driver JIT-compiles this for the GPU.
pub(crate) static PTX_MMA: Ptx = Ptx::new(
    concat!(include_str!("common.cuh"), include_str!("kernel.cu")),
    Some("compute_80"),
    "HiFT convolution kernel",
);

// wgmma exists on sm_90a only (Hopper; not its successors).
pub(crate) static PTX_WGMMA: Ptx = Ptx::new(
    concat!(include_str!("common.cuh"), include_str!("kernel_sm90.cu")),
    Some("compute_90a"),
    "HiFT convolution kernel (wgmma)",
);

/// Where the kernel runs, read once from `CHATTERBOX_HIFT_CONV`: unset (or `auto`) on every
/// convolution long enough to fill the GPU, `fp32` nowhere (strict FP32 GEMMs throughout),
/// `tf32x3` on every stride-1 f32 convolution whatever its size (the GPU parity check uses it
/// on the tiny fixtures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Auto,
    Fp32,
    Always,
}

fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("CHATTERBOX_HIFT_CONV").as_deref() {
        Ok("fp32") => Mode::Fp32,
        Ok("tf32x3") => Mode::Always,
        Ok("auto") | Err(_) => Mode::Auto,
        Ok(other) => {
            tracing::warn!("CHATTERBOX_HIFT_CONV={other:?} is not auto, fp32 or tf32x3: auto");
            Mode::Auto
        }
    })
}

/// The activation the kernel applies to the input first.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PreAct<'a> {
    Identity,
    /// `(alpha, 1 / (alpha + 1e-9))`, `C_in` values each, on the device.
    Snake(&'a Tensor, &'a Tensor),
    LeakyRelu(f32),
}

/// A stride-1 `Conv1d` (weight `(C_out, C_in, K)` and bias) laid out for the kernel: the
/// split weight as mma fragments, per (group of 8 input channels, tap, 16 output channels,
/// lane) the TF32 fragment of `2^11 hi` and the f16 fragment of `[2^11 lo, hi]`, with zeros
/// past `C_in` and `C_out`.
#[derive(Debug, Clone)]
pub(crate) struct Tf32x3Conv {
    w: Tensor,
    bias: Tensor,
    c_in: usize,
    c_out: usize,
    c_out_pad: usize,
    k: usize,
    padding: usize,
    dilation: usize,
    /// The GPU's multiprocessors.
    sms: usize,
    /// The channel groups in flight the kernel takes for this size (alone).
    steps: usize,
    form: Form,
}

impl Tf32x3Conv {
    /// Lays out `weight` (f32, on a CUDA device with tensor cores) once, for the wgmma kernel
    /// on Hopper (the mma.sync one where that kernel cannot be compiled or loaded) and the
    /// mma.sync one on other GPUs; `None` for other devices, dtypes or GPUs older than sm_80.
    pub fn new(
        weight: &Tensor,
        bias: &Tensor,
        padding: usize,
        dilation: usize,
    ) -> candle_core::Result<Option<Self>> {
        let Device::Cuda(dev) = weight.device() else {
            return Ok(None);
        };
        let form = if chatterbox_cuda::compute_capability(dev)?.0 == 9 && wgmma_loads(dev) {
            Form::Wgmma
        } else {
            Form::Mma
        };
        Self::with_form(weight, bias, padding, dilation, form)
    }

    /// [`Self::new`] for the kernel `form` (which the GPU must support).
    fn with_form(
        weight: &Tensor,
        bias: &Tensor,
        padding: usize,
        dilation: usize,
        form: Form,
    ) -> candle_core::Result<Option<Self>> {
        let Device::Cuda(dev) = weight.device() else {
            return Ok(None);
        };
        let (c_out, c_in, k) = weight.dims3()?;
        if weight.dtype() != DType::F32 || bias.dtype() != DType::F32 {
            return Ok(None);
        }
        let Some(sms) = tensor_core_sms(dev)? else {
            return Ok(None);
        };
        // two groups in flight must fit the shared memory of a block
        let shared = chatterbox_cuda::shared_memory(dev)?;
        let kern = kernels(form);
        let Some(steps) = pick_steps(k, dilation, shared, kern.blocks_per_sm) else {
            return Ok(None);
        };
        // the kernels may take the most shared memory a block may have (a launch sets what it
        // uses, for the widest convolution of its group)
        for name in kern.conv {
            let func = kern.ptx.function(dev, name)?;
            func.set_attribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, shared.0 as i32)
                .w()?;
        }
        let c_out_pad = c_out.next_multiple_of(BM);
        let src = weight.flatten_all()?.to_vec1::<f32>()?;
        let w = weight_fragments::layout(form, &src, c_out, c_in, k);
        let len = w.len();
        Ok(Some(Self {
            w: Tensor::from_vec(w, len, weight.device())?,
            bias: bias.flatten_all()?.contiguous()?,
            c_in,
            c_out,
            c_out_pad,
            k,
            padding,
            dilation,
            sms,
            steps,
            form,
        }))
    }

    /// Output samples for `t` input samples (`None` when the input is too short).
    fn len_out(&self, t: usize) -> Option<usize> {
        (t + 2 * self.padding)
            .checked_sub(self.dilation * (self.k - 1))
            .filter(|&n| n > 0)
    }

    /// Whether [`Self::forward`] takes `x`: f32, contiguous `(B, C_in, T)` on the weight's
    /// device, long enough to give every multiprocessor a block (below that cuBLAS's FP32
    /// GEMMs, which split smaller problems further, are faster).
    pub fn applies(&self, x: &Tensor) -> bool {
        self.applies_in_group(x, 1)
    }

    /// [`Self::applies`] for a launch with `count` convolutions of this size.
    pub fn applies_in_group(&self, x: &Tensor, count: usize) -> bool {
        let Ok((b, _, t)) = x.dims3() else {
            return false;
        };
        let t_out = self.len_out(t).unwrap_or(0);
        let fills = count * b * t_out.div_ceil(BN) * self.c_out.div_ceil(BM) >= self.sms;
        x.dtype() == DType::F32
            && x.is_contiguous()
            && x.device().same_device(self.w.device())
            && match mode() {
                Mode::Auto => fills,
                Mode::Fp32 => false,
                Mode::Always => true,
            }
    }

    /// `conv1d(act(x)) + bias` and the epilogue's additions: `(B, C_in, T)` in,
    /// `(B, C_out, T_out)` out.
    pub fn forward(&self, x: &Tensor, act: PreAct, epi: Epilogue) -> candle_core::Result<Tensor> {
        let item = GroupItem {
            conv: self,
            x,
            act,
            epi,
        };
        let mut out = forward_group(&[item])?;
        out.pop()
            .ok_or_else(|| candle_core::Error::Msg("hift conv1d: no output".into()))
    }

    /// `x`'s output length, checked with the epilogue's operands and the activation's.
    fn check(&self, item: &GroupItem) -> candle_core::Result<usize> {
        let (b, c, t) = item.x.dims3()?;
        if c != self.c_in {
            candle_core::bail!("hift conv1d: {c} input channels, expected {}", self.c_in)
        }
        let Some(t_out) = self.len_out(t) else {
            candle_core::bail!("hift conv1d: input of {t} samples is too short")
        };
        if let Some(r) = item.epi.residual {
            if r.dims() != [b, self.c_out, t_out] || !r.is_contiguous() || r.dtype() != DType::F32 {
                candle_core::bail!(
                    "hift conv1d: a residual {:?} for an output ({b}, {}, {t_out})",
                    r.dims(),
                    self.c_out
                )
            }
        }
        Ok(t_out)
    }
}

/// One convolution of a group: `conv(act(x)) + bias` and the epilogue's additions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupItem<'a> {
    pub conv: &'a Tf32x3Conv,
    pub x: &'a Tensor,
    pub act: PreAct<'a>,
    pub epi: Epilogue<'a>,
}

/// The most convolutions one launch takes (`MAX_GROUP` in the source).
pub(crate) const MAX_GROUP: usize = 3;

/// Up to [`MAX_GROUP`] independent convolutions (on one device) in one launch of the kernel, so
/// that one's blocks fill the last, partial wave of another's: HiFT's three resblocks of a
/// stage read the same input. Each input is split first (one `hift_act_split` each). The
/// outputs are in `items`' order.
pub(crate) fn forward_group(items: &[GroupItem]) -> candle_core::Result<Vec<Tensor>> {
    if items.is_empty() || items.len() > MAX_GROUP {
        candle_core::bail!("hift conv1d: a group of {} convolutions", items.len())
    }
    let mut parts = Vec::with_capacity(items.len());
    for item in items {
        let t_out = item.conv.check(item)?;
        let (b, _, t) = item.x.dims3()?;
        let act = launch::ActArgs::new(item.act, item.conv.c_in)?;
        let xs = launch::split(item.x, act, item.conv.form)?;
        parts.push(launch::Part {
            conv: item.conv,
            xs,
            b,
            t,
            t_out,
            epi: item.epi,
        });
    }
    launch::conv_group(&parts)
}

/// Whether the wgmma kernels compile (NVRTC, for sm_90a) and load (the driver) on `dev`; an
/// older toolkit or driver falls back to the mma.sync kernel, with one warning.
fn wgmma_loads(dev: &CudaDevice) -> bool {
    let load = || -> candle_core::Result<()> {
        for name in WGMMA.conv {
            WGMMA.ptx.function(dev, name)?;
        }
        Ok(())
    };
    load()
        .inspect_err(|e| {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| tracing::warn!("HiFT: no wgmma convolution ({e}); using mma.sync"));
        })
        .is_ok()
}

/// The multiprocessor count of `dev` if it has TF32 tensor cores (compute capability 8.0 or
/// newer).
fn tensor_core_sms(dev: &CudaDevice) -> candle_core::Result<Option<usize>> {
    let major = chatterbox_cuda::compute_capability(dev)?.0;
    (major >= 8)
        .then(|| chatterbox_cuda::multiprocessors(dev))
        .transpose()
}

/// What the kernel adds to `conv + bias` (after it, as the reference's separate ops).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Epilogue<'a> {
    pub residual: Option<&'a Tensor>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_most_groups_in_flight_that_fit() {
        // H100: 227 KiB per block, 228 KiB per multiprocessor
        let h100 = (232_448, 233_472);
        // 11 taps at dilation 5: a 178-step window (11.1 KiB) and 44 KiB of weights per group
        assert_eq!(step_bytes(11, 5), (4 * 178 + 11 * 256) * 16);
        assert_eq!(pick_steps(11, 5, h100, 2), Some(2));
        assert_eq!(pick_steps(3, 1, h100, 2), Some(4));
        assert_eq!(pick_steps(7, 1, h100, 2), Some(3));
        // three blocks (wgmma): 3 x 4 x 21 KiB do not fit, 3 x 3 do
        assert_eq!(step_bytes(3, 1), (4 * 130 + 3 * 256) * 16);
        assert_eq!(pick_steps(3, 1, h100, 3), Some(3));
        assert_eq!(pick_steps(7, 3, h100, 3), Some(2));
        // one block per multiprocessor when two do not fit; none past a block's limit
        let small = (120_000, 150_000);
        assert_eq!(pick_steps(11, 5, small, 2), Some(2));
        assert_eq!(pick_steps(11, 5, (48 * 1024, 100_000), 2), None);
    }

    /// The kernel forms `dev` runs: mma.sync, and wgmma on Hopper.
    fn forms(dev: &Device) -> candle_core::Result<Vec<Form>> {
        let Device::Cuda(cuda) = dev else {
            candle_core::bail!("not a CUDA device")
        };
        Ok(match chatterbox_cuda::compute_capability(cuda)?.0 {
            9 => vec![Form::Mma, Form::Wgmma],
            _ => vec![Form::Mma],
        })
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn a_group_matches_each_convolution_alone() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        for form in forms(&dev)? {
            group_matches_alone(&dev, form)?;
        }
        Ok(())
    }

    fn group_matches_alone(dev: &Device, form: Form) -> candle_core::Result<()> {
        let dev = dev.clone();
        // different channels, taps, dilations, lengths and batch sizes in one launch
        let cases = [
            (5, 7, 3, 1, 1, 1001, 2),
            (64, 64, 11, 5, 25, 3000, 1),
            (18, 64, 7, 1, 3, 517, 1),
        ];
        let mut convs = Vec::new();
        let mut inputs = Vec::new();
        let mut residuals = Vec::new();
        for &(c_in, c_out, k, dil, pad, t, b) in &cases {
            let w = Tensor::randn(0f32, 0.3, (c_out, c_in, k), &dev)?;
            let bias = Tensor::randn(0f32, 1.0, c_out, &dev)?;
            convs.push(Tf32x3Conv::with_form(&w, &bias, pad, dil, form)?.expect("cuda f32"));
            inputs.push(Tensor::randn(0f32, 2.0, (b, c_in, t), &dev)?);
            let t_out = t + 2 * pad - dil * (k - 1);
            residuals.push(Tensor::randn(0f32, 1.0, (b, c_out, t_out), &dev)?);
        }
        let alpha = Tensor::rand(0.1f32, 2.0, 64, &dev)?;
        let inv = (alpha.clone() + 1e-9)?.recip()?;
        let acts = [
            PreAct::LeakyRelu(0.1),
            PreAct::Snake(&alpha, &inv),
            PreAct::Identity,
        ];
        let items: Vec<GroupItem> = (0..3)
            .map(|i| GroupItem {
                conv: &convs[i],
                x: &inputs[i],
                act: acts[i],
                epi: Epilogue {
                    residual: (i != 2).then_some(&residuals[i]),
                },
            })
            .collect();
        let grouped = forward_group(&items)?;
        for (item, got) in items.iter().zip(&grouped) {
            let alone = item.conv.forward(item.x, item.act, item.epi)?;
            assert_eq!(got.dims(), alone.dims());
            let diff = (got - alone)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert_eq!(diff, 0.0);
        }
        assert!(forward_group(&[]).is_err());
        assert!(forward_group(&[items[0]; 4]).is_err());
        Ok(())
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn matches_an_f64_convolution() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        for form in forms(&dev)? {
            matches_f64(&dev, form)?;
        }
        Ok(())
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn both_forms_agree_exactly() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        if forms(&dev)?.len() < 2 {
            return Ok(());
        }
        // the tensor cores sum each group in the same order in either form
        for (c_in, c_out, k, pad, dil, t) in [(13, 70, 7, 9, 3, 2001), (256, 256, 11, 25, 5, 900)] {
            let x = Tensor::randn(0f32, 2.0, (2, c_in, t), &dev)?;
            let w = Tensor::randn(0f32, 0.3, (c_out, c_in, k), &dev)?;
            let bias = Tensor::randn(0f32, 1.0, c_out, &dev)?;
            let y = |form| -> candle_core::Result<Tensor> {
                let conv = Tf32x3Conv::with_form(&w, &bias, pad, dil, form)?.expect("cuda f32");
                conv.forward(&x, PreAct::LeakyRelu(0.1), Epilogue::default())
            };
            let diff = (y(Form::Mma)? - y(Form::Wgmma)?)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert_eq!(diff, 0.0, "{c_in} x {k}");
        }
        Ok(())
    }

    fn matches_f64(dev: &Device, form: Form) -> candle_core::Result<()> {
        let dev = dev.clone();
        for (c_in, c_out, k, pad, dil, t) in [
            (5, 7, 3, 3, 3, 1001),
            (64, 64, 11, 25, 5, 3000),
            (18, 64, 7, 3, 1, 517),
        ] {
            let x = (Tensor::randn(0f32, 2.0, (2, c_in, t), &dev)? * 3.0)?;
            let w = Tensor::randn(0f32, 0.3, (c_out, c_in, k), &dev)?;
            let bias = Tensor::randn(0f32, 1.0, c_out, &dev)?;
            let conv = Tf32x3Conv::with_form(&w, &bias, pad, dil, form)?.expect("cuda f32");
            let cpu64 = |t: &Tensor| t.to_dtype(DType::F64)?.to_device(&Device::Cpu);
            let w64 = cpu64(&w)?;
            let bias3 = bias.reshape((1, c_out, 1))?;
            // max |kernel(x) - conv_f64(act(x))| relative to the output's scale
            let rel_err = |pre: PreAct, activated: &Tensor| -> candle_core::Result<f64> {
                let got = conv
                    .forward(&x, pre, Epilogue::default())?
                    .broadcast_sub(&bias3)?;
                let want = cpu64(activated)?.conv1d(&w64, pad, 1, dil, 1)?;
                let scale = want.abs()?.max_all()?.to_scalar::<f64>()?;
                let err = (cpu64(&got)? - &want)?
                    .abs()?
                    .max_all()?
                    .to_scalar::<f64>()?;
                Ok(err / scale)
            };
            let err = rel_err(PreAct::Identity, &x)?;
            eprintln!("{form:?} {c_in}x{k}: max error {err:e} of the scale");
            // strict f32 is ~1e-7 of the scale here; plain TF32 ~1e-3
            assert!(err <= 1e-6, "{c_in}x{k}: {err} of the scale");

            // the fused activations against candle's on the same input
            let alpha = Tensor::rand(0.1f32, 2.0, (1, c_in, 1), &dev)?;
            let inv = (alpha.clone() + 1e-9)?.recip()?;
            let snaked = crate::cuda_glue::snake(&x, &alpha, &inv)?;
            let leaky = crate::conv::leaky_relu(&x, 0.1)?;
            for (pre, xa) in [
                (PreAct::Snake(&alpha, &inv), snaked),
                (PreAct::LeakyRelu(0.1), leaky),
            ] {
                let err = rel_err(pre, &xa)?;
                assert!(err <= 1e-6, "{pre:?}: {err} of the scale");
            }

            // the residual is added after the bias, as `(conv + bias) + residual`
            let plain = conv.forward(&x, PreAct::Identity, Epilogue::default())?;
            let r = Tensor::randn(0f32, 1.0, plain.dims(), &dev)?;
            let epi = |residual| Epilogue { residual };
            let max_diff = |a: Tensor, b: Tensor| -> candle_core::Result<f32> {
                (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
            };
            let fused = conv.forward(&x, PreAct::Identity, epi(Some(&r)))?;
            assert_eq!(max_diff(fused, (&plain + &r)?)?, 0.0);
            let bad = epi(Some(&x));
            assert!(conv.forward(&x, PreAct::Identity, bad).is_err() || c_in == c_out);
        }
        Ok(())
    }
}
