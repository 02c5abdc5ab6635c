//! The device a test or bench runs on, chosen by an environment variable, so that one suite
//! checks a GPU build against the same recordings as the CPU.
use crate::{Error, Result};
use candle_core::{DType, Device};

/// The device the environment variable `var` names: unset, empty or `cpu` is the CPU; `cuda`
/// (or `cuda:N`) the CUDA device 0 (or N), opened by `chatterbox_cuda::open` as the CLI and the
/// server open theirs; `metal` (or `metal:N`) a Metal device, through candle.
///
/// A GPU needs the crate's `cuda` or `metal` feature, which turns on `chatterbox-cuda/cuda` or
/// `candle-core/metal` for this crate too. A device that cannot be opened, and any other value,
/// are an error that names `var` and its value.
pub fn test_device(var: &str) -> Result<Device> {
    match std::env::var(var) {
        Ok(value) => named_device(var, &value),
        Err(std::env::VarError::NotPresent) => Ok(Device::Cpu),
        Err(e) => Err(Error::case(format!("{var}: {e}"))),
    }
}

/// The device `value` (the value of `var`) names, as [`test_device`] reads it.
fn named_device(var: &str, value: &str) -> Result<Device> {
    let bad = || {
        Error::case(format!(
            "{var}={value:?}: expected cpu, cuda[:N] or metal[:N]"
        ))
    };
    let (kind, ordinal) = match value.split_once(':') {
        Some((kind, n)) => (kind, n.parse::<usize>().map_err(|_| bad())?),
        None => (value, 0),
    };
    let opened = match kind {
        "" | "cpu" if ordinal == 0 => return Ok(Device::Cpu),
        "cuda" => chatterbox_cuda::open(ordinal),
        "metal" => Device::new_metal(ordinal),
        _ => return Err(bad()),
    };
    opened.map_err(|e| {
        Error::case(format!(
            "{var}={value}: cannot open the device: {e} (built with the crate's `{kind}` feature?)"
        ))
    })
}

/// The dtype the benches of whole models run them in on `device`: bf16 on CUDA, f32 elsewhere.
pub fn bench_dtype(device: &Device) -> DType {
    if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    }
}

/// The name of `device`'s kind, as bench records and logs give it: `cpu`, `cuda` or `metal`.
pub fn device_name(device: &Device) -> &'static str {
    match device {
        Device::Cpu => "cpu",
        Device::Cuda(_) => "cuda",
        Device::Metal(_) => "metal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_unless_a_gpu_is_named() {
        const VAR: &str = "CHATTERBOX_DEVICE";
        for cpu in ["", "cpu"] {
            assert!(matches!(named_device(VAR, cpu), Ok(Device::Cpu)), "{cpu:?}");
        }
        for bad in ["gpu", "cuda:x", "cpu:1", "cuda:", "Cuda"] {
            let err = named_device(VAR, bad).err().map(|e| e.to_string());
            let want = format!("CHATTERBOX_DEVICE={bad:?}: expected cpu, cuda[:N] or metal[:N]");
            assert_eq!(err, Some(want));
        }
        assert_eq!(device_name(&Device::Cpu), "cpu");
        assert_eq!(bench_dtype(&Device::Cpu), DType::F32);
    }
}
