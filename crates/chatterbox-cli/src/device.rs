//! `--device` and `--dtype` to candle's `Device` and `DType`, with errors that say which cargo
//! feature a GPU needs.
use crate::args::{DeviceArg, DtypeArg};
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device};

/// How to rebuild the binary with a GPU backend.
fn rebuild_hint(feature: &str) -> String {
    format!(
        "rebuild it with the `{feature}` cargo feature: \
         cargo install --path crates/chatterbox-cli --features {feature} \
         (or cargo build --release -p chatterbox-cli --features {feature})"
    )
}

/// Checks that the requested backend is compiled in (cheap: before any file is read).
pub fn check_available(arg: DeviceArg) -> Result<()> {
    match arg {
        DeviceArg::Cuda(_) if !cfg!(feature = "cuda") => bail!(
            "--device cuda: this chatterbox was built without CUDA support; {}",
            rebuild_hint("cuda")
        ),
        DeviceArg::Metal(_) if !cfg!(feature = "metal") => bail!(
            "--device metal: this chatterbox was built without Metal support; {}",
            rebuild_hint("metal")
        ),
        _ => Ok(()),
    }
}

/// Opens the device.
pub fn open(arg: DeviceArg) -> Result<Device> {
    check_available(arg)?;
    Ok(match arg {
        DeviceArg::Cpu => Device::Cpu,
        DeviceArg::Cuda(n) => chatterbox_cuda::open(n)
            .with_context(|| format!("cannot open CUDA device {n} (is an NVIDIA GPU present?)"))?,
        DeviceArg::Metal(n) => {
            Device::new_metal(n).with_context(|| format!("cannot open Metal device {n}"))?
        }
        DeviceArg::Auto => auto(),
    })
}

/// The first compiled-in GPU that opens, else the CPU.
fn auto() -> Device {
    if cfg!(feature = "cuda") && candle_core::utils::cuda_is_available() {
        if let Ok(d) = chatterbox_cuda::open(0) {
            return d;
        }
    }
    if cfg!(feature = "metal") && candle_core::utils::metal_is_available() {
        if let Ok(d) = Device::new_metal(0) {
            return d;
        }
    }
    Device::Cpu
}

/// A short name for messages (`cpu`, `cuda:0`, `metal:0`).
pub fn describe(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// `--dtype` as a candle dtype on `device` (`auto`: [`chatterbox_pipeline::fast_dtype`]).
pub fn dtype(arg: DtypeArg, device: &Device) -> DType {
    match arg {
        DtypeArg::Auto => chatterbox_pipeline::fast_dtype(device),
        DtypeArg::F32 => DType::F32,
        DtypeArg::F16 => DType::F16,
        DtypeArg::Bf16 => DType::BF16,
    }
}

/// A warning for half precision on the CPU, which candle runs several times slower than f32
/// (no native f16/bf16 arithmetic: every operation converts).
pub fn dtype_warning(device: &Device, dtype: DType) -> Option<String> {
    (device.is_cpu() && dtype != DType::F32).then(|| {
        format!(
            "warning: --dtype {} on the CPU is several times slower than f32 (half precision is \
             for GPUs); leave --dtype out",
            format!("{dtype:?}").to_lowercase()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_on_the_cpu_is_warned_about() {
        assert_eq!(dtype_warning(&Device::Cpu, DType::F32), None);
        let w = dtype_warning(&Device::Cpu, DType::BF16).unwrap_or_default();
        assert!(w.contains("--dtype bf16") && w.contains("slower"), "{w}");
    }

    #[test]
    fn auto_dtype_is_f32_on_the_cpu_and_explicit_ones_are_kept() {
        let cpu = Device::Cpu;
        assert_eq!(dtype(DtypeArg::Auto, &cpu), DType::F32);
        assert_eq!(dtype(DtypeArg::F32, &cpu), DType::F32);
        assert_eq!(dtype(DtypeArg::F16, &cpu), DType::F16);
        assert_eq!(dtype(DtypeArg::Bf16, &cpu), DType::BF16);
        // so the default never warns on the CPU
        assert_eq!(dtype_warning(&cpu, dtype(DtypeArg::Auto, &cpu)), None);
    }

    #[test]
    fn the_cpu_always_opens_and_missing_backends_name_their_feature() -> Result<()> {
        assert!(open(DeviceArg::Cpu)?.is_cpu());
        if !cfg!(feature = "cuda") {
            let msg = format!("{:#}", open(DeviceArg::Cuda(0)).err().context("no error")?);
            assert!(msg.contains("--features cuda"), "{msg}");
        }
        if !cfg!(feature = "metal") {
            let msg = format!("{:#}", open(DeviceArg::Metal(0)).err().context("no error")?);
            assert!(msg.contains("--features metal"), "{msg}");
        }
        Ok(())
    }
}
