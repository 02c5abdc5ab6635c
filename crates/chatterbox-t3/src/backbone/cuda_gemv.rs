//! A CUDA matrix-vector kernel for the decode step's projections in bf16: `y = x Wᵀ (+ b)` for
//! one or two rows of `x` (batch 1, or 2 with CFG), compiled once per process with NVRTC.
//!
//! ncu on the H100 put T3 Turbo's per-step projections at ~0.76 ms through cuBLAS (its M = 1
//! kernels), about a third of HBM bandwidth for the ~600 MB of bf16 weights. Here one warp
//! computes one output column for every row, streaming its weight row with 16-byte loads and
//! summing in f32, with the bias added before the one rounding to bf16.
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, CustomOp3, DType, Layout, Shape, Tensor};
use chatterbox_cuda::{contiguous_view, Ptx};

/// Most rows of `x` the kernel takes.
pub(crate) const MAX_ROWS: usize = 2;

const SOURCE: &str = include_str!("cuda_gemv.cu");

/// The PTX of [`SOURCE`], compiled on first use.
pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "T3 GEMV kernel");

/// Whether [`gemv`] takes `x` `(rows, k)` against `w` `(n, k)`: bf16, contiguous, 16-byte
/// aligned rows, at most [`MAX_ROWS`] rows, on CUDA.
pub(crate) fn applies(x: &Tensor, w: &Tensor) -> bool {
    let aligned = |t: &Tensor| t.layout().start_offset().is_multiple_of(8);
    x.device().is_cuda()
        && x.dtype() == DType::BF16
        && w.dtype() == DType::BF16
        && x.is_contiguous()
        && w.is_contiguous()
        && aligned(x)
        && aligned(w)
        && x.rank() == 2
        && x.dims()[0] <= MAX_ROWS
        && x.dims()[1].is_multiple_of(8)
        && w.dims().get(1) == x.dims().get(1)
}

struct Gemv {
    has_bias: bool,
}

impl CustomOp3 for Gemv {
    chatterbox_cuda::cuda_only_op!(3, "t3-gemv-bf16");

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
        b: &CudaStorage,
        bl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (rows, k) = xl.shape().dims2()?;
        let (n, k2) = wl.shape().dims2()?;
        if k != k2 || rows == 0 || rows > MAX_ROWS || k % 8 != 0 || n > u32::MAX as usize / 32 {
            candle_core::bail!("t3-gemv-bf16: ({rows}, {k}) x ({n}, {k2})ᵀ")
        }
        if self.has_bias && bl.shape().elem_count() != n {
            candle_core::bail!("t3-gemv-bf16: bias of {:?} for {n} outputs", bl.shape())
        }
        let (xv, wv, bv) = (
            contiguous_view::<half::bf16>(x, xl, "t3-gemv-bf16: x")?,
            contiguous_view::<half::bf16>(w, wl, "t3-gemv-bf16: w")?,
            contiguous_view::<half::bf16>(b, bl, "t3-gemv-bf16: bias")?,
        );
        let dev: &CudaDevice = &x.device;
        let func = PTX.function(dev, "t3_gemv_bf16")?;
        // SAFETY: every element is written by the kernel below before it is read.
        let out = unsafe { dev.alloc::<half::bf16>(rows * n)? };
        let args = [rows, n, k].map(|v| v as u32);
        let has = self.has_bias as i32;
        let mut builder = func.builder();
        builder.arg(&xv);
        builder.arg(&wv);
        builder.arg(&bv);
        builder.arg(&out);
        for a in &args {
            builder.arg(a);
        }
        builder.arg(&has);
        let cfg = LaunchConfig {
            grid_dim: ((n * 32).div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the kernel reads `rows * k` values of `x`, `n * k` of `w` (16-byte aligned,
        // checked by `applies`), `n` of the bias when there is one, and writes `rows * n`.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from((rows, n)),
        ))
    }
}

/// `x (rows, k) · w (n, k)ᵀ (+ bias (n))` in bf16 with f32 sums; see [`applies`].
pub(crate) fn gemv(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let op = Gemv {
        has_bias: bias.is_some(),
    };
    // Without a bias the third operand is a placeholder the kernel never reads.
    x.apply_op3_no_bwd(w, bias.unwrap_or(w), &op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn gemv_matches_matmul() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        for (rows, k, n) in [(1usize, 1024usize, 3072usize), (2, 4096, 1024), (1, 16, 5)] {
            let x = Tensor::randn(0f32, 1.0, (rows, k), &dev)?.to_dtype(DType::BF16)?;
            let w = Tensor::randn(0f32, 0.05, (n, k), &dev)?.to_dtype(DType::BF16)?;
            let b = Tensor::randn(0f32, 1.0, n, &dev)?.to_dtype(DType::BF16)?;
            assert!(applies(&x, &w));
            let want = x
                .to_dtype(DType::F32)?
                .matmul(&w.to_dtype(DType::F32)?.t()?)?
                .broadcast_add(&b.to_dtype(DType::F32)?)?;
            let got = gemv(&x, &w, Some(&b))?.to_dtype(DType::F32)?;
            let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
            let err = (got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            // one bf16 rounding of the result (2^-9 relative) plus f32 summation order
            assert!(err <= scale / 256.0, "{rows}x{k}x{n}: {err} of {scale}");
            let nb = gemv(&x, &w, None)?.to_dtype(DType::F32)?;
            let want = x
                .to_dtype(DType::F32)?
                .matmul(&w.to_dtype(DType::F32)?.t()?)?;
            let err = (nb - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(err <= scale / 256.0, "no bias {rows}x{k}x{n}: {err}");
        }
        Ok(())
    }
}
