//! Compile-once NVRTC for this crate's CUDA kernels (`backbone::cuda_gemv`,
//! `sampling::cuda_top_k_top_p`): the PTX of a kernel source, cached per process.
use std::sync::OnceLock;

/// The PTX of `source`, compiled on the first call with `cell`; `what` names the kernel in
/// the error.
pub(crate) fn ptx(
    cell: &'static OnceLock<Result<String, String>>,
    source: &str,
    what: &str,
) -> candle_core::Result<&'static str> {
    cell.get_or_init(|| {
        candle_core::cuda_backend::cudarc::nvrtc::compile_ptx(source)
            .map(|p| p.to_src())
            .map_err(|e| format!("NVRTC could not compile the {what} kernel: {e:?}"))
    })
    .as_ref()
    .map(String::as_str)
    .map_err(|e| candle_core::Error::Msg(e.clone()))
}
