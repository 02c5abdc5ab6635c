//! CUDA kernels for the element-wise work around HiFT's convolutions (hifigan.py's `Snake`,
//! `ResBlock` and `HiFTGenerator.decode`, upstream 5de7a54), one launcher for all: Snake and
//! `bias (+ residual)` where a convolution runs as im2col + GEMM, the leaky ReLU in front of
//! each upsampling, the upsampling's bias, crop and reflection pad with the source branch's
//! sum, the sum of a stage's resblocks, and the exp-magnitude / sin-phase spectrum in front of
//! the iSTFT, each one pass instead of 2-10 candle kernels, with the same f32 operations in the same order (no contraction, `expf`,
//! `sinf`, `cosf`).
//!
//! ncu on the H100 (20 s of audio): the candle ops took 0.40 ms (leaky ReLU: maximum, minimum,
//! affine, add), 0.47 ms (bias on the cropped view, pad, source add) and 0.09 ms (spectrum)
//! per inference.
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, CustomOp3, Layout, Shape, Tensor};
use chatterbox_cuda::{contiguous_view, Ptx};

const SOURCE: &str = include_str!("cuda_glue.cu");

pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "HiFT element-wise kernels");

/// One kernel of [`SOURCE`] over `x`, `p`, `q` (f32, contiguous, on the device): the caller
/// checks the operands' sizes against what the kernel reads.
struct GlueOp {
    kernel: &'static str,
    out: Shape,
    /// Elements the kernel's loop runs over (the output's, or half of it for the spectrum).
    n: usize,
    sizes: [usize; 5],
    scalar: f32,
}

impl CustomOp3 for GlueOp {
    fn name(&self) -> &'static str {
        self.kernel
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("{}: CUDA only", self.kernel)
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        p: &CudaStorage,
        pl: &Layout,
        q: &CudaStorage,
        ql: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let what = |w: &str| format!("{}: {w}", self.kernel);
        let xv = contiguous_view::<f32>(x, xl, &what("input"))?;
        let pv = contiguous_view::<f32>(p, pl, &what("second operand"))?;
        let qv = contiguous_view::<f32>(q, ql, &what("third operand"))?;
        if self.sizes.iter().any(|&v| v > u32::MAX as usize) {
            candle_core::bail!("{}: sizes past 32 bits", self.kernel)
        }
        let dev: &CudaDevice = &x.device;
        let func = PTX.function(dev, self.kernel)?;
        // SAFETY: the kernel writes every value of the output (checked per kernel by the
        // callers below).
        let y = unsafe { dev.alloc::<f32>(self.out.elem_count())? };
        let n = self.n as u64;
        let sizes = self.sizes.map(|v| v as u32);
        let mut builder = func.builder();
        builder.arg(&xv);
        builder.arg(&pv);
        builder.arg(&qv);
        builder.arg(&y);
        builder.arg(&n);
        for s in &sizes {
            builder.arg(s);
        }
        builder.arg(&self.scalar);
        let cfg = LaunchConfig {
            grid_dim: (self.n.div_ceil(256).clamp(1, 132 * 32) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the callers check the operands' element counts against the kernel's reads
        // (see each function below); the output has `self.out` values, all written.
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(y, dev.clone()),
            self.out.clone(),
        ))
    }
}

/// `(B, C, T)` dims of `x` and whether `params` hold `C` values each.
fn per_channel(x: &Tensor, params: &[&Tensor], what: &str) -> candle_core::Result<(usize, usize)> {
    let (_, c, t) = x.dims3()?;
    if params.iter().any(|p| p.elem_count() != c) {
        candle_core::bail!(
            "hift {what}: parameters of {:?} values for {c} channels",
            params.iter().map(|p| p.elem_count()).collect::<Vec<_>>()
        )
    }
    Ok((c, t))
}

/// Snake, `x + inv_alpha * sin(alpha * x)^2` (`alpha`, `inv_alpha`: `C` values), in one pass.
pub(crate) fn snake(x: &Tensor, alpha: &Tensor, inv_alpha: &Tensor) -> candle_core::Result<Tensor> {
    let (c, t) = per_channel(x, &[alpha, inv_alpha], "Snake")?;
    let op = GlueOp {
        kernel: "hift_snake",
        out: x.shape().clone(),
        n: x.elem_count(),
        sizes: [c, t, 0, 0, 0],
        scalar: 0.0,
    };
    // reads the n values of x and c of each parameter
    x.apply_op3_no_bwd(alpha, inv_alpha, &op)
}

/// `x + bias (+ residual)` (`bias`: `C` values) in one pass.
pub(crate) fn bias_residual(
    x: &Tensor,
    bias: &Tensor,
    residual: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let (c, t) = per_channel(x, &[bias], "bias")?;
    if let Some(r) = residual.filter(|r| r.dims() != x.dims()) {
        candle_core::bail!("hift bias: a residual {:?} for {:?}", r.dims(), x.dims())
    }
    let op = GlueOp {
        kernel: "hift_bias_residual",
        out: x.shape().clone(),
        n: x.elem_count(),
        sizes: [c, t, residual.is_some() as usize, 0, 0],
        scalar: 0.0,
    };
    // reads the n values of x, c biases and, with a residual, its n values (x stands in for
    // an absent one, never read)
    x.apply_op3_no_bwd(bias, residual.unwrap_or(x), &op)
}

/// `F.leaky_relu(x, slope)` in one pass.
pub(crate) fn leaky_relu(x: &Tensor, slope: f64) -> candle_core::Result<Tensor> {
    let n = x.elem_count();
    let op = GlueOp {
        kernel: "hift_leaky_relu",
        out: x.shape().clone(),
        n,
        sizes: [0; 5],
        scalar: slope as f32,
    };
    // reads the n values of x only (p and q are placeholders)
    x.apply_op3_no_bwd(x, x, &op)
}

/// `cat([y[.., pad + 1], y[.., pad .. len - pad]]) + bias` (the pad only with `reflect`), then
/// `+ source`: an unpadded transposed convolution `y` `(B, C, len)` cropped by `pad` at each end,
/// its bias `(1, C, 1)`, the reflection pad of the last upsampling and the source branch's sum
/// `source` `(B, C, len - 2 pad + reflect)`, in one pass.
pub(crate) fn ups_sum(
    y: &Tensor,
    bias: &Tensor,
    pad: usize,
    reflect: bool,
    source: &Tensor,
) -> candle_core::Result<Tensor> {
    let (b, c, len) = y.dims3()?;
    let t_out = (len.checked_sub(2 * pad))
        .filter(|&n| n > reflect as usize)
        .map(|n| n + reflect as usize);
    match t_out {
        Some(t_out) if source.dims() == [b, c, t_out] && bias.elem_count() == c => {
            let op = GlueOp {
                kernel: "hift_ups_sum",
                out: source.shape().clone(),
                n: b * c * t_out,
                sizes: [c, len, t_out, pad, reflect as usize],
                scalar: 0.0,
            };
            // reads y at pad + s <= pad + t_out - 1 - reflect < len - pad, c biases, and
            // source's b * c * t_out values
            y.apply_op3_no_bwd(bias, source, &op)
        }
        _ => candle_core::bail!(
            "hift upsampling: output {:?} cropped by {pad}, bias of {}, source {:?}",
            y.dims(),
            bias.elem_count(),
            source.dims()
        ),
    }
}

/// `((a + b) + c) / div` for 1 to 3 tensors `parts` of one shape, in one pass.
pub(crate) fn sum_div(parts: &[Tensor], div: f32) -> candle_core::Result<Tensor> {
    let Some(a) = parts.first() else {
        candle_core::bail!("hift sum: nothing to add")
    };
    if parts.len() > 3 || parts.iter().any(|p| p.dims() != a.dims()) {
        candle_core::bail!(
            "hift sum: {} parts of shapes {:?}",
            parts.len(),
            parts.iter().map(|p| p.dims()).collect::<Vec<_>>()
        )
    }
    let op = GlueOp {
        kernel: "hift_sum_div",
        out: a.shape().clone(),
        n: a.elem_count(),
        sizes: [parts.len(), 0, 0, 0, 0],
        scalar: div,
    };
    // reads n values of each of the `count` parts (the others are placeholders)
    let b = parts.get(1).unwrap_or(a);
    let c = parts.get(2).unwrap_or(a);
    a.apply_op3_no_bwd(b, c, &op)
}

/// `[real; imag]` of `min(exp(x[:bins]), 100) * (cos, sin)(sin(x[bins:]))` for `conv_post`'s
/// `(B, 2 bins, T)` output, in one pass.
pub(crate) fn spectrum(x: &Tensor, bins: usize) -> candle_core::Result<Tensor> {
    let (b, c, t) = x.dims3()?;
    if c != 2 * bins {
        candle_core::bail!("hift spectrum: {c} channels for {bins} bins")
    }
    let op = GlueOp {
        kernel: "hift_spectrum",
        out: x.shape().clone(),
        n: b * bins * t,
        sizes: [bins, t, 0, 0, 0],
        scalar: 0.0,
    };
    // reads and writes the b * 2 bins * t values of x and y
    x.apply_op3_no_bwd(x, x, &op)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_diff(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
        (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn glue_kernels_match_candle_ops() -> candle_core::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        let x = (Tensor::randn(0f32, 2.0, (2, 6, 1001), &dev)? * 3.0)?;
        // the same f32 operations in the same order as candle's
        let alpha = Tensor::rand(0.1f32, 2.0, (1, 6, 1), &dev)?;
        let inv = (alpha.clone() + 1e-9)?.recip()?;
        let want = (&x + x.broadcast_mul(&alpha)?.sin()?.sqr()?.broadcast_mul(&inv)?)?;
        assert_eq!(max_diff(&snake(&x, &alpha, &inv)?, &want)?, 0.0);
        assert!(snake(&x, &alpha.narrow(1, 0, 5)?, &inv).is_err());
        let bias = Tensor::randn(0f32, 1.0, (1, 6, 1), &dev)?;
        let r = Tensor::randn(0f32, 1.0, (2, 6, 1001), &dev)?;
        let want = (x.broadcast_add(&bias)? + &r)?;
        assert_eq!(max_diff(&bias_residual(&x, &bias, Some(&r))?, &want)?, 0.0);
        let want = x.broadcast_add(&bias)?;
        assert_eq!(max_diff(&bias_residual(&x, &bias, None)?, &want)?, 0.0);
        // a residual of another shape is an error, not a wrong read
        let short = r.narrow(2, 0, 1000)?.contiguous()?;
        assert!(bias_residual(&x, &bias, Some(&short)).is_err());

        let want = crate::conv::leaky_relu(&x, 0.1)?;
        assert_eq!(max_diff(&leaky_relu(&x, 0.1)?, &want)?, 0.0);

        let bias = Tensor::randn(0f32, 1.0, (1, 6, 1), &dev)?;
        for (pad, reflect) in [(3, false), (1, true), (0, false)] {
            let len = 1001 - 2 * pad + reflect as usize;
            let src = Tensor::randn(0f32, 1.0, (2, 6, len), &dev)?;
            let mut y = x.narrow(2, pad, 1001 - 2 * pad)?.broadcast_add(&bias)?;
            if reflect {
                y = Tensor::cat(&[&y.narrow(2, 1, 1)?, &y], 2)?;
            }
            let want = (y + &src)?;
            let got = ups_sum(&x, &bias, pad, reflect, &src)?;
            assert_eq!(max_diff(&got, &want)?, 0.0, "pad {pad} reflect {reflect}");
            // a source of another length is an error, not a wrong read
            let short = src.narrow(2, 0, len - 1)?.contiguous()?;
            assert!(ups_sum(&x, &bias, pad, reflect, &short).is_err());
        }

        let m = x.narrow(1, 0, 3)?.exp()?.minimum(1e2f32)?;
        let ph = x.narrow(1, 3, 3)?.sin()?;
        let want = Tensor::cat(&[(&m * ph.cos()?)?, (&m * ph.sin()?)?], 1)?;
        assert_eq!(max_diff(&spectrum(&x, 3)?, &want)?, 0.0);
        assert!(spectrum(&x, 2).is_err());

        let (p, q) = (x.affine(0.5, 1.0)?, x.sqr()?);
        let three = Tensor::new(3f32, &dev)?;
        let want = ((&x + &p)? + &q)?.broadcast_div(&three)?;
        assert_eq!(max_diff(&sum_div(&[x.clone(), p, q], 3.0)?, &want)?, 0.0);
        let want = x.broadcast_div(&three)?;
        assert_eq!(
            max_diff(&sum_div(std::slice::from_ref(&x), 3.0)?, &want)?,
            0.0
        );
        assert!(sum_div(&[x.clone(), x.narrow(2, 0, 5)?], 2.0).is_err());
        Ok(())
    }
}
