//! Typed views of custom-op operands.
use candle_core::cuda_backend::cudarc::driver::{CudaView, DeviceRepr};
use candle_core::cuda_backend::CudaDType;
use candle_core::{CudaStorage, Layout, WithDType};

/// The element types a generic kernel launcher can take: stored by candle's CUDA backend and
/// passed to kernels as device values.
pub trait Elem: CudaDType + WithDType + DeviceRepr {}

impl<T: CudaDType + WithDType + DeviceRepr> Elem for T {}

/// The `T` values of a contiguous operand (its layout's offset range), or an error naming
/// `what` when the layout is strided or the storage holds another dtype.
pub fn contiguous_view<'a, T: Elem>(
    storage: &'a CudaStorage,
    layout: &Layout,
    what: &str,
) -> candle_core::Result<CudaView<'a, T>> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what} must be contiguous")
    };
    Ok(storage.as_cuda_slice::<T>()?.slice(start..end))
}
