//! CUDA FP32 convolutions for HiFT (hifigan.py's `Conv1d`, upstream 5de7a54): a channels-first
//! im2col compiled once per process with NVRTC, and one cuBLAS GEMM. (The element-wise work
//! around them, Snake and `bias (+ residual)` included, is `cuda_glue.rs`.)
//!
//! ncu on the H100 (20 s of audio, candle ops): candle's `conv1d` im2col kernel (time-major, so
//! its reads stride over channels) took 36% of HiFT's GPU time, the transpose after its GEMM
//! 6%, and the broadcast element-wise kernels of the Snakes and biases (five and two kernels
//! per convolution, indexed through candle's generic strided path) another 30%. Here a
//! convolution is a channels-first im2col (coalesced) and one FP32 GEMM whose output needs no
//! transpose. The im2col takes strides too (the source's
//! downsampling convolutions and STFT). f32 only: other dtypes and non-contiguous inputs keep
//! the candle ops.
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, DType, Layout, Shape, Tensor};
use chatterbox_cuda::{contiguous_view, Ptx};

const SOURCE: &str = include_str!("cuda.cu");

/// The PTX of [`SOURCE`], compiled on first use.
pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "HiFT kernels");

/// Compiles (once per process) and loads the kernels on `dev`.
pub(crate) fn load(dev: &CudaDevice) -> candle_core::Result<()> {
    PTX.function(dev, "hift_im2col_cf_f32")?;
    Ok(())
}

/// Whether the fused kernels can take `x`: f32, contiguous, `(B, C, T)` on a CUDA device.
pub(crate) fn applies(x: &Tensor) -> bool {
    x.device().is_cuda() && x.dtype() == DType::F32 && x.is_contiguous() && x.rank() == 3
}

/// The f32 values of a contiguous CUDA operand.
pub(crate) fn f32_view<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, f32>> {
    contiguous_view::<f32>(s, l, &format!("hift cuda: {what}"))
}

struct Im2ColOp {
    k: usize,
    stride: usize,
    dilation: usize,
    padding: usize,
}

impl Im2ColOp {
    fn len_out(&self, len_in: usize) -> Option<usize> {
        (len_in + 2 * self.padding)
            .checked_sub(self.dilation * (self.k - 1) + 1)
            .map(|n| n / self.stride + 1)
    }
}

impl candle_core::CustomOp1 for Im2ColOp {
    chatterbox_cuda::cuda_only_op!(1, "hift-im2col", " (the CPU has its own kernel)");

    fn cuda_fwd(&self, x: &CudaStorage, xl: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (b, c, t) = xl.shape().dims3()?;
        let Some(t_out) = self.len_out(t).filter(|&n| n > 0) else {
            candle_core::bail!("hift conv1d: input of {t} samples is too short")
        };
        if [
            b * c * self.k,
            t,
            t_out,
            self.dilation,
            self.padding,
            self.stride,
        ]
        .iter()
        .any(|&v| v > u32::MAX as usize)
            || t_out * self.stride + self.dilation * (self.k - 1) > u32::MAX as usize
        {
            candle_core::bail!("hift conv1d: sizes past 32 bits")
        }
        let n = b * c * self.k * t_out;
        let dev: &CudaDevice = &x.device;
        let func = PTX.function(dev, "hift_im2col_cf_f32")?;
        let xv = f32_view(x, xl, "input")?;
        // SAFETY: every element is written by the kernel below before it is read.
        let out = unsafe { dev.alloc::<f32>(n)? };
        let rows = b * c * self.k;
        let args = [
            c,
            self.k,
            t,
            t_out,
            self.dilation,
            self.padding,
            rows,
            self.stride,
        ]
        .map(|v| v as u32);
        let mut builder = func.builder();
        builder.arg(&xv);
        builder.arg(&out);
        for a in &args {
            builder.arg(a);
        }
        let cfg = LaunchConfig {
            grid_dim: (
                t_out.div_ceil(256).min(1024) as u32,
                rows.min(65535) as u32,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the kernel reads inside the `b * c * t` values of `x` (bounds checked per
        // element) and writes the `rows * t_out = n` values of `out`.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from((b, c * self.k, t_out)),
        ))
    }
}

/// A `conv1d` of `x` `(B, C_in, T)` with `weight` `(C_out, C_in, K)`: a channels-first im2col
/// and one GEMM, whose `(B, C_out, T_out)` result needs no transpose (candle's CUDA `conv1d`
/// builds a time-major im2col with strided reads, then transposes the product). Same sums in
/// the same precision (FP32 GEMM), in cuBLAS's order.
pub(crate) fn conv1d(
    x: &Tensor,
    weight: &Tensor,
    padding: usize,
    stride: usize,
    dilation: usize,
) -> candle_core::Result<Tensor> {
    let (c_out, c_in, k) = weight.dims3()?;
    if x.dim(1)? != c_in {
        candle_core::bail!("hift conv1d: {} input channels, expected {c_in}", x.dim(1)?)
    }
    if stride == 0 || dilation == 0 || k == 0 {
        candle_core::bail!("hift conv1d: stride {stride}, dilation {dilation}, {k} taps")
    }
    let col = x.apply_op1_no_bwd(&Im2ColOp {
        k,
        stride,
        dilation,
        padding,
    })?;
    weight.reshape((c_out, c_in * k))?.broadcast_matmul(&col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_diff(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
        (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn conv1d_matches_candle() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        let x = (Tensor::randn(0f32, 2.0, (2, 5, 1001), &dev)? * 3.0)?;
        // the convolution against candle's, for a dilated and padded case and a batch of 2
        let w = Tensor::randn(0f32, 0.3, (7, 5, 3), &dev)?;
        for (padding, stride, dilation) in [(3, 1, 3), (0, 1, 1), (5, 1, 5), (1, 3, 1), (7, 15, 2)]
        {
            let want = x.conv1d(&w, padding, stride, dilation, 1)?;
            let got = conv1d(&x, &w, padding, stride, dilation)?;
            assert_eq!(got.dims(), want.dims());
            let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(
                max_diff(&got, &want)? <= 1e-5 * scale,
                "p={padding} s={stride} d={dilation}"
            );
        }
        assert!(conv1d(&x.narrow(2, 0, 4)?.contiguous()?, &w, 0, 1, 5).is_err());
        assert!(conv1d(&x, &w, 0, 0, 1).is_err());

        Ok(())
    }
}
