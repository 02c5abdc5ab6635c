//! Compile-once NVRTC and device queries for this crate's CUDA kernels
//! (`tokenizer::cuda_fsmn`, `flow::cuda_attention`, `flow::cuda_ops`).
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use std::sync::OnceLock;

/// The PTX of `source` for `arch` (NVRTC's default when `None`), compiled on the first call
/// with `cell`; `what` names the kernels in the error.
pub(crate) fn compile_once(
    cell: &'static OnceLock<Result<String, String>>,
    source: &str,
    arch: Option<&'static str>,
    what: &str,
) -> candle_core::Result<&'static str> {
    use candle_core::cuda_backend::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
    cell.get_or_init(|| {
        let opts = CompileOptions {
            arch,
            ..Default::default()
        };
        compile_ptx_with_opts(source, opts)
            .map(|p| p.to_src())
            .map_err(|e| format!("NVRTC could not compile the {what}: {e:?}"))
    })
    .as_ref()
    .map(String::as_str)
    .map_err(|e| candle_core::Error::Msg(e.clone()))
}

/// Whether `dev` has the sm_80 tensor-core instructions (`mma.sync` on bf16, `ldmatrix`,
/// `cp.async`).
pub(crate) fn has_sm80(dev: &CudaDevice) -> candle_core::Result<bool> {
    use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute as A;
    let major = dev
        .cuda_stream()
        .context()
        .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .w()?;
    Ok(major >= 8)
}

/// The element types the kernels take (f32, bf16, f16 storages).
pub(crate) trait Elem:
    candle_core::cuda_backend::CudaDType
    + candle_core::WithDType
    + candle_core::cuda_backend::cudarc::driver::DeviceRepr
{
}

impl<T> Elem for T where
    T: candle_core::cuda_backend::CudaDType
        + candle_core::WithDType
        + candle_core::cuda_backend::cudarc::driver::DeviceRepr
{
}
