//! The precision of T3 and the flow estimator that a device runs fastest, as users get it by
//! default (`chatterbox speak` / `serve` without `--dtype`).
use candle_core::{DType, Device};

/// bf16 on CUDA GPUs that compute it natively (compute capability 8.0 and newer: Ampere, Ada,
/// Hopper), where T3's fused decode kernels (bf16 only) and the flow's bf16 kernels run, as the
/// H100 figures of docs/benchmarks.md do; f32 elsewhere: the CPU converts every half-precision operation, older GPUs have no bf16
/// arithmetic, and Metal is not measured. The rest of the pipeline runs in f32 whatever this
/// says (the loaders' `dtype` is T3's and the flow estimator's).
pub fn fast_dtype(device: &Device) -> DType {
    fast_dtype_for(cuda_capability(device))
}

/// [`fast_dtype`] for a CUDA device of compute capability `(major, minor)`, or for any other
/// device (`None`).
pub fn fast_dtype_for(cuda_capability: Option<(i32, i32)>) -> DType {
    match cuda_capability {
        Some((major, _)) if major >= 8 => DType::BF16,
        _ => DType::F32,
    }
}

/// The compute capability of a CUDA `device` (`None` elsewhere, or when the driver does not
/// answer).
fn cuda_capability(device: &Device) -> Option<(i32, i32)> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => {
            use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute as A;
            let ctx = d.cuda_stream().context().clone();
            let major = ctx
                .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                .ok()?;
            let minor = ctx
                .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                .ok()?;
            Some((major, minor))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_only_on_cuda_gpus_with_native_bf16() {
        assert_eq!(fast_dtype(&Device::Cpu), DType::F32);
        assert_eq!(fast_dtype_for(None), DType::F32);
        for (cc, want) in [
            ((7, 5), DType::F32),
            ((8, 0), DType::BF16),
            ((8, 9), DType::BF16),
            ((9, 0), DType::BF16),
        ] {
            assert_eq!(fast_dtype_for(Some(cc)), want, "{cc:?}");
        }
    }
}
