//! Kernels compiled and loaded on background threads while a model loads, so that the first
//! synthesis on a fresh machine does not wait for them one after the other: this crate's
//! [`Ptx`] sources (NVRTC, then the disk cache) and candle's own kernel modules, which candle
//! ships as PTX that the CUDA driver JIT-compiles when a module is first used (~20 s for the
//! modules a model uses on an H100's host, 7.6 s of it the binary operations').
//!
//! The driver compiles one module at a time per context (threads sharing candle's context
//! took as long as one thread), so candle's modules are compiled on a few threads with a
//! context each, largest first; the driver keeps the machine code in its disk cache
//! (`~/.nv/ComputeCache`), where candle's own load then finds it. The longest module bounds
//! the wait: shipping candle's kernels as cubins would need candle to load them.
use crate::Ptx;
use candle_core::cuda_backend::cudarc::driver::sys;
use candle_core::cuda_backend::{kernels, CudaDevice, DeviceId};
use std::collections::VecDeque;
use std::ffi::CString;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// The environment variable that turns the preparation off (`0`): kernels are then compiled
/// when first used, on the thread that uses them.
pub const PREPARE_ENV: &str = "CHATTERBOX_CUDA_PREPARE";

/// candle's kernel modules that the Chatterbox models use, each with one of its kernels
/// (candle loads a module through one of its functions). The quantized module is left out.
const CANDLE: [(&kernels::Module, &str); 10] = [
    (&kernels::CAST, "cast_f32_bf16"),
    (&kernels::AFFINE, "affine_f32"),
    (&kernels::BINARY, "badd_f32"),
    (&kernels::UNARY, "uneg_f32"),
    (&kernels::FILL, "fill_u8"),
    (&kernels::INDEXING, "is_u32_f32"),
    (&kernels::REDUCE, "sum_f32"),
    (&kernels::TERNARY, "where_u32_f32"),
    (&kernels::CONV, "im2col1d_f32"),
    (&kernels::SORT, "asort_asc_f32"),
];

/// Threads (each with its own CUDA context) that compile candle's modules.
const CANDLE_THREADS: usize = 4;

/// The background threads of [`prepare`]. Dropping it leaves them running to the end.
#[derive(Debug)]
pub struct Preparation {
    threads: Vec<JoinHandle<()>>,
}

impl Preparation {
    /// Waits until every kernel has been compiled and loaded (or has failed: a kernel that
    /// cannot load reports its error when it is used).
    pub fn wait(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Compiles and loads `own` (on at most one fewer threads than the machine's cores) and
/// candle's modules (on up to four more, each with a CUDA context of its own, while the
/// driver's JIT cache is on) for `dev` on background threads, and returns at once; once per device and process
/// (a later call returns an empty [`Preparation`]). Nothing changes in what the kernels
/// compute; a kernel asked for while it is still compiling is waited for. Off when
/// `CHATTERBOX_CUDA_PREPARE=0`.
pub fn prepare(dev: &CudaDevice, own: &[&'static Ptx]) -> Preparation {
    // once per device (candle keeps its modules per `CudaDevice`)
    static PREPARED: Mutex<Vec<DeviceId>> = Mutex::new(Vec::new());
    let first = PREPARED.lock().is_ok_and(|mut v| {
        let first = !v.contains(&dev.id());
        if first {
            v.push(dev.id());
        }
        first
    });
    if !first || std::env::var(PREPARE_ENV).is_ok_and(|v| v == "0") {
        return Preparation { threads: vec![] };
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut threads = Vec::new();
    // the driver's JIT cache is what hands candle the modules compiled here
    let driver_cache = !std::env::var("CUDA_CACHE_DISABLE").is_ok_and(|v| v == "1");
    if driver_cache {
        // largest first, each to the thread with the least PTX so far
        let mut modules = CANDLE.to_vec();
        modules.sort_by_key(|(m, _)| std::cmp::Reverse(m.ptx().len()));
        let n = CANDLE_THREADS.min(cores.saturating_sub(1)).max(1);
        let mut shares: Vec<(usize, Vec<(&'static kernels::Module, &'static str)>)> =
            vec![(0, Vec::new()); n];
        for m in modules {
            if let Some(s) = shares.iter_mut().min_by_key(|(load, _)| *load) {
                s.0 += m.0.ptx().len();
                s.1.push(m);
            }
        }
        for (i, (_, share)) in shares.into_iter().enumerate() {
            let dev = dev.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("cuda-jit-{i}"))
                .spawn(move || candle_modules(&dev, &share));
            threads.extend(spawned.ok());
        }
    }
    let own: VecDeque<&'static Ptx> = own.iter().copied().collect();
    let n = cores.saturating_sub(1).clamp(1, own.len().max(1));
    let own = Arc::new(Mutex::new(own));
    for i in 0..n {
        let (dev, own) = (dev.clone(), own.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("cuda-prepare-{i}"))
            .spawn(move || loop {
                let next = own.lock().ok().and_then(|mut q| q.pop_front());
                let Some(p) = next else { break };
                let t0 = Instant::now();
                let r = p.module(&dev);
                tracing::debug!(
                    "prepared the {} in {:.0} ms{}",
                    p.what(),
                    t0.elapsed().as_secs_f64() * 1e3,
                    r.err().map(|e| format!(": {e}")).unwrap_or_default()
                );
            });
        threads.extend(spawned.ok());
    }
    Preparation { threads }
}

/// Compiles `modules` in a context of this thread's own (the driver's cache keeps the
/// result), then loads them into candle's (a cache hit).
fn candle_modules(dev: &CudaDevice, modules: &[(&'static kernels::Module, &'static str)]) {
    let ordinal = dev.cuda_stream().context().ordinal();
    match OwnContext::new(ordinal) {
        Ok(ctx) => {
            for (m, f) in modules {
                let t0 = Instant::now();
                let r = ctx.jit(m.ptx());
                tracing::debug!(
                    "compiled candle's module of {f} in {:.0} ms{}",
                    t0.elapsed().as_secs_f64() * 1e3,
                    r.err().map(|e| format!(": {e}")).unwrap_or_default()
                );
            }
        }
        Err(e) => tracing::debug!("no context of its own for candle's modules ({e})"),
    }
    for (m, f) in modules {
        let t0 = Instant::now();
        let r = dev.get_or_load_func(f, m);
        tracing::debug!(
            "loaded candle's module of {f} in {:.0} ms{}",
            t0.elapsed().as_secs_f64() * 1e3,
            r.err().map(|e| format!(": {e}")).unwrap_or_default()
        );
    }
}

/// A CUDA context of one thread's own, current on it until dropped.
struct OwnContext(sys::CUcontext);

impl OwnContext {
    fn new(ordinal: usize) -> Result<Self, String> {
        let mut dev: sys::CUdevice = 0;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: plain driver calls on values owned here; a symbol missing from an old
        // driver panics inside cudarc's loader, which is caught.
        let created = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            sys::cuDeviceGet(&mut dev, ordinal as i32).result()?;
            sys::cuCtxCreate_v4(&mut ctx, std::ptr::null_mut(), 0, dev).result()?;
            sys::cuCtxSetCurrent(ctx).result()
        }));
        match created {
            Ok(Ok(())) => Ok(Self(ctx)),
            Ok(Err(e)) => Err(format!("{e:?}")),
            Err(_) => Err("the driver has no cuCtxCreate_v4".into()),
        }
    }

    /// JIT-compiles `ptx` in this context and unloads it again.
    fn jit(&self, ptx: &str) -> Result<(), String> {
        let src = CString::new(ptx).map_err(|e| e.to_string())?;
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: this context is current on this thread (made so in `new`); the image is a
        // NUL-terminated PTX string that outlives the call; the module is unloaded at once.
        unsafe {
            sys::cuModuleLoadData(&mut module, src.as_ptr().cast())
                .result()
                .map_err(|e| format!("{e:?}"))?;
            sys::cuModuleUnload(module)
                .result()
                .map_err(|e| format!("{e:?}"))
        }
    }
}

impl Drop for OwnContext {
    fn drop(&mut self) {
        // SAFETY: the context created in `new`, used by nothing else.
        let _ = unsafe { sys::cuCtxDestroy_v2(self.0) };
    }
}
