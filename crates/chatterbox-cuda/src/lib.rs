//! Shared CUDA plumbing of the chatterbox crates (see the README). Everything here needs the
//! `cuda` feature.
#![cfg_attr(feature = "cuda", doc = include_str!("../README.md"))]

#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod ptx;
#[cfg(feature = "cuda")]
mod view;

#[cfg(feature = "cuda")]
pub use device::{compute_capability, multiprocessors, shared_memory};
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
        let candle_core::Device::Cuda(dev) = candle_core::Device::new_cuda(0)? else {
            candle_core::bail!("not a CUDA device")
        };
        let (major, minor) = compute_capability(&dev)?;
        assert!(major >= 3 && minor >= 0, "{major}.{minor}");
        assert_eq!(compute_capability(&dev)?, (major, minor));
        assert!(multiprocessors(&dev)? >= 1);
        Ok(())
    }
}
