//! The models' CUDA kernels compiled on background threads while the weights load
//! ([`chatterbox_cuda::prepare`]): on a fresh machine the first synthesis would otherwise
//! wait for each kernel module in turn (NVRTC for this project's kernels, the driver's PTX
//! JIT for candle's). Nothing is done on the CPU or Metal, or with
//! `CHATTERBOX_CUDA_PREPARE=0`.
use candle_core::Device;

/// Starts compiling every kernel the models may run on `device` (once per device), and
/// returns at once.
pub(crate) fn prepare(device: &Device) {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        let mut kernels = chatterbox_t3::cuda_kernels();
        kernels.extend(chatterbox_s3gen::cuda_kernels());
        kernels.extend(chatterbox_vocoder::cuda_kernels());
        kernels.extend(chatterbox_speaker::cuda_kernels());
        // the threads run on; a kernel still compiling when it is needed is waited for
        drop(chatterbox_cuda::prepare(dev, &kernels));
    }
    #[cfg(not(feature = "cuda"))]
    let _ = device;
}
