//! The flow's element-wise work after its GEMMs as single in-place CUDA kernels (f32, bf16,
//! f16; computed in f32, rounded once): `gelu_erf(y + bias)` of matcha/transformer.py's
//! `FeedForward`, `y + bias + residual` of its residual adds, and decoder.py's `Mish`
//! (upstream 5de7a54). candle runs each as 2-7 kernels (broadcast add, upcast, the activation,
//! downcast), each a pass over the tensor.
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, DType, InplaceOp1, InplaceOp2, InplaceOp3, Layout, Tensor};
use chatterbox_cuda::{contiguous_view, Elem, Ptx};

const MODULE: &str = "chatterbox_flow_elementwise";

const SOURCE: &str = r#"
// 16-bit values as raw bits (no CUDA headers at run time); bf16 rounds to nearest even.
__device__ __forceinline__ float ld(const float* p, unsigned long long i) { return p[i]; }
__device__ __forceinline__ void st(float* p, unsigned long long i, float v) { p[i] = v; }
struct bf16 { unsigned short b; };
struct f16 { unsigned short b; };
__device__ __forceinline__ float ld(const bf16* p, unsigned long long i) {
    return __uint_as_float(((unsigned int)p[i].b) << 16);
}
__device__ __forceinline__ void st(bf16* p, unsigned long long i, float v) {
    unsigned int u = __float_as_uint(v);
    unsigned short r = (u & 0x7fffffffu) > 0x7f800000u
        ? (unsigned short)((u >> 16) | 0x40u)
        : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    p[i].b = r;
}
__device__ __forceinline__ float ld(const f16* p, unsigned long long i) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i].b));
    return f;
}
__device__ __forceinline__ void st(f16* p, unsigned long long i, float v) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
    p[i].b = r;
}

#define GRID_LOOP(i, n) \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         i < (n); i += (unsigned long long)blockDim.x * gridDim.x)

// y = gelu_erf(y + bias[col]) (exact GELU, as F.gelu(approximate="none"))
template <typename T>
__device__ void bias_gelu(T* y, const T* bias, unsigned int cols, unsigned long long n) {
    GRID_LOOP(i, n) {
        float v = ld(y, i) + ld(bias, i % cols);
        st(y, i, 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
    }
}

// y = y + bias[col] + residual
template <typename T>
__device__ void bias_residual(T* y, const T* bias, const T* res, unsigned int cols,
                              unsigned long long n) {
    GRID_LOOP(i, n) {
        float v = ld(y, i) + ld(bias, i % cols);
        st(y, i, v + ld(res, i));
    }
}

// y = y * tanh(log1p(exp(y))) (torch.nn.Mish)
template <typename T>
__device__ void mish(T* y, unsigned long long n) {
    GRID_LOOP(i, n) {
        float v = ld(y, i);
        st(y, i, v * tanhf(log1pf(expf(v))));
    }
}

#define KERNELS(T, S) \
extern "C" __global__ void flow_bias_gelu_##S(T* y, const T* b, unsigned int cols, \
        unsigned long long n) { bias_gelu(y, b, cols, n); } \
extern "C" __global__ void flow_bias_residual_##S(T* y, const T* b, const T* r, \
        unsigned int cols, unsigned long long n) { bias_residual(y, b, r, cols, n); } \
extern "C" __global__ void flow_mish_##S(T* y, unsigned long long n) { mish(y, n); }

KERNELS(float, f32)
KERNELS(bf16, bf16)
KERNELS(f16, f16)
"#;

static PTX: Ptx = Ptx::new(SOURCE, None, "flow element-wise kernels");

/// Whether the kernels take `x`: contiguous f32, bf16 or f16 on CUDA.
pub(crate) fn applies(x: &Tensor) -> bool {
    x.device().is_cuda()
        && matches!(x.dtype(), DType::F32 | DType::BF16 | DType::F16)
        && x.is_contiguous()
}

fn suffix(dtype: DType) -> candle_core::Result<&'static str> {
    Ok(match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        d => candle_core::bail!("flow element-wise CUDA kernels: dtype {d:?}"),
    })
}

fn launch_config(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 132 * 16) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A contiguous operand's view, of the expected length.
fn view<'a, T: Elem>(
    s: &'a CudaStorage,
    l: &Layout,
    len: usize,
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, T>> {
    let v = contiguous_view::<T>(s, l, what)?;
    if v.len() != len {
        candle_core::bail!("flow element-wise CUDA kernels: {what} {:?}", l.shape())
    }
    Ok(v)
}

/// The in-place kernels; `cols` is the length of the last dimension (the bias's).
enum Op {
    BiasGelu,
    BiasResidual,
    Mish,
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::BiasGelu => "flow_bias_gelu",
            Op::BiasResidual => "flow_bias_residual",
            Op::Mish => "flow_mish",
        }
    }

    fn launch<T: Elem>(
        &self,
        y: &mut CudaStorage,
        yl: &Layout,
        bias: Option<(&CudaStorage, &Layout)>,
        res: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<()> {
        let n = yl.shape().elem_count();
        let cols = yl.dims().last().copied().unwrap_or(1);
        if cols == 0 || n == 0 {
            return Ok(());
        }
        let dev: CudaDevice = y.device.clone();
        let name = format!("{}_{}", self.name(), suffix(T::DTYPE)?);
        let func = dev.get_or_load_custom_func(&name, MODULE, PTX.get()?)?;
        let bias = bias
            .map(|(s, l)| view::<T>(s, l, cols, "bias"))
            .transpose()?;
        let res = res
            .map(|(s, l)| view::<T>(s, l, n, "residual"))
            .transpose()?;
        let (cols32, n64) = (cols as u32, n as u64);
        let Some((a, z)) = yl.contiguous_offsets() else {
            candle_core::bail!("flow element-wise CUDA kernels: non-contiguous input")
        };
        let mut yv = y.as_cuda_slice_mut::<T>()?.slice_mut(a..z);
        let mut builder = func.builder();
        builder.arg(&mut yv);
        if let Some(b) = &bias {
            builder.arg(b);
        }
        if let Some(r) = &res {
            builder.arg(r);
        }
        if bias.is_some() {
            builder.arg(&cols32);
        }
        builder.arg(&n64);
        // SAFETY: the kernel reads and writes the `n` values of `y`, reads `cols` bias values
        // and `n` residual values (lengths checked above).
        unsafe { builder.launch(launch_config(n)) }.w()?;
        Ok(())
    }

    fn dispatch(
        &self,
        y: &mut CudaStorage,
        yl: &Layout,
        bias: Option<(&CudaStorage, &Layout)>,
        res: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<()> {
        match y.dtype() {
            DType::F32 => self.launch::<f32>(y, yl, bias, res),
            DType::BF16 => self.launch::<half::bf16>(y, yl, bias, res),
            DType::F16 => self.launch::<half::f16>(y, yl, bias, res),
            d => candle_core::bail!("flow element-wise CUDA kernels: dtype {d:?}"),
        }
    }
}

impl InplaceOp1 for Op {
    fn name(&self) -> &'static str {
        Op::name(self)
    }

    fn cpu_fwd(&self, _: &mut candle_core::CpuStorage, _: &Layout) -> candle_core::Result<()> {
        candle_core::bail!("{}: CUDA only", Op::name(self))
    }

    fn cuda_fwd(&self, y: &mut CudaStorage, yl: &Layout) -> candle_core::Result<()> {
        self.dispatch(y, yl, None, None)
    }
}

impl InplaceOp2 for Op {
    fn name(&self) -> &'static str {
        Op::name(self)
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<()> {
        candle_core::bail!("{}: CUDA only", Op::name(self))
    }

    fn cuda_fwd(
        &self,
        y: &mut CudaStorage,
        yl: &Layout,
        b: &CudaStorage,
        bl: &Layout,
    ) -> candle_core::Result<()> {
        self.dispatch(y, yl, Some((b, bl)), None)
    }
}

impl InplaceOp3 for Op {
    fn name(&self) -> &'static str {
        Op::name(self)
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<()> {
        candle_core::bail!("{}: CUDA only", Op::name(self))
    }

    fn cuda_fwd(
        &self,
        y: &mut CudaStorage,
        yl: &Layout,
        b: &CudaStorage,
        bl: &Layout,
        r: &CudaStorage,
        rl: &Layout,
    ) -> candle_core::Result<()> {
        self.dispatch(y, yl, Some((b, bl)), Some((r, rl)))
    }
}

/// Checks that `y` and its operands share a dtype and `bias` is one row of `y`'s last
/// dimension.
fn check(y: &Tensor, bias: &Tensor, res: Option<&Tensor>) -> candle_core::Result<()> {
    let cols = y.dims().last().copied().unwrap_or(0);
    let bad_res = res.is_some_and(|r| r.dims() != y.dims() || r.dtype() != y.dtype());
    if bias.elem_count() != cols || bias.dtype() != y.dtype() || bad_res {
        candle_core::bail!(
            "flow element-wise CUDA kernels: y {:?}, bias {:?}, residual {:?}",
            y.shape(),
            bias.shape(),
            res.map(Tensor::shape)
        )
    }
    Ok(())
}

/// `y = gelu_erf(y + bias)`, overwriting `y` (see [`applies`]).
pub(crate) fn bias_gelu_inplace(y: Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    check(&y, bias, None)?;
    y.inplace_op2(&bias.contiguous()?, &Op::BiasGelu)?;
    Ok(y)
}

/// `y = y + bias + residual`, overwriting `y` (see [`applies`]).
pub(crate) fn bias_residual_inplace(
    y: Tensor,
    bias: &Tensor,
    residual: &Tensor,
) -> candle_core::Result<Tensor> {
    check(&y, bias, Some(residual))?;
    y.inplace_op3(
        &bias.contiguous()?,
        &residual.contiguous()?,
        &Op::BiasResidual,
    )?;
    Ok(y)
}

/// `y = mish(y)`, overwriting `y` (see [`applies`]).
pub(crate) fn mish_inplace(y: Tensor) -> candle_core::Result<Tensor> {
    y.inplace_op1(&Op::Mish)?;
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn max_rel(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
        let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
        let scale = b.abs()?.max_all()?.to_scalar::<f32>()?.max(1e-30);
        Ok((a - b)?.abs()?.max_all()?.to_scalar::<f32>()? / scale)
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn match_the_candle_ops() -> candle_core::Result<()> {
        let dev = Device::new_cuda(0)?;
        for (dtype, tol) in [(DType::F32, 1e-6), (DType::BF16, 8e-3), (DType::F16, 1e-3)] {
            let y = (Tensor::randn(0f32, 1.0, (2, 37, 96), &dev)? * 3.0)?;
            let b = Tensor::randn(0f32, 1.0, 96, &dev)?;
            let r = Tensor::randn(0f32, 1.0, (2, 37, 96), &dev)?;
            let (yd, bd, rd) = (y.to_dtype(dtype)?, b.to_dtype(dtype)?, r.to_dtype(dtype)?);
            // the f32 candle ops on the same rounded inputs
            let (yf, bf, rf) = (
                yd.to_dtype(DType::F32)?,
                bd.to_dtype(DType::F32)?,
                rd.to_dtype(DType::F32)?,
            );
            let want = yf.broadcast_add(&bf)?.gelu_erf()?;
            let got = bias_gelu_inplace(yd.copy()?, &bd)?;
            assert!(max_rel(&got, &want)? <= tol, "{dtype:?} gelu");
            let want = (yf.broadcast_add(&bf)? + &rf)?;
            let got = bias_residual_inplace(yd.copy()?, &bd, &rd)?;
            assert!(max_rel(&got, &want)? <= tol, "{dtype:?} residual");
            let want = (&yf * (yf.exp()? + 1.0)?.log()?.tanh()?)?;
            let got = mish_inplace(yd.copy()?)?;
            assert!(max_rel(&got, &want)? <= tol, "{dtype:?} mish");
            assert!(bias_gelu_inplace(yd.copy()?, &bd.narrow(0, 0, 95)?).is_err());
        }
        Ok(())
    }
}
