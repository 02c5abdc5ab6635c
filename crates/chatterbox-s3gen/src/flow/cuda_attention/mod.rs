//! The estimator's self-attention (diffusers `AttnProcessor2_0` as matcha/transformer.py's
//! `BasicTransformerBlock` calls it, upstream 5de7a54) as one CUDA kernel in bf16 or f16,
//! compiled once per process with NVRTC.
//!
//! ncu on the H100 (500 new tokens, 2 x 1500 frames) put candle's path at ~40 % of the solve:
//! the `(2, 8, 1500, 1500)` scores written and read back by the bias add, the f32 upcast, the
//! softmax and the downcast, plus the head transposes before and after. Here each block keeps
//! 64 query rows' scores in registers and runs the softmax online over key tiles of 64 (one
//! pass, as PyTorch's SDPA flash kernel does): q k^T and p v on the tensor cores with f32
//! accumulators, the softmax in f32, p rounded to the weights' dtype for p v.
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, DType, Device, Layout, Shape, Tensor};
use chatterbox_cuda::{compute_capability, contiguous_view, Elem, Ptx};

const SOURCE: &str = include_str!("kernel.cu");
/// The head size the kernel is written for (S3Gen's `attention_head_dim`).
const HEAD_DIM: usize = 64;
/// Query rows per block.
const BM: usize = 64;

// mma.sync on bf16, ldmatrix and cp.async need sm_80; the driver JIT-compiles for the GPU.
pub(crate) static PTX: Ptx = Ptx::new(SOURCE, Some("compute_80"), "flow attention kernel");

fn kernel_name(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::BF16 => Some("flow_attention_bf16"),
        DType::F16 => Some("flow_attention_f16"),
        _ => None,
    }
}

/// Whether [`attention`] takes `qkv (b, t, 3 h d)`: bf16 or f16 on an sm_80+ GPU, `d` = 64,
/// and (when already contiguous) starting on a 16-byte boundary.
pub(crate) fn applies(qkv: &Tensor, dim_head: usize) -> candle_core::Result<bool> {
    let Device::Cuda(dev) = qkv.device() else {
        return Ok(false);
    };
    let aligned = !qkv.is_contiguous() || qkv.layout().start_offset().is_multiple_of(8);
    Ok(dim_head == HEAD_DIM
        && aligned
        && kernel_name(qkv.dtype()).is_some()
        && compute_capability(dev)?.0 >= 8)
}

/// Whether the estimator's attention runs [`attention`] on `dev` for weights of `dtype` and
/// heads of `dim_head`.
pub(crate) fn runs_on(dev: &Device, dtype: DType, dim_head: usize) -> bool {
    match dev {
        Device::Cuda(d) => {
            dim_head == HEAD_DIM
                && kernel_name(dtype).is_some()
                && compute_capability(d).is_ok_and(|c| c.0 >= 8)
        }
        _ => false,
    }
}

struct FlowAttention {
    heads: usize,
}

impl FlowAttention {
    fn run<T: Elem>(
        &self,
        qkv: &CudaStorage,
        ql: &Layout,
        bias: Option<CudaView<'_, f32>>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (b, t, w) = ql.shape().dims3()?;
        let h = self.heads;
        if w != 3 * h * HEAD_DIM {
            candle_core::bail!("flow-attention: width {w} is not 3 x {h} x {HEAD_DIM}")
        }
        let src = contiguous_view::<T>(qkv, ql, "flow-attention: q/k/v")?;
        let start = ql.start_offset();
        // cp.async copies 16-byte chunks (8 values); rows are 3 h 64 values long.
        if !start.is_multiple_of(8) || t == 0 || b * h > 65535 || b * t * w > i32::MAX as usize {
            candle_core::bail!("flow-attention: unsupported layout (offset {start}, {b}x{t}x{w})")
        }
        let name = kernel_name(T::DTYPE).ok_or_else(|| {
            candle_core::Error::Msg(format!("flow-attention: dtype {:?}", T::DTYPE))
        })?;
        let dev: &CudaDevice = &qkv.device;
        let func = PTX.function(dev, name)?;
        // SAFETY: the kernel writes every one of the b t h 64 outputs (rows < t of every
        // (batch row, head)) before anything reads them.
        let out = unsafe { dev.alloc::<T>(b * t * h * HEAD_DIM)? };
        let (t32, h32) = (t as i32, h as i32);
        let null = 0u64;
        let mut builder = func.builder();
        builder.arg(&src);
        match &bias {
            Some(v) => builder.arg(v),
            None => builder.arg(&null),
        };
        builder.arg(&out);
        builder.arg(&t32);
        builder.arg(&h32);
        let cfg = LaunchConfig {
            grid_dim: (t.div_ceil(BM) as u32, (b * h) as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `src` holds the b t 3 h 64 values the kernel indexes (rows clamped to < t),
        // `bias` (when given, checked by the caller) b t values, `out` b t h 64.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from((b, t, h * HEAD_DIM)),
        ))
    }

    fn dispatch(
        &self,
        qkv: &CudaStorage,
        ql: &Layout,
        bias: Option<CudaView<'_, f32>>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match qkv.dtype() {
            DType::BF16 => self.run::<half::bf16>(qkv, ql, bias),
            DType::F16 => self.run::<half::f16>(qkv, ql, bias),
            d => candle_core::bail!("flow-attention: dtype {d:?}"),
        }
    }
}

impl candle_core::CustomOp1 for FlowAttention {
    chatterbox_cuda::cuda_only_op!(1, "flow-attention-cuda", " (the CPU has its own kernel)");

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        self.dispatch(s, l, None)
    }
}

impl candle_core::CustomOp2 for FlowAttention {
    chatterbox_cuda::cuda_only_op!(2, "flow-attention-cuda", " (the CPU has its own kernel)");

    fn cuda_fwd(
        &self,
        s: &CudaStorage,
        l: &Layout,
        bs: &CudaStorage,
        bl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (b, t, _) = l.shape().dims3()?;
        let bias = contiguous_view::<f32>(bs, bl, "flow-attention: the key bias")?;
        if bias.len() != b * t {
            candle_core::bail!("flow-attention: key bias {:?} for {b} x {t}", bl.shape())
        }
        self.dispatch(s, l, Some(bias))
    }
}

/// `softmax(q k^T + bias) v` per head from `qkv (b, t, 3 h 64)` (q scaled), with `bias` the
/// f32 key-padding bias `(b, t)`; returns `(b, t, h 64)`. See [`applies`].
pub(crate) fn attention(
    qkv: &Tensor,
    heads: usize,
    bias: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let qkv = qkv.contiguous()?;
    let op = FlowAttention { heads };
    match bias {
        Some(b) => qkv.apply_op2_no_bwd(&b.to_dtype(DType::F32)?.contiguous()?, &op),
        None => qkv.apply_op1_no_bwd(&op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The candle-op reference in f32 from the same (rounded) inputs.
    fn reference(qkv: &Tensor, h: usize, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let (b, t, _) = qkv.dims3()?;
        let x = qkv
            .to_dtype(DType::F32)?
            .reshape((b, t, 3, h, HEAD_DIM))?
            .permute((2, 0, 3, 1, 4))?
            .contiguous()?;
        let (q, k, v) = (x.get(0)?, x.get(1)?, x.get(2)?);
        let s = q.matmul(&k.t()?)?;
        let s = match bias {
            Some(bi) => s.broadcast_add(&bi.reshape((b, 1, 1, t))?)?,
            None => s,
        };
        let p = candle_nn::ops::softmax_last_dim(&s)?;
        p.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h * HEAD_DIM))
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn matches_the_candle_ops() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        for dtype in [DType::BF16, DType::F16] {
            // lengths below, at and across tile edges; a padded second row
            for (b, t, h) in [
                (2usize, 1500usize, 8usize),
                (1, 1, 2),
                (2, 64, 1),
                (2, 131, 3),
            ] {
                let qkv = (Tensor::randn(0f32, 1.0, (b, t, 3 * h * HEAD_DIM), &dev)? * 0.5)?
                    .to_dtype(dtype)?;
                let valid = t - t / 4;
                let mut bias = vec![0f32; b * t];
                for v in bias.iter_mut().skip(t + valid).take(t - valid) {
                    *v = -1e10;
                }
                let bias = Tensor::from_vec(bias, (b, t), &dev)?;
                for bi in [None, Some(&bias)] {
                    assert!(applies(&qkv, HEAD_DIM)?);
                    let got = attention(&qkv, h, bi)?;
                    assert_eq!(got.dims(), &[b, t, h * HEAD_DIM]);
                    assert_eq!(got.dtype(), dtype);
                    let want = reference(&qkv, h, bi)?;
                    let err = (got.to_dtype(DType::F32)? - &want)?
                        .abs()?
                        .max_all()?
                        .to_scalar::<f32>()?;
                    let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
                    // p is rounded to 16 bits before p v (as the reference's SDPA does)
                    let tol = if dtype == DType::BF16 { 1e-2 } else { 2e-3 };
                    println!(
                        "{dtype:?} {b}x{t}x{h}, bias {}: {err:.2e} of {scale:.2e}",
                        bi.is_some()
                    );
                    assert!(
                        err <= tol * scale,
                        "{dtype:?} {b}x{t}x{h}: {err} of {scale}"
                    );
                }
            }
        }
        assert!(!applies(
            &Tensor::zeros((1, 2, 192), DType::F32, &dev)?,
            HEAD_DIM
        )?);
        assert!(!applies(
            &Tensor::zeros((1, 2, 96), DType::BF16, &dev)?,
            32
        )?);
        Ok(())
    }
}
