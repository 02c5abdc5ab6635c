//! Shared CUDA plumbing of the chatterbox crates (see the README). Everything here needs the
//! `cuda` feature.
#![cfg_attr(feature = "cuda", doc = include_str!("../README.md"))]

#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod graph;
#[cfg(feature = "cuda")]
mod ptx;
#[cfg(feature = "cuda")]
mod view;

#[cfg(feature = "cuda")]
pub use device::{compute_capability, multiprocessors, retain_freed_memory, shared_memory};
#[cfg(feature = "cuda")]
pub use graph::{capture, Graph};
#[cfg(feature = "cuda")]
pub use ptx::Ptx;
#[cfg(feature = "cuda")]
pub use view::{contiguous_view, Elem};

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;

    static GOOD: Ptx = Ptx::new(
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }",
        None,
        "test kernel",
    );
    static BAD: Ptx = Ptx::new("this is not CUDA", None, "broken test kernel");

    #[test]
    #[ignore = "needs NVRTC and a CUDA GPU"]
    fn compiles_once_and_reports_the_device() -> candle_core::Result<()> {
        let first = GOOD.get()?;
        assert!(first.contains(".entry k"), "{first}");
        assert!(std::ptr::eq(first, GOOD.get()?), "compiled twice");
        for _ in 0..2 {
            let err = BAD.get().expect_err("bad source compiled").to_string();
            assert!(err.contains("broken test kernel"), "{err}");
        }
        // a failure is reported once, however often it is asked
        let mut reports = 0;
        for _ in 0..3 {
            assert!(!BAD.compiled(|_| reports += 1));
            assert!(GOOD.compiled(|_| reports += 100));
        }
        assert_eq!(reports, 1);
        let candle_core::Device::Cuda(dev) = candle_core::Device::new_cuda(0)? else {
            candle_core::bail!("not a CUDA device")
        };
        let (major, minor) = compute_capability(&dev)?;
        assert!(major >= 3 && minor >= 0, "{major}.{minor}");
        assert_eq!(compute_capability(&dev)?, (major, minor));
        assert!(multiprocessors(&dev)? >= 1);
        Ok(())
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn freed_memory_stays_in_the_pool() -> candle_core::Result<()> {
        use candle_core::cuda_backend::cudarc::driver::sys;
        use candle_core::cuda_backend::WrapErr;
        let candle_core::Device::Cuda(dev) = candle_core::Device::new_cuda(0)? else {
            candle_core::bail!("not a CUDA device")
        };
        let threshold = || -> candle_core::Result<u64> {
            let mut value = 0u64;
            // SAFETY: the attribute's value is a u64, as the driver writes it.
            unsafe {
                sys::cuMemPoolGetAttribute(
                    device::default_pool(&dev)?,
                    sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    (&mut value as *mut u64).cast(),
                )
            }
            .result()
            .w()?;
            Ok(value)
        };
        retain_freed_memory(&dev)?;
        assert_eq!(threshold()?, u64::MAX);
        // a second call changes nothing and does not fail
        retain_freed_memory(&dev)?;
        assert_eq!(threshold()?, u64::MAX);
        Ok(())
    }
}
