//! Opening a CUDA device (the one place that does: its stream, its event tracking and its
//! memory pool), and the device facts the kernels' launchers check, queried from the driver
//! once per device.
use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute as A;
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use std::sync::Mutex;

/// What the launchers ask about a device.
#[derive(Clone, Copy)]
struct Facts {
    capability: (i32, i32),
    multiprocessors: usize,
    shared_per_block: usize,
    shared_per_multiprocessor: usize,
}

/// Facts by device ordinal: the launchers ask on every call (some once per layer), the answer
/// never changes.
static FACTS: Mutex<Vec<(usize, Facts)>> = Mutex::new(Vec::new());

fn facts(dev: &CudaDevice) -> candle_core::Result<Facts> {
    let ctx = dev.cuda_stream().context().clone();
    let ordinal = ctx.ordinal();
    let cached = |v: &[(usize, Facts)]| v.iter().find(|(o, _)| *o == ordinal).map(|(_, f)| *f);
    if let Some(f) = FACTS.lock().ok().and_then(|v| cached(&v)) {
        return Ok(f);
    }
    let attribute = |what: A| ctx.attribute(what).w();
    let f = Facts {
        capability: (
            attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        multiprocessors: attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize,
        shared_per_block: attribute(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
            .max(0) as usize,
        shared_per_multiprocessor: attribute(
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
        )?
        .max(0) as usize,
    };
    if let Ok(mut v) = FACTS.lock() {
        if cached(&v).is_none() {
            v.push((ordinal, f));
        }
    }
    Ok(f)
}

/// `(major, minor)` compute capability of `dev` (sm_80 and newer have `mma.sync` on bf16 and
/// TF32, `ldmatrix` and `cp.async`).
pub fn compute_capability(dev: &CudaDevice) -> candle_core::Result<(i32, i32)> {
    Ok(facts(dev)?.capability)
}

/// The number of multiprocessors of `dev` (at least 1).
pub fn multiprocessors(dev: &CudaDevice) -> candle_core::Result<usize> {
    Ok(facts(dev)?.multiprocessors)
}

/// `(per block, per multiprocessor)`: the most shared memory one block may use (after opting
/// in past 48 KiB with the function's `MAX_DYNAMIC_SHARED_SIZE_BYTES`), and a multiprocessor's
/// whole shared memory, in bytes.
pub fn shared_memory(dev: &CudaDevice) -> candle_core::Result<(usize, usize)> {
    let f = facts(dev)?;
    Ok((f.shared_per_block, f.shared_per_multiprocessor))
}

/// The driver's default memory pool of `dev`, which candle's allocations come from.
pub(crate) fn default_pool(
    dev: &CudaDevice,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::sys::CUmemoryPool> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let ctx = dev.cuda_stream().context().clone();
    ctx.bind_to_thread().w()?;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `pool` receives the device's default pool, which lives as long as the device.
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }
        .result()
        .w()?;
    Ok(pool)
}

/// Opens CUDA device `ordinal` for a computation with one owner: every chatterbox binary, test
/// and bench opens its CUDA devices here, and everything that works together (a model, the
/// batch it serves, the watermark on its output) shares the returned device.
///
/// - **One ordered stream.** The device gets a stream of its own, and every thread that works
///   through it (or a clone of it) enqueues onto that stream, so the GPU runs its work in the
///   order the host issued it, whichever thread issued it. candle's `Device::new_cuda` uses
///   the per-thread default stream instead: each host thread gets its own stream, nothing
///   orders them, and a tensor made, read or dropped on one thread (rayon's) while another
///   thread's kernels still use it is a race. Batched serving failed with NaN mels that way
///   (up to 48 of 64 requests, H200, 2026-11-29) and may give wrong audio with no error; on
///   one stream none failed, without any device wait, and it ran faster.
/// - **No event tracking.** On one stream there is no cross-stream edge to track, so candle's
///   per-allocation CUDA events (recorded on every tensor, waited on by nothing) are off;
///   with them on, CUDA graph capture also fails.
/// - **Freed memory stays pooled** ([`retain_freed_memory`]).
///
/// Each call opens a new stream: two devices opened here are unordered with each other (and
/// candle refuses to mix their tensors), so open one per owner and clone it. A CUDA graph is
/// captured from the stream, so nothing else may enqueue onto the device while its owner
/// captures one.
pub fn open(ordinal: usize) -> candle_core::Result<candle_core::Device> {
    let device = candle_core::Device::new_cuda_with_stream(ordinal)?;
    let dev = device.as_cuda_device()?;
    // SAFETY: the device has one stream, which every thread using it enqueues onto: stream
    // order is the only synchronisation its tensors need (nothing is freed, read or written
    // on another stream). Called before any tensor of the device exists.
    unsafe { dev.disable_event_tracking() };
    retain_freed_memory(dev)?;
    Ok(device)
}

/// Whether the work that several host threads issue on `device` runs in the order they issued
/// it: the CPU, Metal (one command queue) and a CUDA device from [`open`], but not one from
/// candle's `Device::new_cuda`, whose per-thread streams leave each thread's work unordered
/// with every other's. A computation that spreads its device work over threads (rayon) may do
/// so only on an ordered device, and keeps it on one thread otherwise.
pub fn ordered(device: &candle_core::Device) -> bool {
    // the driver's handle of the calling thread's own default stream (`CU_STREAM_PER_THREAD`)
    const PER_THREAD: usize = 0x2;
    match device {
        candle_core::Device::Cuda(dev) => dev.cuda_stream().cu_stream() as usize != PER_THREAD,
        _ => true,
    }
}

/// Keeps device memory that is freed on `dev` in the driver's default pool, for the next
/// allocations, instead of handing it back to the system at every synchronization (the pool's
/// release threshold, 0 by default, becomes unlimited). Candle allocates every tensor from
/// that pool (`cuMemAllocAsync`); without this a model called once per request maps its
/// working memory afresh on each call. PyTorch's caching allocator keeps memory the same way.
/// The setting is the device's, for the whole process.
pub fn retain_freed_memory(dev: &CudaDevice) -> candle_core::Result<()> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let pool = default_pool(dev)?;
    let mut threshold = u64::MAX;
    // SAFETY: the attribute's value is a u64, as the driver reads it.
    unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
    }
    .result()
    .w()
}
