//! Which of the hand-written CPU kernels of the chatterbox crates may run.
//!
//! Every kernel in t3, s3gen, the speaker encoders and the vocoder has a portable Rust version
//! that compiles on every target (aarch64 included) and, on x86-64, AVX2+FMA (some also
//! AVX-512F) versions picked at run time. The kernels ask this crate, not
//! `is_x86_feature_detected!`, so that one switch covers them all:
//!
//! - [`avx2`] / [`avx2_fma`] / [`avx512f`]: whether the CPU has the features, answered once per process;
//!   always `false` off x86-64.
//! - [`PORTABLE_ENV`] (`CHATTERBOX_PORTABLE_KERNELS=1`): both answer `false`, so every kernel
//!   takes its portable version on any CPU. CI runs the parity suite a second time with it set,
//!   which is how the path that ARM machines take is tested on x86.
//!
//! candle's own CPU kernels (its GEMM, element-wise ops) are not affected: they dispatch on
//! their own.
use std::sync::OnceLock;

/// The environment variable that forces the portable kernels: set to anything but empty or
/// `0`. Read once, at the first question.
pub const PORTABLE_ENV: &str = "CHATTERBOX_PORTABLE_KERNELS";

/// Whether [`PORTABLE_ENV`] forces the portable kernels in this process.
pub fn portable_forced() -> bool {
    static FORCED: OnceLock<bool> = OnceLock::new();
    *FORCED.get_or_init(|| forced_by(std::env::var_os(PORTABLE_ENV).as_deref()))
}

/// The switch's reading of a value of [`PORTABLE_ENV`].
fn forced_by(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether the AVX2 versions (those that use no FMA) may run: the CPU has AVX2 and the
/// portable kernels are not forced. `false` off x86-64.
pub fn avx2() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| !portable_forced() && detect_avx2())
}

/// Whether the AVX2+FMA versions may run: the CPU has both and the portable kernels are not
/// forced. `false` off x86-64.
pub fn avx2_fma() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| !portable_forced() && detect_avx2_fma())
}

/// Whether the AVX-512F versions may run: the CPU has AVX-512F (and AVX2+FMA, which every
/// AVX-512 kernel here also uses) and the portable kernels are not forced. `false` off x86-64.
pub fn avx512f() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| avx2_fma() && detect_avx512f())
}

/// What the kernels will run, for logs and bench records: `avx512f`, `avx2+fma` or `portable`.
pub fn kernel_level() -> &'static str {
    if avx512f() {
        "avx512f"
    } else if avx2_fma() {
        "avx2+fma"
    } else {
        "portable"
    }
}

#[cfg(target_arch = "x86_64")]
fn detect_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_avx2() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn detect_avx2_fma() -> bool {
    detect_avx2() && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_avx2_fma() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn detect_avx512f() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_avx512f() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_switch_reads_empty_and_zero_as_off() {
        assert!(!forced_by(None));
        assert!(!forced_by(Some(OsStr::new(""))));
        assert!(!forced_by(Some(OsStr::new("0"))));
        assert!(forced_by(Some(OsStr::new("1"))));
        assert!(forced_by(Some(OsStr::new("yes"))));
    }

    #[test]
    fn the_answers_follow_the_switch_and_the_cpu() {
        if portable_forced() {
            assert!(!avx2() && !avx2_fma() && !avx512f());
            assert_eq!(kernel_level(), "portable");
        } else {
            assert_eq!(avx2(), detect_avx2());
            assert_eq!(avx2_fma(), detect_avx2_fma());
            assert_eq!(avx512f(), detect_avx2_fma() && detect_avx512f());
        }
        // AVX-512 implies AVX2+FMA here: no kernel takes the wide path without them.
        assert!(!avx512f() || avx2_fma());
        #[cfg(not(target_arch = "x86_64"))]
        assert_eq!(kernel_level(), "portable");
    }
}
