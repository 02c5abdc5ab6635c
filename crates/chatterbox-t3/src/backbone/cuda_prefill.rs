//! The elementwise parts of a bf16 prefill on CUDA as one kernel each (compiled once per
//! process with NVRTC): the causal softmax of the attention scores, `silu(gate) * up` of the
//! Llama MLP, and the bias of a linear layer. The GEMMs stay cuBLAS's.
//!
//! ncu on the H100 (a batched prefill of 18 Turbo prompts of 437 positions, and of 41 English
//! ones with CFG, 98 positions): candle's strided and broadcast elementwise kernels took most
//! of the device time, the GEMMs ~17 ms of ~140 (Turbo) and ~16 of ~113 (English): the mask
//! add over the f32 scores, the casts around the softmax, the bias adds (Turbo), and the SiLU
//! and the product on the strided halves of the fused gate/up projection (English).
//!
//! Each kernel computes what candle's ops compute, in f32 with one rounding to bf16 at the
//! end: the softmax exactly as `to_dtype(F32)`, `affine(scale)`, the causal mask, candle's row
//! softmax (`exp(x - max) / sum`, the sum added in another order) and `to_dtype(BF16)`; the
//! bias add as candle's bf16 add. `silu(g) * u` rounds `silu(g)` to bf16 once where candle's
//! bf16 SiLU rounds each of its operations. f32 prefills keep candle's ops.
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, CustomOp1, CustomOp2, DType, Layout, Shape, Tensor, D};
use chatterbox_cuda::{contiguous_view, Ptx};

/// Threads per block of the row softmax (one block per row).
const ROW_THREADS: u32 = 256;
/// Threads per block of the elementwise kernels.
const THREADS: u32 = 256;

const SOURCE: &str = include_str!("cuda_prefill.cu");

/// The PTX of [`SOURCE`], compiled on first use.
pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "T3 prefill kernels");

/// Whether the kernels take `x`: bf16 on CUDA, contiguous, and compiled (a failure is logged
/// once; the caller then runs candle's ops).
fn applies(x: &Tensor) -> bool {
    x.device().is_cuda()
        && x.dtype() == DType::BF16
        && x.is_contiguous()
        && x.elem_count() > 0
        && PTX.available(x.device(), |e| {
            tracing::warn!("{e}: T3 prefills with candle's elementwise ops")
        })
}

/// A grid of `THREADS`-thread blocks for `total` elements (grid-stride loops beyond).
fn elementwise(total: usize) -> LaunchConfig {
    let blocks = total.div_ceil(THREADS as usize).clamp(1, 65_535 * 8) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

struct CausalSoftmax {
    offset: usize,
    scale: f32,
}

impl CustomOp1 for CausalSoftmax {
    chatterbox_cuda::cuda_only_op!(1, "t3-causal-softmax");

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (b, h, t, n) = l.shape().dims4()?;
        let rows = b * h * t;
        if rows == 0 || n != self.offset + t || rows > i32::MAX as usize || n > u32::MAX as usize {
            candle_core::bail!(
                "t3-causal-softmax: scores {:?} at offset {}",
                l.shape(),
                self.offset
            )
        }
        let x = contiguous_view::<half::bf16>(s, l, "t3-causal-softmax: scores")?;
        let dev: &CudaDevice = &s.device;
        let func = PTX.function(dev, "t3_causal_softmax_bf16")?;
        // SAFETY: every element is written by the kernel below before it is read.
        let out = unsafe { dev.alloc::<half::bf16>(rows * n)? };
        let (t32, n32, off32) = (t as u32, n as u32, self.offset as u32);
        let mut builder = func.builder();
        builder.arg(&x);
        builder.arg(&out);
        builder.arg(&t32);
        builder.arg(&n32);
        builder.arg(&off32);
        builder.arg(&self.scale);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one block per row reads and writes its `n` values.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            l.shape().clone(),
        ))
    }
}

/// `softmax(scores · scale + causal mask)` of bf16 scores `[B, H, T, offset + T]` (query `i`
/// sees keys `..= offset + i`), bf16; `None` where the kernel does not apply.
pub(crate) fn causal_softmax(
    scores: &Tensor,
    offset: usize,
    scale: f32,
) -> candle_core::Result<Option<Tensor>> {
    if !applies(scores) || scores.rank() != 4 {
        return Ok(None);
    }
    scores
        .apply_op1_no_bwd(&CausalSoftmax { offset, scale })
        .map(Some)
}

struct SiluMul;

impl CustomOp1 for SiluMul {
    chatterbox_cuda::cuda_only_op!(1, "t3-silu-mul-cuda");

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let mut dims = l.dims().to_vec();
        let Some(last) = dims.last_mut() else {
            candle_core::bail!("t3-silu-mul-cuda: scalar input")
        };
        let i = *last / 2;
        *last = i;
        let total = l.shape().elem_count() / 2;
        if i == 0 || i > u32::MAX as usize {
            candle_core::bail!("t3-silu-mul-cuda: input {:?}", l.shape())
        }
        let gu = contiguous_view::<half::bf16>(s, l, "t3-silu-mul-cuda: input")?;
        let dev: &CudaDevice = &s.device;
        let func = PTX.function(dev, "t3_silu_mul_bf16")?;
        // SAFETY: every element is written by the kernel below before it is read.
        let out = unsafe { dev.alloc::<half::bf16>(total)? };
        let (i32_, total64) = (i as u32, total as u64);
        let mut builder = func.builder();
        builder.arg(&gu);
        builder.arg(&out);
        builder.arg(&i32_);
        builder.arg(&total64);
        // SAFETY: a grid-stride loop over the `total` outputs, each reading its two inputs.
        unsafe { builder.launch(elementwise(total)) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from(dims),
        ))
    }
}

/// `silu(gu[.., ..i]) * gu[.., i..]` for bf16 `gu [.., 2 i]`; `None` where the kernel does not
/// apply.
pub(crate) fn silu_mul(gu: &Tensor) -> candle_core::Result<Option<Tensor>> {
    if !applies(gu) || gu.dim(D::Minus1)? % 2 != 0 {
        return Ok(None);
    }
    gu.apply_op1_no_bwd(&SiluMul).map(Some)
}

struct BiasAdd;

impl CustomOp2 for BiasAdd {
    chatterbox_cuda::cuda_only_op!(2, "t3-bias-add");

    fn cuda_fwd(
        &self,
        s: &CudaStorage,
        l: &Layout,
        bs: &CudaStorage,
        bl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let n = l.dims().last().copied().unwrap_or(0);
        let total = l.shape().elem_count();
        if n == 0 || bl.shape().elem_count() != n || n > u32::MAX as usize {
            candle_core::bail!("t3-bias-add: {:?} + bias {:?}", l.shape(), bl.shape())
        }
        let x = contiguous_view::<half::bf16>(s, l, "t3-bias-add: input")?;
        let b = contiguous_view::<half::bf16>(bs, bl, "t3-bias-add: bias")?;
        let dev: &CudaDevice = &s.device;
        let func = PTX.function(dev, "t3_bias_add_bf16")?;
        // SAFETY: every element is written by the kernel below before it is read.
        let out = unsafe { dev.alloc::<half::bf16>(total)? };
        let (n32, total64) = (n as u32, total as u64);
        let mut builder = func.builder();
        builder.arg(&x);
        builder.arg(&b);
        builder.arg(&out);
        builder.arg(&n32);
        builder.arg(&total64);
        // SAFETY: a grid-stride loop over the `total` outputs.
        unsafe { builder.launch(elementwise(total)) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            l.shape().clone(),
        ))
    }
}

/// `y + bias` for bf16 `y [.., n]` and `bias [n]`; `None` where the kernel does not apply.
pub(crate) fn bias_add(y: &Tensor, bias: &Tensor) -> candle_core::Result<Option<Tensor>> {
    if !applies(y) || !applies(bias) || bias.rank() != 1 {
        return Ok(None);
    }
    y.apply_op2_no_bwd(bias, &BiasAdd).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Largest `|got - want|` over the largest `|want|`.
    fn rel(got: &Tensor, want: &Tensor) -> crate::Result<f32> {
        let got = got.to_dtype(DType::F32)?;
        let want = want.to_dtype(DType::F32)?;
        let err = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
        let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
        Ok(err / scale.max(1e-30))
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn prefill_kernels_match_candle_ops() -> crate::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        // scores of 2 x 3 heads, 37 queries after 5 cached positions
        let (b, h, t, off) = (2usize, 3usize, 37usize, 5usize);
        let n = off + t;
        let scores =
            (Tensor::randn(0f32, 1.0, (b, h, t, n), &dev)? * 4.0)?.to_dtype(DType::BF16)?;
        for scale in [1.0f32, 0.125] {
            let got = causal_softmax(&scores, off, scale)?.expect("the kernel applies");
            let mask = crate::backbone::attention::causal_mask(t, off, &dev)?;
            let want = candle_nn::ops::softmax_last_dim(
                &scores
                    .to_dtype(DType::F32)?
                    .affine(scale as f64, 0.0)?
                    .broadcast_add(&mask)?,
            )?
            .to_dtype(DType::BF16)?;
            // one bf16 rounding of the same f32 values, the sum added in another order
            let diff = (got.to_dtype(DType::F32)? - want.to_dtype(DType::F32)?)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert!(diff <= 4e-3, "softmax at scale {scale}: {diff}");
            // masked positions are exactly zero
            let row0 = got
                .get(0)?
                .get(0)?
                .get(0)?
                .to_dtype(DType::F32)?
                .to_vec1::<f32>()?;
            assert!(row0[off + 1..].iter().all(|&v| v == 0.0));
        }
        // silu(g) * u on a [3, 4, 2 x 300] projection
        let gu = (Tensor::randn(0f32, 1.0, (3, 4, 600), &dev)? * 4.0)?.to_dtype(DType::BF16)?;
        let got = silu_mul(&gu)?.expect("the kernel applies");
        let want = (candle_nn::ops::silu(&gu.narrow(D::Minus1, 0, 300)?)?
            * gu.narrow(D::Minus1, 300, 300)?)?;
        assert_eq!(got.dims(), &[3, 4, 300]);
        assert!(rel(&got, &want)? < 1.6e-2, "silu_mul {}", rel(&got, &want)?);
        // y + bias: exactly candle's bf16 add
        let y = Tensor::randn(0f32, 1.0, (70, 129), &dev)?.to_dtype(DType::BF16)?;
        let bias = Tensor::randn(0f32, 1.0, 129, &dev)?.to_dtype(DType::BF16)?;
        let got = bias_add(&y, &bias)?.expect("the kernel applies");
        let want = y.broadcast_add(&bias)?;
        assert_eq!(
            got.to_dtype(DType::F32)?.to_vec2::<f32>()?,
            want.to_dtype(DType::F32)?.to_vec2::<f32>()?
        );
        // f32 and strided inputs are left to candle
        assert!(bias_add(&y.to_dtype(DType::F32)?, &bias)?.is_none());
        assert!(silu_mul(&gu.t()?)?.is_none());
        Ok(())
    }
}
