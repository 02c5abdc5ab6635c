//! `SineGen` (hifigan.py, upstream 5de7a54) on CUDA in two kernels: the per-frame phase starts
//! (one thread per harmonic row, a sequential f64 sum) and every output sample in one pass.
//! Same operations as the candle path of `sine_gen.rs` in the same order and precision (f64
//! phase, rounded once to f32; `sinf`; no contraction), where candle ran ~15 passes over the
//! `(B, H, N)` samples plus a log-step scan of ~30 small kernels: 0.65 ms per 20 s of audio on
//! the H100 (ncu) for the whole generator.
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, CustomOp3, DType, Layout, Shape, Tensor};
use chatterbox_cuda::{contiguous_view, Ptx};

const SOURCE: &str = include_str!("cuda_sine.cu");

pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "HiFT sine source kernels");

/// The generator's constants.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SineParams {
    pub harmonics: usize,
    pub upsample: usize,
    pub sampling_rate: f32,
    pub sine_amp: f32,
    pub noise_std: f32,
    pub voiced_threshold: f32,
}

struct SineOp(SineParams);

impl CustomOp3 for SineOp {
    chatterbox_cuda::cuda_only_op!(3, "hift-sine", " (the CPU runs candle ops)");

    fn cuda_fwd(
        &self,
        f0: &CudaStorage,
        f0l: &Layout,
        phase: &CudaStorage,
        phl: &Layout,
        noise: &CudaStorage,
        nl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let p = self.0;
        let (b, t) = f0l.shape().dims2()?;
        let (h, u) = (p.harmonics, p.upsample);
        let n = b * h * t * u;
        if phl.shape().dims() != [b, h] || nl.shape().dims() != [b, h, t * u] {
            candle_core::bail!(
                "hift-sine: phase {:?} and noise {:?} for f0 {:?}",
                phl.shape(),
                nl.shape(),
                f0l.shape()
            )
        }
        if [b * h, t, u, h].iter().any(|&v| v > u32::MAX as usize) || u == 0 {
            candle_core::bail!("hift-sine: sizes past 32 bits")
        }
        let f0v = contiguous_view::<f32>(f0, f0l, "hift-sine: f0")?;
        let phv = contiguous_view::<f32>(phase, phl, "hift-sine: phase")?;
        let nv = contiguous_view::<f32>(noise, nl, "hift-sine: noise")?;
        let dev: &CudaDevice = &f0.device;
        // SAFETY: the first kernel writes every (row, frame) value of both before the second
        // reads them (same stream).
        let step = unsafe { dev.alloc::<f64>(b * h * t)? };
        let start = unsafe { dev.alloc::<f64>(b * h * t)? };
        let func = PTX.function(dev, "hift_sine_start")?;
        let rows = (b * h) as u32;
        let (h32, t32, u32_) = (h as u32, t as u32, u as u32);
        let mut builder = func.builder();
        builder.arg(&f0v);
        builder.arg(&step);
        builder.arg(&start);
        builder.arg(&rows);
        builder.arg(&h32);
        builder.arg(&t32);
        builder.arg(&u32_);
        builder.arg(&p.sampling_rate);
        let cfg = LaunchConfig {
            grid_dim: ((b * h).div_ceil(32) as u32, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: reads b * t values of f0; writes rows * t values of step and start.
        unsafe { builder.launch(cfg) }.w()?;

        // SAFETY: the kernel writes every one of the n values.
        let out = unsafe { dev.alloc::<f32>(n)? };
        let func = PTX.function(dev, "hift_sine")?;
        let n64 = n as u64;
        let two_pi = (2.0 * std::f64::consts::PI) as f32;
        let unvoiced_amp = p.sine_amp / 3.0;
        let mut builder = func.builder();
        builder.arg(&f0v);
        builder.arg(&step);
        builder.arg(&start);
        builder.arg(&phv);
        builder.arg(&nv);
        builder.arg(&out);
        builder.arg(&n64);
        builder.arg(&h32);
        builder.arg(&t32);
        builder.arg(&u32_);
        builder.arg(&two_pi);
        builder.arg(&p.sine_amp);
        builder.arg(&p.noise_std);
        builder.arg(&unvoiced_amp);
        builder.arg(&p.voiced_threshold);
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(256).clamp(1, 132 * 32) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: reads b * t values of f0, b * h * t of step and start, b * h of phase and
        // the n of noise (shapes checked above); writes the n values of out.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from((b, h, t * u)),
        ))
    }
}

/// Whether the kernels take these operands: f32 and contiguous on a CUDA device.
pub(crate) fn applies(f0: &Tensor, phase: &Tensor, noise: &Tensor) -> bool {
    [f0, phase, noise]
        .iter()
        .all(|x| x.device().is_cuda() && x.dtype() == DType::F32 && x.is_contiguous())
}

/// `(B, H, T * upsample)` sines plus noise for `f0` `(B, T)`, the draws' `phase` `(B, H)` and
/// `noise` `(B, H, T * upsample)`.
pub(crate) fn sines(
    f0: &Tensor,
    phase: &Tensor,
    noise: &Tensor,
    params: SineParams,
) -> candle_core::Result<Tensor> {
    f0.apply_op3_no_bwd(phase, noise, &SineOp(params))
}
