//! `MinPLogitsWarper` and the `top_p = 1` case of `TopPLogitsWarper` (transformers'
//! generation/logits_process.py) as one CUDA kernel each step: softmax, the threshold and the
//! `-inf` fill in one block per row, compiled once per process with NVRTC.
//!
//! ncu on the H100 (English decode step, fused backbone) put candle's row softmax of the 8194
//! speech logits at ~48 us, twice a step (32 threads a row), plus ~10 small kernels for the
//! max, the products, the comparisons and the fills. Here the probabilities are
//! `exp(x - max) * (1 / sum)` as candle's softmax computes them (the sum added in another
//! order), the top probability `1 / sum`.
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, CustomOp1, DType, Layout, Shape, Tensor};
use chatterbox_cuda::{contiguous_view, Ptx};

/// Threads per block (one block per row).
const THREADS: usize = 1024;

const SOURCE: &str = include_str!("cuda_probs_filter.cu");

/// The PTX of [`SOURCE`], compiled on first use.
pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "T3 probability filter kernel");

/// The filter a [`filter`] call applies.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Filter {
    /// `MinPLogitsWarper(min_p)`: drop tokens below `min_p` times the top probability.
    MinP(f32),
    /// Drop tokens of zero probability (`TopPLogitsWarper` with `top_p = 1`).
    Zero,
}

/// Whether [`filter`] takes `scores`: f32 `[rows, cols]` on CUDA, contiguous, and the kernel
/// compiled (a failure is logged once; the caller then runs candle's ops).
pub(crate) fn applies(scores: &Tensor) -> bool {
    let shaped = scores.device().is_cuda()
        && scores.dtype() == DType::F32
        && scores.rank() == 2
        && scores.is_contiguous()
        && scores.elem_count() > 0;
    shaped
        && PTX.available(scores.device(), |e| {
            tracing::warn!("{e}: T3 filters logits with candle's ops")
        })
}

struct Op(Filter);

impl CustomOp1 for Op {
    chatterbox_cuda::cuda_only_op!(1, "t3-probs-filter");

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (rows, cols) = l.shape().dims2()?;
        if rows == 0 || cols == 0 || rows > u32::MAX as usize || cols > u32::MAX as usize {
            candle_core::bail!("t3-probs-filter: scores {:?}", l.shape())
        }
        let x = contiguous_view::<f32>(s, l, "t3-probs-filter: scores")?;
        let dev: &CudaDevice = &s.device;
        let func = PTX.function(dev, "t3_probs_filter")?;
        // SAFETY: every element is written by the kernel below before it is read.
        let out = unsafe { dev.alloc::<f32>(rows * cols)? };
        let (mode, param) = match self.0 {
            Filter::MinP(p) => (0i32, p),
            Filter::Zero => (1i32, 0.0f32),
        };
        let cols32 = cols as u32;
        let mut builder = func.builder();
        builder.arg(&x);
        builder.arg(&out);
        builder.arg(&cols32);
        builder.arg(&mode);
        builder.arg(&param);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one block per row reads and writes its `cols` values.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            l.shape().clone(),
        ))
    }
}

/// `scores` with the tokens `filter` drops set to `-inf` (see [`applies`]).
pub(crate) fn filter(scores: &Tensor, filter: Filter) -> candle_core::Result<Tensor> {
    scores.apply_op1_no_bwd(&Op(filter))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::{MinPLogitsWarper, TopPLogitsWarper};
    use candle_core::Device;

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn cuda_filters_match_the_processors_on_the_cpu() -> crate::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        let (rows, cols) = (2usize, 8194usize);
        // logits with a spread, plus -inf entries (already filtered tokens)
        let mut v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1000) as f32 / 100.0) - 5.0)
            .collect();
        for i in (0..v.len()).step_by(97) {
            v[i] = f32::NEG_INFINITY;
        }
        let cpu = Tensor::from_vec(v, (rows, cols), &Device::Cpu)?;
        let gpu = cpu.to_device(&dev)?;
        for min_p in [0.05f32, 0.5] {
            let want = MinPLogitsWarper::new(min_p, &Device::Cpu)?.process(&cpu)?;
            let got = filter(&gpu, Filter::MinP(min_p))?.to_device(&Device::Cpu)?;
            assert_eq!(
                got.to_vec2::<f32>()?,
                want.to_vec2::<f32>()?,
                "min_p {min_p}"
            );
            let kept = got.to_vec2::<f32>()?[0]
                .iter()
                .filter(|x| x.is_finite())
                .count();
            assert!(kept > 0 && kept < cols, "min_p {min_p}: {kept} kept");
        }
        let want = TopPLogitsWarper::new(1.0, cols, &Device::Cpu)?.process(&cpu)?;
        let got = filter(&gpu, Filter::Zero)?.to_device(&Device::Cpu)?;
        assert_eq!(got.to_vec2::<f32>()?, want.to_vec2::<f32>()?);
        Ok(())
    }
}
