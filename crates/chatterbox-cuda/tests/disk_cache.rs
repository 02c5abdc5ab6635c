//! The compiled kernels' disk cache on a GPU: filled on the first compilation, read by the
//! next process, repaired when a file is damaged. Its own test binary, because it sets
//! `CHATTERBOX_CUDA_CACHE` for the whole process.
#![cfg(feature = "cuda")]
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use chatterbox_cuda::{disk_cache, Ptx};

/// Runs `k` (which writes 1.0 to x[0]) from `p` on `dev`.
fn run_k(p: &'static Ptx, dev: &CudaDevice) -> candle_core::Result<f32> {
    let stream = dev.cuda_stream();
    let mut x = stream.alloc_zeros::<f32>(1).w()?;
    let func = p.function(dev, "k")?;
    let mut b = func.builder();
    b.arg(&mut x);
    // SAFETY: one thread writes the one f32 of `x`.
    unsafe { b.launch(LaunchConfig::for_num_elems(1)) }.w()?;
    Ok(stream.clone_dtoh(&x).w()?[0])
}

#[test]
#[ignore = "needs NVRTC and a CUDA GPU"]
fn the_disk_cache_is_filled_reused_and_repaired() -> candle_core::Result<()> {
    let candle_core::Device::Cuda(dev) = chatterbox_cuda::open(0)? else {
        candle_core::bail!("not a CUDA device")
    };
    let tmp = tempfile::tempdir()?;
    std::env::set_var(disk_cache::CACHE_ENV, tmp.path());
    let source: &'static str = Box::leak(
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }"
            .to_string()
            .into_boxed_str(),
    );
    // each `fresh()` is what a new process has: nothing compiled yet
    let fresh = || -> &'static Ptx { Box::leak(Box::new(Ptx::new(source, None, "cached kernel"))) };
    let files = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(tmp.path())
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    };
    // compiled, then stored as one cubin (an ELF file)
    assert_eq!(run_k(fresh(), &dev)?, 1.0);
    let stored = files();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(
        stored[0].extension().is_some_and(|e| e == "cubin"),
        "{stored:?}"
    );
    let bytes = std::fs::read(&stored[0])?;
    assert_eq!(&bytes[..4], b"\x7fELF");
    // the next process loads that file: swapped for the cubin of a kernel that writes 2.0,
    // the same source now runs that one
    let other: &'static Ptx = Box::leak(Box::new(Ptx::new(
        "extern \"C\" __global__ void k(float* x) { x[0] = 2.0f; }",
        None,
        "other kernel",
    )));
    assert_eq!(run_k(other, &dev)?, 2.0);
    let other_file = files()
        .into_iter()
        .find(|f| *f != stored[0])
        .expect("a second file");
    std::fs::rename(&other_file, &stored[0])?;
    assert_eq!(run_k(fresh(), &dev)?, 2.0);
    assert_eq!(files(), stored);
    // a damaged file is compiled again and replaced
    std::fs::write(&stored[0], b"not a cubin")?;
    assert_eq!(run_k(fresh(), &dev)?, 1.0);
    assert_eq!(std::fs::read(&stored[0])?, bytes);
    // no cache: compiled, nothing written
    std::env::set_var(disk_cache::CACHE_ENV, "off");
    std::fs::remove_file(&stored[0])?;
    assert_eq!(run_k(fresh(), &dev)?, 1.0);
    assert!(files().is_empty());
    Ok(())
}
