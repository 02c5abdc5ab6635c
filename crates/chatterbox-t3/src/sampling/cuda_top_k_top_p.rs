//! Turbo's top-k followed by top-p as one CUDA kernel (one block per row), compiled once per
//! process with NVRTC: the same filter as [`TopKLogitsWarper::then_top_p`] without a sort.
//!
//! ncu on the H100 put the arg-sort (candle's one-block bitonic sort over 8192 padded slots)
//! at ~0.16 ms of Turbo's ~1.7 ms step, plus ~17 small kernels around it. Here:
//! - the k-th largest score is found by a radix select (four 8-bit passes of integer counts
//!   on order-preserving keys), exactly;
//! - top-p keeps the tokens scoring at least the smallest kept score `u` whose probability
//!   mass at or below it exceeds `1 - top_p`, found bit by bit (32 block sums). In exact
//!   arithmetic that is the sorted cumulative-sum rule of transformers' `TopPLogitsWarper`
//!   (ties handled as [`TopPLogitsWarper`] does); the sums are added in another order, so a
//!   token within float rounding of the boundary may fall the other way.
//!
//! Every reduction runs in a fixed order: a seed reproduces a run.
//!
//! [`TopKLogitsWarper::then_top_p`]: super::TopKLogitsWarper::then_top_p
//! [`TopPLogitsWarper`]: super::TopPLogitsWarper
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, CustomOp1, DType, Layout, Shape, Tensor};
use chatterbox_cuda::Ptx;

/// Threads per block (one block per row).
const THREADS: usize = 1024;
/// Scores each thread keeps in registers: rows of at most `THREADS * PER` values.
const PER: usize = 8;

const SOURCE: &str = include_str!("cuda_top_k_top_p.cu");

/// The PTX of [`SOURCE`], compiled on first use.
pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "T3 top-k/top-p kernel");

/// Whether [`top_k_top_p`] takes `scores`: f32 `(rows, vocab)` on CUDA with
/// `vocab <= 8192`.
pub(crate) fn applies(scores: &Tensor) -> bool {
    scores.device().is_cuda()
        && scores.dtype() == DType::F32
        && scores.rank() == 2
        && scores.dims()[1] <= THREADS * PER
}

struct TopKTopP {
    k: usize,
    threshold: f32,
}

impl CustomOp1 for TopKTopP {
    chatterbox_cuda::cuda_only_op!(1, "t3-top-k-top-p");

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (rows, v) = l.shape().dims2()?;
        if v > THREADS * PER || self.k == 0 || self.k > v || rows == 0 {
            candle_core::bail!("t3-top-k-top-p: top-{} of ({rows}, {v})", self.k)
        }
        let Some((a, z)) = l.contiguous_offsets() else {
            candle_core::bail!("t3-top-k-top-p: scores must be contiguous")
        };
        let sv = s.as_cuda_slice::<f32>()?.slice(a..z);
        let dev: &CudaDevice = &s.device;
        let func = PTX.function(dev, "t3_top_k_top_p")?;
        // SAFETY: the kernel writes every element of every row before anything reads them.
        let out = unsafe { dev.alloc::<f32>(rows * v)? };
        let (v32, k32) = (v as u32, self.k as u32);
        let mut builder = func.builder();
        builder.arg(&sv);
        builder.arg(&out);
        builder.arg(&v32);
        builder.arg(&k32);
        builder.arg(&self.threshold);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: block r reads and writes the `v` values of row r of contiguous buffers of
        // `rows * v` values.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from((rows, v)),
        ))
    }
}

/// Top-`k` then top-p with the f32 `threshold` `1 - top_p` (`top_p < 1`); see [`applies`].
pub(crate) fn top_k_top_p(
    scores: &Tensor,
    k: usize,
    threshold: f32,
) -> candle_core::Result<Tensor> {
    scores
        .contiguous()?
        .apply_op1_no_bwd(&TopKTopP { k, threshold })
}

#[cfg(test)]
mod tests {
    use super::super::{TopKLogitsWarper, TopPLogitsWarper};
    use super::*;
    use candle_core::Device;

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn matches_the_sorting_chain() -> crate::Result<()> {
        let gpu = chatterbox_cuda::open(0)?;
        let cpu = Device::Cpu;
        let vocab = 6563;
        let mut kept_total = 0usize;
        for (seed, k, top_p, scale) in [
            (0u64, 1000usize, 0.95f32, 3.0f32),
            (1, 1000, 0.95, 0.3),
            (2, 50, 0.5, 2.0),
            (3, 6563, 0.9, 1.0),
            (4, 1, 0.95, 1.0),
            (5, 200, 0.01, 5.0),
        ] {
            gpu.set_seed(seed)?;
            let scores = (Tensor::randn(0f32, 1.0, (2, vocab), &gpu)? * scale as f64)?;
            let want = TopKLogitsWarper::new(k, vocab, &cpu)?
                .then_top_p(
                    &TopPLogitsWarper::new(top_p, vocab, &cpu)?,
                    &scores.to_device(&cpu)?,
                )?
                .to_vec2::<f32>()?;
            let got = top_k_top_p(&scores, k, (1.0 - top_p as f64) as f32)?.to_vec2::<f32>()?;
            for (w, g) in want.iter().zip(&got) {
                let kept = w.iter().filter(|x| x.is_finite()).count();
                kept_total += kept;
                let differ = w
                    .iter()
                    .zip(g)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                // a token within rounding of the top-p boundary may go the other way
                assert!(
                    differ <= 1,
                    "k {k} p {top_p}: {differ} of {kept} kept differ"
                );
            }
        }
        assert!(kept_total > 12, "the cases must keep tokens: {kept_total}");
        Ok(())
    }
}
