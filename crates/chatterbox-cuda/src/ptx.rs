//! A CUDA C source compiled to PTX with NVRTC once per process.
use std::sync::{Once, OnceLock};

/// A kernel source and its PTX, compiled on the first [`get`](Ptx::get). Meant for a
/// `static`: `static PTX: Ptx = Ptx::new(SOURCE, Some("compute_80"), "my kernels");`.
#[derive(Debug)]
pub struct Ptx {
    source: &'static str,
    arch: Option<&'static str>,
    what: &'static str,
    compiled: OnceLock<Result<String, String>>,
    reported: Once,
}

impl Ptx {
    /// `source` for the virtual architecture `arch` (NVRTC's default when `None`); `what`
    /// names the kernels in the compile error.
    pub const fn new(source: &'static str, arch: Option<&'static str>, what: &'static str) -> Self {
        Self {
            source,
            arch,
            what,
            compiled: OnceLock::new(),
            reported: Once::new(),
        }
    }

    /// Whether the source compiles (compiling it on the first call). On the first failure only,
    /// `report` gets the error: for callers that fall back to other ops and say so once.
    pub fn compiled(&'static self, report: impl FnOnce(&candle_core::Error)) -> bool {
        match self.get() {
            Ok(_) => true,
            Err(e) => {
                self.reported.call_once(|| report(&e));
                false
            }
        }
    }

    /// The PTX, compiling it on the first call. A failed compilation is remembered and
    /// returned again as the same error.
    pub fn get(&'static self) -> candle_core::Result<&'static str> {
        use candle_core::cuda_backend::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
        self.compiled
            .get_or_init(|| {
                let opts = CompileOptions {
                    arch: self.arch,
                    ..Default::default()
                };
                compile_ptx_with_opts(self.source, opts)
                    .map(|p| p.to_src())
                    .map_err(|e| format!("NVRTC could not compile the {}: {e:?}", self.what))
            })
            .as_ref()
            .map(String::as_str)
            .map_err(|e| candle_core::Error::Msg(e.clone()))
    }
}
