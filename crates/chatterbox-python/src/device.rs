//! Device strings as PyTorch users write them (`"cpu"`, `"cuda"`, `"cuda:1"`, `"mps"`) to
//! candle devices, with an error naming the build when a GPU backend is not compiled in.
//!
//! `CHATTERBOX_DEVICE`, when set, replaces whatever device a script asks for (a script written
//! for a GPU, such as the reference's Turbo example with its `device="cuda"`, then runs on a
//! machine without one); a line on standard error says so.
use crate::error::{Error, Result};
use candle_core::{DType, Device};

/// Environment variable that overrides every requested device.
pub const DEVICE_ENV: &str = "CHATTERBOX_DEVICE";

/// A parsed device string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The CPU.
    Cpu,
    /// An NVIDIA GPU by ordinal.
    Cuda(usize),
    /// An Apple GPU by ordinal (`"mps"`, PyTorch's name for it, or `"metal"`).
    Metal(usize),
}

impl DeviceSpec {
    /// Parses `cpu`, `cuda`, `cuda:N`, `mps`, `mps:N`, `metal`, `metal:N` (case-insensitive;
    /// a `torch.device` passes as its `str()`).
    pub fn parse(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        let (name, index) = match lower.split_once(':') {
            Some((n, i)) => {
                let index = i.parse::<usize>().map_err(|_| {
                    Error::Invalid(format!("device {s:?}: {i:?} is not a device number"))
                })?;
                (n.to_string(), index)
            }
            None => (lower.clone(), 0),
        };
        match name.as_str() {
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(index)),
            "mps" | "metal" => Ok(Self::Metal(index)),
            _ => Err(Error::Invalid(format!(
                "unknown device {s:?}; expected \"cpu\", \"cuda\", \"cuda:N\" or \"mps\""
            ))),
        }
    }

    /// The device `requested` names, or the one `$CHATTERBOX_DEVICE` names when it is set.
    pub fn resolve(requested: &str) -> Result<Self> {
        match std::env::var(DEVICE_ENV) {
            Ok(over) if !over.trim().is_empty() => {
                let spec = Self::parse(&over)?;
                if Self::parse(requested).ok() != Some(spec) {
                    eprintln!(
                        "chatterbox_rs: device {requested:?} replaced by {over:?} \
                         (${DEVICE_ENV})"
                    );
                }
                Ok(spec)
            }
            _ => Self::parse(requested),
        }
    }

    /// Opens the device; a GPU backend that this build lacks is an error naming the build.
    pub fn open(self) -> Result<Device> {
        match self {
            Self::Cpu => Ok(Device::Cpu),
            Self::Cuda(n) => {
                if !cfg!(feature = "cuda") {
                    return Err(Error::Runtime(format!(
                        "device \"cuda:{n}\": this chatterbox_rs build has no CUDA support \
                         (built without the `cuda` feature); build the wheel with it: \
                         cargo xtask python --features cuda"
                    )));
                }
                chatterbox_cuda::open(n).map_err(|e| {
                    Error::Runtime(format!(
                        "cannot open CUDA device {n} (is an NVIDIA GPU present?): {e}"
                    ))
                })
            }
            Self::Metal(n) => {
                if !cfg!(feature = "metal") {
                    return Err(Error::Runtime(format!(
                        "device \"mps\" (Metal {n}): this chatterbox_rs build has no Metal \
                         support (built without the `metal` feature); build the wheel with it \
                         on a Mac: cargo xtask python --features metal"
                    )));
                }
                Device::new_metal(n)
                    .map_err(|e| Error::Runtime(format!("cannot open Metal device {n}: {e}")))
            }
        }
    }
}

/// The precision of T3 and the flow estimator: `None` picks the device's fastest (bf16 on
/// recent NVIDIA GPUs, f32 elsewhere, as the `chatterbox` command does); else `"float32"`,
/// `"float16"` or `"bfloat16"` (PyTorch's names, `torch.` prefix allowed).
pub fn dtype(requested: Option<&str>, device: &Device) -> Result<DType> {
    let Some(name) = requested else {
        return Ok(chatterbox_pipeline::fast_dtype(device));
    };
    match name.trim().trim_start_matches("torch.") {
        "float32" | "float" | "f32" => Ok(DType::F32),
        "float16" | "half" | "f16" => Ok(DType::F16),
        "bfloat16" | "bf16" => Ok(DType::BF16),
        other => Err(Error::Invalid(format!(
            "unknown dtype {other:?}; expected \"float32\", \"float16\" or \"bfloat16\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytorch_device_strings_parse() -> Result<()> {
        assert_eq!(DeviceSpec::parse("cpu")?, DeviceSpec::Cpu);
        assert_eq!(DeviceSpec::parse("cuda")?, DeviceSpec::Cuda(0));
        assert_eq!(DeviceSpec::parse("CUDA:1")?, DeviceSpec::Cuda(1));
        assert_eq!(DeviceSpec::parse("mps")?, DeviceSpec::Metal(0));
        assert!(matches!(DeviceSpec::parse("tpu"), Err(Error::Invalid(_))));
        assert!(matches!(
            DeviceSpec::parse("cuda:x"),
            Err(Error::Invalid(_))
        ));
        Ok(())
    }

    #[test]
    fn missing_backends_name_the_build() {
        if !cfg!(feature = "cuda") {
            let e = DeviceSpec::Cuda(1).open().err().map(|e| e.to_string());
            assert!(e.is_some_and(|m| m.contains("no CUDA support") && m.contains("cuda:1")));
        }
        if !cfg!(feature = "metal") {
            let e = DeviceSpec::Metal(0).open().err().map(|e| e.to_string());
            assert!(e.is_some_and(|m| m.contains("no Metal support")));
        }
    }
}
