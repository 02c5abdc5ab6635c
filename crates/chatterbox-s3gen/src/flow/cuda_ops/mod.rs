//! The flow's element-wise work around its GEMMs as single CUDA kernels, one module (and one
//! `.cu` file, compiled after `common.cuh`) per fused op (f32, bf16, f16;
//! computed in f32, rounded where the reference's ops round): `gelu_erf(y + bias)` of
//! matcha/transformer.py's `FeedForward`, `y + bias + residual` of its residual adds, a
//! convolution's bias, decoder.py's `Mish`, and for decoder.py's `CausalBlock1D` /
//! `CausalResnetBlock1D` (upstream 5de7a54) the convolution's input columns (im2col of
//! `(x + time embedding) * mask`) and the block's tail `mish(LayerNorm(y + bias)) * mask`; for
//! the encoder's relative-position attention (transformer/attention.py) the score sum
//! `(ac + rel_shift(bd)) * scale + key bias` in place, instead of candle's pad, reshape,
//! copy, strided add, affine and broadcast add over the `(b, h, t, 2t - 1)` position scores.
//! candle runs each as 2-10 kernels (pad, narrow, cat, broadcast add and multiply, upcast, the
//! activation, downcast), each a pass over the tensor: ncu on the H100 put a ResNet block of
//! 16 x 1000 frames at ~1.2 ms, of which its two GEMMs took 30 us.
use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
use candle_core::{CudaStorage, DType, Layout, Tensor};
use chatterbox_cuda::{contiguous_view, Elem};

mod block_tail;
mod columns;
mod pointwise;
mod rel_scores;
#[cfg(test)]
mod tests;

pub(crate) use block_tail::block_tail;
pub(crate) use columns::columns;
pub(crate) use pointwise::{
    bias_add_inplace, bias_gelu_inplace, bias_residual_inplace, mish_inplace,
};
pub(crate) use rel_scores::rel_scores;

/// An op's CUDA source: the device functions every kernel here uses (`common.cuh`: 16-bit loads
/// and stores, rounding, vector loads, warp sums, the grid loop), then the op's `.cu`.
macro_rules! source {
    ($file:literal) => {
        concat!(include_str!("common.cuh"), include_str!($file))
    };
}
use source;

/// The ops' modules, one each.
pub(crate) static PTX: [&chatterbox_cuda::Ptx; 4] = [
    &pointwise::PTX,
    &columns::PTX,
    &block_tail::PTX,
    &rel_scores::PTX,
];

/// Whether the kernels take `x`: contiguous f32, bf16 or f16 on CUDA.
pub(crate) fn applies(x: &Tensor) -> bool {
    x.device().is_cuda()
        && matches!(x.dtype(), DType::F32 | DType::BF16 | DType::F16)
        && x.is_contiguous()
}

pub(super) fn suffix(dtype: DType) -> candle_core::Result<&'static str> {
    Ok(match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        d => candle_core::bail!("flow element-wise CUDA kernels: dtype {d:?}"),
    })
}

pub(super) fn launch_config(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 132 * 16) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A contiguous operand's view, of the expected length.
pub(super) fn view<'a, T: Elem>(
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

/// The CUDA operand `t` of `what` as a contiguous view of `len` values of `T`.
pub(super) fn operand<'a, T: Elem>(
    s: &'a candle_core::Storage,
    l: &Layout,
    len: usize,
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, T>> {
    match s {
        candle_core::Storage::Cuda(c) => view::<T>(c, l, len, what),
        _ => candle_core::bail!("flow CUDA kernels: the {what} is not on the CUDA device"),
    }
}

/// Checks that `y` and its operands share a dtype and `bias` is one row of `y`'s last
/// dimension.
pub(super) fn check(y: &Tensor, bias: &Tensor, res: Option<&Tensor>) -> candle_core::Result<()> {
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
