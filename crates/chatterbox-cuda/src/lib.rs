//! Shared CUDA plumbing of the chatterbox crates (see the README). Everything here needs the
//! `cuda` feature.
#![cfg_attr(feature = "cuda", doc = include_str!("../README.md"))]

mod arch;
mod cuda_only;
#[cfg(feature = "cuda")]
mod device;
pub mod disk_cache;
#[cfg(feature = "cuda")]
mod graph;
#[cfg(feature = "cuda")]
mod prepare;
#[cfg(feature = "cuda")]
mod ptx;
#[cfg(feature = "cuda")]
mod view;

pub use arch::{cubin_target, Target};
/// candle, for the paths in [`cuda_only_op`]'s expansion.
#[doc(hidden)]
pub use candle_core as __candle;
#[cfg(feature = "cuda")]
pub use device::ordered;
#[cfg(feature = "cuda")]
pub use device::{compute_capability, multiprocessors, open, retain_freed_memory, shared_memory};
#[cfg(feature = "cuda")]
pub use graph::{capture, Graph};
#[cfg(feature = "cuda")]
pub use prepare::{prepare, Preparation, PREPARE_ENV};
#[cfg(feature = "cuda")]
pub use ptx::{Func, Ptx};
#[cfg(feature = "cuda")]
pub use view::{contiguous_view, Elem};

/// Without the `cuda` feature there is no CUDA device to open: the error says so.
#[cfg(not(feature = "cuda"))]
pub fn open(_ordinal: usize) -> candle_core::Result<candle_core::Device> {
    Err(candle_core::Error::NotCompiledWithCudaSupport)
}

/// Without the `cuda` feature every device is the CPU or Metal, whose work is ordered.
#[cfg(not(feature = "cuda"))]
pub fn ordered(_device: &candle_core::Device) -> bool {
    true
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;

    static GOOD: Ptx = Ptx::new(
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }",
        None,
        "test kernel",
    );
    static BAD: Ptx = Ptx::new("this is not CUDA", None, "broken test kernel");
    static HOPPER_ONLY: Ptx = Ptx::new(
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }",
        Some("compute_90a"),
        "Hopper test kernel",
    );

    fn cuda() -> candle_core::Result<candle_core::cuda_backend::CudaDevice> {
        match crate::open(0)? {
            candle_core::Device::Cuda(dev) => Ok(dev),
            _ => candle_core::bail!("not a CUDA device"),
        }
    }

    #[test]
    #[ignore = "needs NVRTC and a CUDA GPU"]
    fn compiles_once_for_the_gpu_and_reports_failures_once() -> candle_core::Result<()> {
        let dev = cuda()?;
        let device = candle_core::Device::Cuda(dev.clone());
        // (tests/disk_cache.rs launches a kernel)
        GOOD.function(&dev, "k")?;
        let m = GOOD.module(&dev).map_err(candle_core::Error::Msg)?;
        assert!(
            std::sync::Arc::ptr_eq(&m, &GOOD.module(&dev).map_err(candle_core::Error::Msg)?),
            "loaded twice"
        );
        for _ in 0..2 {
            let err = BAD
                .function(&dev, "k")
                .err()
                .expect("bad source compiled")
                .to_string();
            assert!(err.contains("broken test kernel"), "{err}");
        }
        let err = GOOD
            .function(&dev, "nope")
            .err()
            .expect("a missing kernel")
            .to_string();
        assert!(err.contains("no kernel nope"), "{err}");
        // a failure is reported once, however often it is asked
        let mut reports = 0;
        for _ in 0..3 {
            assert!(!BAD.available(&device, |_| reports += 1));
            assert!(GOOD.available(&device, |_| reports += 100));
            assert!(!GOOD.available(&candle_core::Device::Cpu, |_| reports += 1000));
        }
        assert_eq!(reports, 1);
        let (major, minor) = compute_capability(&dev)?;
        assert!(major >= 3 && minor >= 0, "{major}.{minor}");
        assert_eq!(compute_capability(&dev)?, (major, minor));
        assert!(multiprocessors(&dev)? >= 1);
        // sm_90a code runs on Hopper only, and is refused by name elsewhere
        if (major, minor) == (9, 0) {
            HOPPER_ONLY.function(&dev, "k")?;
        } else {
            let err = HOPPER_ONLY
                .function(&dev, "k")
                .err()
                .expect("sm_90a elsewhere")
                .to_string();
            assert!(
                err.contains("Hopper test kernel") && err.contains("sm_90"),
                "{err}"
            );
        }
        Ok(())
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn open_gives_each_owner_one_ordered_stream_without_event_tracking() -> candle_core::Result<()>
    {
        use candle_core::Tensor;
        let a = open(0)?;
        let b = open(0)?;
        for d in [&a, &b] {
            assert!(ordered(d));
            assert!(!d.as_cuda_device()?.is_event_tracking());
        }
        assert!(!a.same_device(&b), "two owners share a stream");
        // candle's own constructor gives per-thread streams, which are not ordered
        assert!(!ordered(&candle_core::Device::new_cuda(0)?));
        assert!(ordered(&candle_core::Device::Cpu));
        // work issued from other threads runs in issue order on the one stream: each thread
        // reads what the previous one wrote, with no wait between them
        let mut x = Tensor::zeros(1 << 20, candle_core::DType::F32, &a)?;
        for _ in 0..8 {
            x = std::thread::scope(|s| s.spawn(|| &x + 1.0).join())
                .map_err(|_| candle_core::Error::Msg("thread panicked".into()))??;
        }
        let v = x.to_vec1::<f32>()?;
        assert!(v.iter().all(|&y| y == 8.0), "{:?}", &v[..4]);
        Ok(())
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn freed_memory_stays_in_the_pool() -> candle_core::Result<()> {
        use candle_core::cuda_backend::cudarc::driver::sys;
        use candle_core::cuda_backend::WrapErr;
        let candle_core::Device::Cuda(dev) = crate::open(0)? else {
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
