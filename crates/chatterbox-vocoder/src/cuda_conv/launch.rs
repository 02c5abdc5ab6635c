//! The launches of `kernel.cu` and `kernel_sm90.cu` (hifigan.py's `Conv1d` and the activation
//! in front of it): the split kernel for one input, and one convolution kernel for a group of
//! split inputs.
use super::{
    kernels, step_bytes, xs_stride, Epilogue, PreAct, Tf32x3Conv, BK, BM, BN, MAX_GROUP,
    SPLIT_THREADS,
};
use crate::weight_fragments::Form;
use candle_core::cuda_backend::cudarc::driver::{
    CudaView, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, CustomOp1, DType, Layout, Shape, Storage, Tensor};

/// The f32 values of a contiguous CUDA operand.
fn view<'a>(s: &'a Storage, l: &Layout, what: &str) -> candle_core::Result<CudaView<'a, f32>> {
    match s {
        Storage::Cuda(c) => crate::cuda::f32_view(c, l, what),
        _ => candle_core::bail!("hift conv1d: the {what} must be on the CUDA device"),
    }
}

/// An activation as the split kernel takes it: a code (0 none, 1 Snake, 2 leaky ReLU), the
/// Snake's `(alpha, 1 / alpha)` and the slope.
#[derive(Debug, Clone, Copy)]
pub(super) struct ActArgs<'a> {
    code: i32,
    snake: Option<(&'a Tensor, &'a Tensor)>,
    slope: f32,
}

impl<'a> ActArgs<'a> {
    /// Checks the Snake's parameters against `c` channels.
    pub fn new(act: PreAct<'a>, c: usize) -> candle_core::Result<Self> {
        let (code, snake, slope) = match act {
            PreAct::Identity => (0, None, 0.0),
            PreAct::Snake(alpha, inv) => (1, Some((alpha, inv)), 0.0),
            PreAct::LeakyRelu(slope) => (2, None, slope),
        };
        if let Some((a, i)) = snake {
            let ok =
                |p: &Tensor| p.elem_count() == c && p.is_contiguous() && p.dtype() == DType::F32;
            if !ok(a) || !ok(i) {
                candle_core::bail!("hift conv1d: Snake parameters for {c} channels expected")
            }
        }
        Ok(Self { code, snake, slope })
    }
}

/// The split kernel of `form` over `(B, C, T)` `x`: `B * ceil(C / 8) * 4 * T * 4` floats.
pub(super) fn split(x: &Tensor, act: ActArgs, form: Form) -> candle_core::Result<Tensor> {
    x.apply_op1_no_bwd(&SplitOp(act, form))
}

struct SplitOp<'a>(ActArgs<'a>, Form);

impl CustomOp1 for SplitOp<'_> {
    chatterbox_cuda::cuda_only_op!(1, "hift-act-split");

    fn cuda_fwd(&self, x: &CudaStorage, xl: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (b, c, t) = xl.shape().dims3()?;
        let chunks = c.div_ceil(BK);
        let n = b * chunks * 4 * t * 4;
        if n > i32::MAX as usize || b > 65535 || chunks * 4 > 65535 {
            candle_core::bail!("hift conv1d: an input of {c} x {t} samples is too large")
        }
        let xv = crate::cuda::f32_view(x, xl, "input")?;
        let dev: &CudaDevice = &x.device;
        // The Snake's parameters (else the input stands in: the kernel never reads them).
        let snake = self
            .0
            .snake
            .map(|(a, i)| (a.storage_and_layout(), i.storage_and_layout()));
        let params = match &snake {
            Some(((ps, pl), (qs, ql))) => Some((
                view(ps, pl, "Snake alpha")?,
                view(qs, ql, "Snake 1 / alpha")?,
            )),
            None => None,
        };
        // SAFETY: the split kernel writes every value.
        let xs = unsafe { dev.alloc::<f32>(n)? };
        let kern = kernels(self.1);
        let func = kern.ptx.function(dev, kern.split)?;
        let (c_in, t_i) = (c as i32, t as i32);
        let mut builder = func.builder();
        builder.arg(&xv);
        match &params {
            Some((a, i)) => {
                builder.arg(a);
                builder.arg(i);
            }
            None => {
                builder.arg(&xv);
                builder.arg(&xv);
            }
        }
        builder.arg(&xs);
        builder.arg(&c_in);
        builder.arg(&t_i);
        builder.arg(&self.0.code);
        builder.arg(&self.0.slope);
        let cfg = LaunchConfig {
            grid_dim: (
                (t * kern.split_per_step).div_ceil(SPLIT_THREADS) as u32,
                (chunks * kern.split_rows) as u32,
                b as u32,
            ),
            block_dim: (SPLIT_THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: reads `x` (b * c * t values, channels past c skipped) and `c` Snake
        // parameters when code == 1 (checked in `ActArgs::new`); writes `xs` at
        // b * chunks * 4 * t float4, its whole length.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(xs, dev.clone()),
            Shape::from(n),
        ))
    }
}

/// One convolution of a launch: its split input (from [`split`]) and sizes.
pub(super) struct Part<'a> {
    pub conv: &'a Tf32x3Conv,
    pub xs: Tensor,
    pub b: usize,
    pub t: usize,
    pub t_out: usize,
    pub epi: Epilogue<'a>,
}

/// `ConvProblem` of the source (same fields, same order, same layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct ConvProblem {
    xs: u64,
    wf: u64,
    bias: u64,
    res: u64,
    y: u64,
    chunks: i32,
    c_out: i32,
    m_tiles: i32,
    k: i32,
    t_in: i32,
    t_out: i32,
    dil: i32,
    pad: i32,
    has_res: i32,
    xs_stride: i32,
    t_blocks: i32,
    o_blocks: i32,
    first: i32,
    steps: i32,
}

// The kernel reads the parameter with the C layout of `kernel.cu`: 5 pointers and 14 ints.
const _: () = assert!(std::mem::size_of::<ConvProblem>() == 96);

/// `ConvGroup` of the source.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct ConvGroup {
    p: [ConvProblem; MAX_GROUP],
    count: i32,
}

// SAFETY: plain data of the kernel parameter's layout (pointers as u64).
unsafe impl DeviceRepr for ConvGroup {}

/// The outputs' offsets in one buffer (each rounded up to 64 floats).
fn offsets(parts: &[Part]) -> (Vec<usize>, usize) {
    let mut at = Vec::with_capacity(parts.len());
    let mut total = 0;
    for p in parts {
        at.push(total);
        total += (p.b * p.conv.c_out * p.t_out).next_multiple_of(64);
    }
    (at, total)
}

/// Launches the convolution kernel over `parts` (1 to [`MAX_GROUP`], each checked by the
/// caller) and returns their `(B, C_out, T_out)` outputs.
pub(super) fn conv_group(parts: &[Part]) -> candle_core::Result<Vec<Tensor>> {
    let all = parts[0].xs.apply_op1_no_bwd(&GroupOp { parts })?;
    let (at, _) = offsets(parts);
    parts
        .iter()
        .zip(at)
        .map(|(p, at)| {
            all.narrow(0, at, p.b * p.conv.c_out * p.t_out)?
                .reshape((p.b, p.conv.c_out, p.t_out))
        })
        .collect()
}

struct GroupOp<'a, 'b> {
    parts: &'b [Part<'a>],
}

impl CustomOp1 for GroupOp<'_, '_> {
    chatterbox_cuda::cuda_only_op!(1, "hift-conv1d-tf32x3", " (the CPU has its own kernel)");

    fn cuda_fwd(&self, x0: &CudaStorage, _: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev: &CudaDevice = &x0.device;
        let stream = dev.cuda_stream();
        let parts = self.parts;
        let form = parts[0].conv.form;
        if parts.iter().any(|p| p.conv.form != form) {
            candle_core::bail!("hift conv1d: a group of convolutions for different kernels")
        }
        let kern = kernels(form);
        // mma.sync: each part with its own groups in flight, in the largest shared memory of
        // them; wgmma: the fewest groups in flight of the parts
        let fewest = parts.iter().map(|p| p.conv.steps).min().unwrap_or(2);
        let smem = parts
            .iter()
            .map(|p| {
                let steps = if form == Form::Wgmma {
                    fewest
                } else {
                    p.conv.steps
                };
                steps * step_bytes(p.conv.k, p.conv.dilation)
            })
            .max()
            .unwrap_or(0);
        let (at, total) = offsets(parts);
        if total > i32::MAX as usize {
            candle_core::bail!("hift conv1d: sizes past 31 bits")
        }
        // SAFETY: the kernel writes every value of each part's output; the padding between
        // them is never read (the outputs are narrowed views).
        let mut out = unsafe { dev.alloc::<f32>(total)? };
        let (out_ptr, out_guard) = out.device_ptr_mut(&stream);
        let mut group = ConvGroup {
            count: parts.len() as i32,
            ..Default::default()
        };
        // Each problem's sizes and first block, then its operands' device pointers (the
        // storages, views and read records stay alive until the launch is queued).
        let mut storages = Vec::with_capacity(parts.len());
        let mut blocks = 0usize;
        for (i, p) in parts.iter().enumerate() {
            let cv = p.conv;
            let chunks = cv.c_in.div_ceil(BK);
            if p.xs.elem_count() != p.b * chunks * 4 * p.t * 4 {
                candle_core::bail!("hift conv1d: a split input of {} values", p.xs.elem_count())
            }
            let (t_blocks, o_blocks) = (p.t_out.div_ceil(BN), cv.c_out.div_ceil(BM));
            let first = blocks;
            blocks += t_blocks * o_blocks * p.b;
            if [p.b * chunks * 4 * p.t * 4, p.t + 2 * cv.padding, blocks]
                .iter()
                .any(|&v| v > i32::MAX as usize)
            {
                candle_core::bail!("hift conv1d: sizes past 31 bits")
            }
            group.p[i] = ConvProblem {
                y: out_ptr + (at[i] * std::mem::size_of::<f32>()) as u64,
                chunks: chunks as i32,
                c_out: cv.c_out as i32,
                m_tiles: (cv.c_out_pad / 16) as i32,
                k: cv.k as i32,
                t_in: p.t as i32,
                t_out: p.t_out as i32,
                dil: cv.dilation as i32,
                pad: cv.padding as i32,
                has_res: p.epi.residual.is_some() as i32,
                xs_stride: xs_stride(BN + (cv.k - 1) * cv.dilation) as i32,
                t_blocks: t_blocks as i32,
                o_blocks: o_blocks as i32,
                first: first as i32,
                steps: cv.steps as i32,
                ..Default::default()
            };
            // the bias stands in for an absent residual: the kernel never reads it
            storages.push([
                p.xs.storage_and_layout(),
                cv.w.storage_and_layout(),
                cv.bias.storage_and_layout(),
                p.epi.residual.unwrap_or(&cv.bias).storage_and_layout(),
            ]);
        }
        const WHAT: [&str; 4] = ["split input", "weight", "bias", "residual"];
        let views = storages
            .iter()
            .map(|ops| {
                ops.iter()
                    .zip(WHAT)
                    .map(|((s, l), what)| view(s, l, what))
                    .collect::<candle_core::Result<Vec<_>>>()
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let mut guards = Vec::with_capacity(4 * parts.len());
        for (problem, views) in group.p.iter_mut().zip(&views) {
            let mut ptrs = [0u64; 4];
            for (ptr, v) in ptrs.iter_mut().zip(views) {
                let (d, g) = v.device_ptr(&stream);
                *ptr = d;
                guards.push(g);
            }
            [problem.xs, problem.wf, problem.bias, problem.res] = ptrs;
        }
        let name = kern.conv[fewest.clamp(2, 4) - 2];
        let func = kern.ptx.function(dev, name)?;
        let mut builder = func.builder();
        builder.arg(&group);
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (kern.threads as u32, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        // SAFETY: for each problem the kernel reads its split input (b * chunks * 4 * t
        // float4, checked above; out-of-range steps are zero-filled, not read), its weight
        // fragments (chunks * k * m_tiles * 64 float4: a block reads the 1024 floats per
        // group and tap of its 64 output channels, inside c_out_pad), c_out biases, and the
        // residual (b * c_out * t_out, checked by the caller) when has_res; it writes its
        // output inside the b * c_out * t_out floats at its offset of `out`. The blocks
        // numbered from `first` cover exactly t_blocks * o_blocks * b per problem; the shared
        // memory holds each problem's `steps` groups (mma.sync) or `fewest` (wgmma), and the
        // wgmma kernel is the one for `fewest`.
        unsafe { builder.launch(cfg) }.w()?;
        drop(guards);
        drop(out_guard);
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from(total),
        ))
    }
}
