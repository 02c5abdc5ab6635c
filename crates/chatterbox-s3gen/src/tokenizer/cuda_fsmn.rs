//! The FSMN memory (`x + depthwise_conv(x)`, see [`super::fsmn`]) as one CUDA kernel, compiled
//! once per process with NVRTC.
//!
//! ncu on the H100 put the generic path (an `index_select` of 31 shifted copies, a broadcast
//! multiply and a sum: 36 + 109 + 52 us per layer for 10 s of audio) at ~35 % of the
//! tokenizer's GPU time. Here one thread computes one output, reading its 31 taps (coalesced
//! across channels, cached across frames).
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, CustomOp2, DType, Layout, Shape, Tensor};
use chatterbox_cuda::{contiguous_view, Ptx};

const SOURCE: &str = include_str!("cuda_fsmn.cu");

/// The PTX of [`SOURCE`], compiled on first use.
pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "tokenizer's FSMN kernel");

/// Whether [`fsmn`] takes `x`: f32 on CUDA.
pub(crate) fn applies(x: &Tensor, weight: &Tensor) -> bool {
    x.device().is_cuda() && x.dtype() == DType::F32 && weight.dtype() == DType::F32
}

struct Fsmn {
    left: usize,
}

impl CustomOp2 for Fsmn {
    chatterbox_cuda::cuda_only_op!(2, "s3tokenizer-fsmn-cuda");

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (b, t, c) = xl.shape().dims3()?;
        let (k, c2) = wl.shape().dims2()?;
        if c != c2 || self.left >= k.max(1) || c == 0 || t == 0 {
            candle_core::bail!("fsmn: input {:?} vs weight {:?}", xl.shape(), wl.shape())
        }
        let xv = contiguous_view::<f32>(x, xl, "fsmn: the input")?;
        let wv = contiguous_view::<f32>(w, wl, "fsmn: the weight")?;
        let dev: &CudaDevice = &x.device;
        let func = PTX.function(dev, "s3tok_fsmn_f32")?;
        let total = b * t * c;
        // SAFETY: the kernel writes every one of the `total` outputs.
        let out = unsafe { dev.alloc::<f32>(total)? };
        let (t32, c32, k32, left32) = (t as u32, c as u32, k as u32, self.left as u32);
        let total64 = total as u64;
        let mut builder = func.builder();
        builder.arg(&xv);
        builder.arg(&wv);
        builder.arg(&out);
        builder.arg(&t32);
        builder.arg(&c32);
        builder.arg(&k32);
        builder.arg(&left32);
        builder.arg(&total64);
        let cfg = LaunchConfig {
            grid_dim: (total.div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `x` holds `b * t * c` values and `w` `k * c`, both contiguous; each thread
        // reads inside its own batch item and writes its own output.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from((b, t, c)),
        ))
    }
}

/// `x + depthwise_conv(x)` for `x (batch, time, channels)` and `weight (kernel, channels)`,
/// `left` zero frames before; see [`applies`].
pub(crate) fn fsmn(x: &Tensor, weight: &Tensor, left: usize) -> candle_core::Result<Tensor> {
    x.contiguous()?
        .apply_op2_no_bwd(&weight.contiguous()?, &Fsmn { left })
}

#[cfg(test)]
mod tests {
    use super::super::fsmn::DepthwiseMemory;
    use super::*;

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn matches_the_generic_path() -> crate::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        for (b, t, c, k) in [
            (2usize, 37usize, 1280usize, 31usize),
            (1, 5, 7, 31),
            (3, 9, 5, 7),
        ] {
            let x = Tensor::randn(0f32, 1.0, (b, t, c), &dev)?;
            let w = Tensor::randn(0f32, 0.2, (c, 1, k), &dev)?;
            let m = DepthwiseMemory::new(&w)?;
            let want = m.forward_generic(&x)?;
            let got = m.forward(&x)?;
            assert_eq!(got.dims(), &[b, t, c]);
            let err = (got - want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(err < 1e-5, "({b}, {t}, {c}, {k}): {err}");
        }
        Ok(())
    }
}
