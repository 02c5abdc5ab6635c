//! Device facts the kernels' launchers check.
use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute as A;
use candle_core::cuda_backend::{CudaDevice, WrapErr};

fn attribute(dev: &CudaDevice, what: A) -> candle_core::Result<i32> {
    dev.cuda_stream().context().attribute(what).w()
}

/// `(major, minor)` compute capability of `dev` (sm_80 and newer have `mma.sync` on bf16 and
/// TF32, `ldmatrix` and `cp.async`).
pub fn compute_capability(dev: &CudaDevice) -> candle_core::Result<(i32, i32)> {
    Ok((
        attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    ))
}

/// The number of multiprocessors of `dev` (at least 1).
pub fn multiprocessors(dev: &CudaDevice) -> candle_core::Result<usize> {
    Ok(attribute(dev, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize)
}
