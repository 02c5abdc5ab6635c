//! The GEMMs' epilogues in place: `gelu_erf(y + bias)` (matcha/transformer.py's `FeedForward`),
//! `y + bias + residual` (its residual adds), `y + bias` (a convolution's bias) and decoder.py's
//! `Mish`.
use super::{check, launch_config, source, suffix, view};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, DType, InplaceOp1, InplaceOp2, InplaceOp3, Layout, Tensor};
use chatterbox_cuda::{Elem, Ptx};

pub(crate) static PTX: Ptx = Ptx::new(source!("pointwise.cu"), None, "flow element-wise kernels");

/// The in-place kernels; `cols` is the length of the last dimension (the bias's).
enum Op {
    BiasGelu,
    BiasResidual,
    BiasAdd,
    Mish,
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::BiasGelu => "flow_bias_gelu",
            Op::BiasResidual => "flow_bias_residual",
            Op::BiasAdd => "flow_bias_add",
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
        // 16-byte vectors when rows hold whole vectors and every operand starts aligned
        let size = T::DTYPE.size_in_bytes();
        let per = 16 / size;
        let aligned = |l: &Layout| (l.start_offset() * size).is_multiple_of(16);
        let vec = !matches!(self, Op::Mish)
            && cols.is_multiple_of(per)
            && aligned(yl)
            && res.is_none_or(|(_, l)| aligned(l));
        let name = format!(
            "{}{}_{}",
            self.name(),
            if vec { "16" } else { "" },
            suffix(T::DTYPE)?
        );
        let func = PTX.function(&dev, &name)?;
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
        unsafe { builder.launch(launch_config(if vec { n / per } else { n })) }.w()?;
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

/// `y = gelu_erf(y + bias)`, overwriting `y` (see [`applies`](super::applies)).
pub(crate) fn bias_gelu_inplace(y: Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    check(&y, bias, None)?;
    y.inplace_op2(&bias.contiguous()?, &Op::BiasGelu)?;
    Ok(y)
}

/// `y = y + bias + residual`, overwriting `y` (see [`applies`](super::applies)).
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

/// `y = y + bias`, overwriting `y` (see [`applies`](super::applies)).
pub(crate) fn bias_add_inplace(y: Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    check(&y, bias, None)?;
    y.inplace_op2(&bias.contiguous()?, &Op::BiasAdd)?;
    Ok(y)
}

/// `y = mish(y)`, overwriting `y` (see [`applies`](super::applies)).
pub(crate) fn mish_inplace(y: Tensor) -> candle_core::Result<Tensor> {
    y.inplace_op1(&Op::Mish)?;
    Ok(y)
}
