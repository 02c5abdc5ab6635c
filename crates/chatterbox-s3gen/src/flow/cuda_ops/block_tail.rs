//! `CausalBlock1D`'s tail after its convolution, `mish(LayerNorm(y + bias)) * mask`, as one
//! kernel.
use super::{check, operand, source, suffix};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, DType, InplaceOp1, Layout, Tensor};
use chatterbox_cuda::{Elem, Ptx};

pub(crate) static PTX: Ptx = Ptx::new(source!("block_tail.cu"), None, "flow block tail kernel");

/// `mish(LayerNorm(y + bias)) * mask` in place (decoder.py `CausalBlock1D` after its
/// convolution).
struct BlockTail<'a> {
    bias: &'a Tensor,
    weight: &'a Tensor,
    norm_bias: &'a Tensor,
    mask: Option<&'a Tensor>,
    eps: f32,
}

impl BlockTail<'_> {
    fn launch<T: Elem>(&self, y: &mut CudaStorage, yl: &Layout) -> candle_core::Result<()> {
        let c = yl.dims().last().copied().unwrap_or(0);
        let rows = yl.shape().elem_count() / c.max(1);
        if rows == 0 || c == 0 {
            return Ok(());
        }
        if rows.div_ceil(8) > i32::MAX as usize {
            candle_core::bail!("flow block tail: input {:?} is too large", yl.shape())
        }
        let guards = [self.bias, self.weight, self.norm_bias].map(|t| t.storage_and_layout());
        let [bv, wv, nv] = [(0, "bias"), (1, "norm weight"), (2, "norm bias")]
            .map(|(i, what)| operand::<T>(&guards[i].0, guards[i].1, c, what));
        let (bv, wv, nv) = (bv?, wv?, nv?);
        let mask = self.mask.map(|m| m.storage_and_layout());
        let mv = match &mask {
            Some((s, l)) => Some(operand::<T>(s, l, rows, "mask")?),
            None => None,
        };
        let dev: CudaDevice = y.device.clone();
        let name = format!("flow_block_tail_{}", suffix(T::DTYPE)?);
        let func = PTX.function(&dev, &name)?;
        let Some((a, z)) = yl.contiguous_offsets() else {
            candle_core::bail!("flow block tail: non-contiguous input")
        };
        let mut yv = y.as_cuda_slice_mut::<T>()?.slice_mut(a..z);
        let (rows32, c32) = (rows as u32, c as u32);
        let null = 0u64;
        let mut builder = func.builder();
        builder.arg(&mut yv);
        builder.arg(&bv);
        builder.arg(&wv);
        builder.arg(&nv);
        match &mv {
            Some(m) => builder.arg(m),
            None => builder.arg(&null),
        };
        builder.arg(&rows32);
        builder.arg(&c32);
        builder.arg(&self.eps);
        let cfg = LaunchConfig {
            grid_dim: (rows.div_ceil(8) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: one warp per row of `y` (rows * c values); the parameters hold c values and
        // the mask `rows` (checked above).
        unsafe { builder.launch(cfg) }.w()?;
        Ok(())
    }
}

impl InplaceOp1 for BlockTail<'_> {
    fn name(&self) -> &'static str {
        "flow-block-tail-cuda"
    }

    fn cpu_fwd(&self, _: &mut candle_core::CpuStorage, _: &Layout) -> candle_core::Result<()> {
        candle_core::bail!("flow-block-tail-cuda: CUDA only")
    }

    fn cuda_fwd(&self, y: &mut CudaStorage, yl: &Layout) -> candle_core::Result<()> {
        match y.dtype() {
            DType::F32 => self.launch::<f32>(y, yl),
            DType::BF16 => self.launch::<half::bf16>(y, yl),
            DType::F16 => self.launch::<half::f16>(y, yl),
            d => candle_core::bail!("flow block tail: dtype {d:?}"),
        }
    }
}

/// `y = mish(norm(y + bias)) * mask` in place for a contiguous `y (n, t, c)` (see [`applies`](super::applies)),
/// `norm` a LayerNorm with a bias, `mask (n, t, 1)` or none.
pub(crate) fn block_tail(
    y: Tensor,
    bias: &Tensor,
    norm: &candle_nn::LayerNorm,
    mask: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let rows = y.elem_count() / y.dims().last().copied().unwrap_or(1).max(1);
    let Some(norm_bias) = norm.bias() else {
        candle_core::bail!("flow block tail: the LayerNorm has no bias")
    };
    check(&y, bias, None)?;
    check(&y, norm.weight(), None)?;
    check(&y, norm_bias, None)?;
    if mask.is_some_and(|m| m.elem_count() != rows || m.dtype() != y.dtype()) || !norm.remove_mean()
    {
        candle_core::bail!(
            "flow block tail: y {:?}, mask {:?}",
            y.shape(),
            mask.map(Tensor::shape)
        )
    }
    let (bias, weight, norm_bias) = (
        bias.contiguous()?,
        norm.weight().contiguous()?,
        norm_bias.contiguous()?,
    );
    let mask = mask.map(Tensor::contiguous).transpose()?;
    y.inplace_op1(&BlockTail {
        bias: &bias,
        weight: &weight,
        norm_bias: &norm_bias,
        mask: mask.as_ref(),
        eps: norm.eps() as f32,
    })?;
    Ok(y)
}
