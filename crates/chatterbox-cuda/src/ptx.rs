//! A CUDA C source compiled with NVRTC for the GPU it runs on, once per process and target,
//! kept on disk between processes ([`crate::disk_cache`]), and loaded once per device.
//!
//! NVRTC is asked for machine code (a cubin for the GPU's `sm_XY`), so the driver has nothing
//! left to compile when the module loads: PTX would be JIT-compiled by the driver on every
//! fresh machine. An NVRTC too old to know the GPU gives PTX for the source's virtual
//! architecture instead, which the driver compiles (and caches) as before.
use crate::arch::{cubin_target, Target};
use crate::disk_cache;
use candle_core::cuda_backend::cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, LaunchArgs,
};
use candle_core::cuda_backend::cudarc::nvrtc::{self, result as nvrtc_result, sys as nvrtc_sys};
use candle_core::cuda_backend::CudaDevice;
use std::ffi::CString;
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Instant;

/// A value computed once, shared by whoever asks while or after it is computed.
type Slot<T> = Arc<OnceLock<Result<T, String>>>;

/// A kernel source, compiled on first use for each GPU architecture it runs on. Meant for a
/// `static`: `static PTX: Ptx = Ptx::new(SOURCE, Some("compute_80"), "my kernels");`, then
/// `PTX.function(dev, "my_kernel")?.builder()` to launch.
#[derive(Debug)]
pub struct Ptx {
    source: &'static str,
    arch: Option<&'static str>,
    what: &'static str,
    images: Mutex<Vec<(Target, Slot<Arc<Image>>)>>,
    modules: Mutex<Vec<(usize, Slot<Arc<CudaModule>>)>>,
    reported: Once,
}

/// A compiled module: a cubin, or NUL-terminated PTX (what `cuModuleLoadData` takes).
#[derive(Debug)]
struct Image {
    bytes: Vec<u8>,
    /// The disk cache's file it was read from, if it was.
    cached: Option<String>,
}

/// A kernel of a loaded module, launched on the device's stream (candle's `CudaFunc` for
/// modules that candle does not load).
pub struct Func {
    func: CudaFunction,
    stream: Arc<CudaStream>,
}

impl Func {
    /// The launch's argument builder on the device's stream.
    pub fn builder(&self) -> LaunchArgs<'_> {
        self.stream.launch_builder(&self.func)
    }
}

impl std::ops::Deref for Func {
    type Target = CudaFunction;

    fn deref(&self) -> &CudaFunction {
        &self.func
    }
}

/// The slot of `key` in `slots`, added if missing.
fn slot<K: PartialEq + Clone, T>(slots: &Mutex<Vec<(K, Slot<T>)>>, key: &K) -> Slot<T> {
    let mut v = slots
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, s)) = v.iter().find(|(k, _)| k == key) {
        return s.clone();
    }
    let s = Slot::default();
    v.push((key.clone(), s.clone()));
    s
}

impl Ptx {
    /// `source` for the virtual architecture `arch` (its oldest GPUs; `None`: any), which
    /// `compute_XYa` restricts to that GPU generation; `what` names the kernels in errors.
    pub const fn new(source: &'static str, arch: Option<&'static str>, what: &'static str) -> Self {
        Self {
            source,
            arch,
            what,
            images: Mutex::new(Vec::new()),
            modules: Mutex::new(Vec::new()),
            reported: Once::new(),
        }
    }

    /// What the kernels are, as errors name them.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// The kernel `name`, compiling and loading the module for `dev` on first use. A failure
    /// is remembered and returned again as the same error.
    pub fn function(&'static self, dev: &CudaDevice, name: &str) -> candle_core::Result<Func> {
        let module = self.module(dev).map_err(candle_core::Error::Msg)?;
        let func = module.load_function(name).map_err(|e| {
            candle_core::Error::Msg(format!("no kernel {name} in the {}: {e}", self.what))
        })?;
        Ok(Func {
            func,
            stream: dev.cuda_stream(),
        })
    }

    /// Whether the kernels compile and load on `device` (doing so on the first call; never
    /// on a device that is not CUDA's). On the first failure only, `report` gets the error:
    /// for callers that fall back to other ops and say so once.
    pub fn available(
        &'static self,
        device: &candle_core::Device,
        report: impl FnOnce(&str),
    ) -> bool {
        let candle_core::Device::Cuda(dev) = device else {
            return false;
        };
        match self.module(dev) {
            Ok(_) => true,
            Err(e) => {
                self.reported.call_once(|| report(&e));
                false
            }
        }
    }

    /// The module on `dev`'s GPU, loaded once per device ordinal.
    pub(crate) fn module(&'static self, dev: &CudaDevice) -> Result<Arc<CudaModule>, String> {
        let ctx = dev.cuda_stream().context().clone();
        slot(&self.modules, &ctx.ordinal())
            .get_or_init(|| self.load(dev, &ctx))
            .clone()
    }

    fn load(
        &'static self,
        dev: &CudaDevice,
        ctx: &Arc<CudaContext>,
    ) -> Result<Arc<CudaModule>, String> {
        let cc = crate::compute_capability(dev).map_err(|e| e.to_string())?;
        let target = cubin_target(self.arch, cc).map_err(|e| format!("the {} {e}", self.what))?;
        let image = slot(&self.images, &target)
            .get_or_init(|| self.image(&target).map(Arc::new))
            .clone()?;
        let load = |bytes: &[u8]| ctx.load_module(nvrtc::Ptx::from_binary(bytes.to_vec()));
        match (load(&image.bytes), &image.cached) {
            (Ok(m), _) => Ok(m),
            (Err(e), Some(name)) => {
                // a cached file that the driver refuses: compile afresh and replace it
                tracing::warn!(
                    "the cached {} ({name}) did not load ({e}): compiling them again",
                    self.what
                );
                if let Some(dir) = disk_cache::dir() {
                    disk_cache::remove(&dir, name);
                }
                let fresh = self.compile(&target)?;
                load(&fresh.bytes).map_err(|e| self.load_error(e))
            }
            (Err(e), None) => Err(self.load_error(e)),
        }
    }

    fn load_error(&self, e: impl std::fmt::Display) -> String {
        format!("the CUDA driver could not load the {}: {e}", self.what)
    }

    /// The module for `target`, from the disk cache or NVRTC.
    fn image(&self, target: &Target) -> Result<Image, String> {
        let dir = disk_cache::dir();
        let name = self.cache_name(target);
        if let (Some(dir), Some(name)) = (&dir, &name) {
            if let Some(bytes) = disk_cache::read(dir, name) {
                tracing::debug!("{}: {} from {}", self.what, name, dir.display());
                return Ok(Image {
                    bytes,
                    cached: Some(name.clone()),
                });
            }
        }
        self.compile(target)
    }

    /// Compiles for `target` with NVRTC (PTX for the virtual architecture when this NVRTC
    /// does not know the GPU) and stores the result in the disk cache.
    fn compile(&self, target: &Target) -> Result<Image, String> {
        let t0 = Instant::now();
        let (bytes, built) = match nvrtc_compile(self.source, target) {
            Err(Refused::Target(e)) => {
                tracing::debug!(
                    "{}: NVRTC cannot target {target:?} ({e}): PTX instead",
                    self.what
                );
                let ptx = Target::Ptx(self.arch);
                (
                    nvrtc_compile(self.source, &ptx).map_err(|e| self.compile_error(&ptx, e))?,
                    ptx,
                )
            }
            other => (
                other.map_err(|e| self.compile_error(target, e))?,
                target.clone(),
            ),
        };
        tracing::debug!(
            "{}: compiled for {:?} by NVRTC in {:.0} ms",
            self.what,
            built,
            t0.elapsed().as_secs_f64() * 1e3
        );
        if let (Some(dir), Some(name)) = (disk_cache::dir(), self.cache_name(target)) {
            if built == *target {
                if let Err(e) = disk_cache::write(&dir, &name, &bytes) {
                    tracing::debug!("{}: not cached in {}: {e}", self.what, dir.display());
                }
            }
        }
        Ok(Image {
            bytes,
            cached: None,
        })
    }

    fn compile_error(&self, target: &Target, e: Refused) -> String {
        let (Refused::Target(e) | Refused::Source(e)) = e;
        format!(
            "NVRTC could not compile the {} for {target:?}: {e}",
            self.what
        )
    }

    /// The disk cache's file name of this source compiled for `target` by this NVRTC.
    fn cache_name(&self, target: &Target) -> Option<String> {
        let (major, minor) = nvrtc_version()?;
        let version = format!("nvrtc {major}.{minor}");
        let option = target.option().unwrap_or("default");
        let ext = match target {
            Target::Cubin(_) => "cubin",
            Target::Ptx(_) => "ptx",
        };
        Some(disk_cache::file_name(
            &[
                b"chatterbox-cuda kernels 1",
                version.as_bytes(),
                option.as_bytes(),
                self.source.as_bytes(),
            ],
            ext,
        ))
    }
}

/// Why NVRTC gave nothing: it does not know the target, or the source did not compile.
enum Refused {
    Target(String),
    Source(String),
}

/// NVRTC's `(major, minor)` version, once per process (`None` if NVRTC cannot be loaded).
fn nvrtc_version() -> Option<(i32, i32)> {
    static VERSION: OnceLock<Option<(i32, i32)>> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: NVRTC writes two ints; a missing library panics inside cudarc's loader,
        // which is caught.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            nvrtc_sys::nvrtcVersion(&mut major, &mut minor)
        }));
        matches!(r, Ok(nvrtc_sys::nvrtcResult::NVRTC_SUCCESS)).then_some((major, minor))
    })
}

/// `source` compiled by NVRTC for `target`: a cubin, or NUL-terminated PTX.
fn nvrtc_compile(source: &str, target: &Target) -> Result<Vec<u8>, Refused> {
    let src = CString::new(source).map_err(|e| Refused::Source(e.to_string()))?;
    let options: Vec<String> = target
        .option()
        .map(|a| vec![format!("--gpu-architecture={a}")])
        .unwrap_or_default();
    let prog = std::panic::catch_unwind(|| nvrtc_result::create_program(&src, None))
        .map_err(|_| Refused::Source("NVRTC (libnvrtc) could not be loaded".into()))?
        .map_err(|e| Refused::Source(format!("{e:?}")))?;
    // SAFETY: `prog` is a live program until it is destroyed below; the options outlive the
    // call.
    let compiled = unsafe { nvrtc_result::compile_program(prog, &options) };
    let out = match compiled {
        Err(e) => {
            // SAFETY: as above.
            let log = unsafe { nvrtc_result::get_program_log(prog) }
                .map(|l| {
                    let bytes: Vec<u8> =
                        l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                })
                .unwrap_or_default();
            if e.0 == nvrtc_sys::nvrtcResult::NVRTC_ERROR_INVALID_OPTION {
                Err(Refused::Target(format!("{e:?} {log}")))
            } else {
                Err(Refused::Source(format!("{e:?}\n{log}")))
            }
        }
        Ok(()) => match target {
            // SAFETY: as above.
            Target::Ptx(_) => unsafe { nvrtc_result::get_ptx(prog) }
                .map(|p| p.into_iter().map(|c| c as u8).collect())
                .map_err(|e| Refused::Source(format!("{e:?}"))),
            // SAFETY: as above; the buffer holds the size NVRTC reports.
            Target::Cubin(_) => {
                unsafe { cubin(prog) }.map_err(|e| Refused::Source(format!("{e:?}")))
            }
        },
    };
    // SAFETY: destroyed once, after its last use.
    let _ = unsafe { nvrtc_result::destroy_program(prog) };
    out
}

/// The cubin of a compiled program.
///
/// # Safety
/// `prog` must be a live program compiled for a real architecture.
unsafe fn cubin(prog: nvrtc_sys::nvrtcProgram) -> Result<Vec<u8>, nvrtc_result::NvrtcError> {
    let mut size = 0usize;
    unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) }.result()?;
    let mut bytes = vec![0u8; size];
    unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast()) }.result()?;
    Ok(bytes)
}
