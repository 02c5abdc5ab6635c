//! What candle's PTX costs the CUDA driver to JIT-compile on this machine, module by module,
//! and whether compiling them at once helps: one after another in the primary context, on
//! threads sharing it, on threads with a context each, and in separate processes. Run with
//! `CUDA_CACHE_DISABLE=1` so that every load compiles.
//!
//! `cargo run --release -p chatterbox-cuda --features cuda --example jit_cost`
use candle_core::cuda_backend::cudarc::driver::sys;
use candle_core::cuda_backend::kernels;
use std::ffi::CString;
use std::time::Instant;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const MODULES: [(&str, &kernels::Module); 10] = [
    ("cast", &kernels::CAST),
    ("affine", &kernels::AFFINE),
    ("binary", &kernels::BINARY),
    ("unary", &kernels::UNARY),
    ("fill", &kernels::FILL),
    ("indexing", &kernels::INDEXING),
    ("reduce", &kernels::REDUCE),
    ("ternary", &kernels::TERNARY),
    ("conv", &kernels::CONV),
    ("sort", &kernels::SORT),
];

fn check(r: sys::CUresult, what: &str) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {r:?}").into())
    }
}

/// Loads (JIT-compiles) `ptx` into the current context; seconds taken.
fn load(ptx: &str) -> Result<f64> {
    let src = CString::new(ptx)?;
    let t0 = Instant::now();
    let mut m: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: a NUL-terminated PTX image; the module is unloaded at once.
    unsafe {
        check(
            sys::cuModuleLoadData(&mut m, src.as_ptr().cast()),
            "cuModuleLoadData",
        )?;
        check(sys::cuModuleUnload(m), "cuModuleUnload")?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// The primary context of GPU 0, made current on this thread (as an address, to cross threads).
fn primary() -> Result<usize> {
    let mut d: sys::CUdevice = 0;
    let mut c: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: plain driver calls on values owned here.
    unsafe {
        check(sys::cuInit(0), "cuInit")?;
        check(sys::cuDeviceGet(&mut d, 0), "cuDeviceGet")?;
        check(
            sys::cuDevicePrimaryCtxRetain(&mut c, d),
            "cuDevicePrimaryCtxRetain",
        )?;
        check(sys::cuCtxSetCurrent(c), "cuCtxSetCurrent")?;
    }
    Ok(c as usize)
}

/// JIT-compiles `ptx` in a new context of this thread's own.
fn load_in_own_context(ptx: &str) -> Result<f64> {
    let mut d: sys::CUdevice = 0;
    let mut c: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a new context, current on this thread while the module loads, then destroyed.
    unsafe {
        check(sys::cuDeviceGet(&mut d, 0), "cuDeviceGet")?;
        check(
            sys::cuCtxCreate_v4(&mut c, std::ptr::null_mut(), 0, d),
            "cuCtxCreate",
        )?;
        check(sys::cuCtxSetCurrent(c), "cuCtxSetCurrent")?;
        let t = load(ptx);
        check(sys::cuCtxDestroy_v2(c), "cuCtxDestroy")?;
        t
    }
}

/// Runs `f` for every module on a thread each; wall seconds.
fn on_threads(f: fn(&'static str) -> Result<f64>) -> Result<f64> {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = MODULES
            .iter()
            .map(|(_, m)| s.spawn(move || f(m.ptx())))
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| "a thread panicked")?.map(drop))
    })?;
    Ok(t0.elapsed().as_secs_f64())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let (Some("--one"), Some(i)) = (args.get(1).map(String::as_str), args.get(2)) {
        let (_, m) = MODULES.get(i.parse::<usize>()?).ok_or("no such module")?;
        primary()?;
        println!("{:.2}", load(m.ptx())?);
        return Ok(());
    }
    primary()?;
    let t0 = Instant::now();
    for (name, m) in MODULES {
        let kb = m.ptx().len() / 1024;
        println!("serial {name:9} {:6.2} s  ({kb} KB of PTX)", load(m.ptx())?);
    }
    println!("serial total {:.2} s", t0.elapsed().as_secs_f64());

    // SAFETY (inside): the primary context lives as long as the process.
    let shared = on_threads(|ptx| {
        check(
            unsafe { sys::cuCtxSetCurrent(primary()? as sys::CUcontext) },
            "cuCtxSetCurrent",
        )?;
        load(ptx)
    })?;
    println!("threads, one context: {shared:.2} s");
    println!(
        "threads, a context each: {:.2} s",
        on_threads(load_in_own_context)?
    );

    let exe = std::env::current_exe()?;
    let one = |i: usize| {
        let mut c = std::process::Command::new(&exe);
        c.args(["--one", &i.to_string()]);
        c.stdout(std::process::Stdio::piped());
        c
    };
    let t0 = Instant::now();
    for i in 0..MODULES.len() {
        one(i).output()?;
    }
    println!(
        "processes one after another: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let t0 = Instant::now();
    let children = (0..MODULES.len())
        .map(|i| one(i).spawn())
        .collect::<std::io::Result<Vec<_>>>()?;
    for (c, (name, _)) in children.into_iter().zip(MODULES) {
        let out = c.wait_with_output()?;
        println!(
            "  process {name:9} {}",
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    println!("processes at once: {:.2} s", t0.elapsed().as_secs_f64());
    Ok(())
}
