//! Memory in use, for servers' metrics and the soak benchmarks: the process's resident set and
//! a GPU's used and total memory as its driver reports them.
use candle_core::Device;

/// A device's memory, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    /// In use by every process on the device (total - free).
    pub used_bytes: u64,
    /// The device's memory.
    pub total_bytes: u64,
}

/// The memory of `device` as its driver reports it: CUDA devices only (`None` on the CPU,
/// on Metal, or when the driver does not answer).
pub fn device_memory(device: &Device) -> Option<DeviceMemory> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => {
            let (free, total) = d.cuda_stream().context().mem_get_info().ok()?;
            Some(DeviceMemory {
                used_bytes: total.saturating_sub(free) as u64,
                total_bytes: total as u64,
            })
        }
        _ => None,
    }
}

/// The process's resident set, bytes (`None` where the platform does not tell).
pub fn resident_memory_bytes() -> Option<u64> {
    memory_stats::memory_stats().map(|m| m.physical_mem as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_has_no_device_memory_and_the_process_has_a_resident_set() {
        assert_eq!(device_memory(&Device::Cpu), None);
        let before = resident_memory_bytes().unwrap_or(0);
        // 128 MB touched shows in the resident set (other tests may free some meanwhile)
        let big = vec![1u8; 128 << 20];
        let after = resident_memory_bytes().unwrap_or(0);
        assert!(big.iter().all(|&b| b == 1));
        if cfg!(target_os = "linux") {
            assert!(before > 1 << 20, "{before}");
            assert!(after >= before + (64 << 20), "{before} -> {after}");
        }
    }
}
