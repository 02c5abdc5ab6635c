//! Sample-rate conversion: the torchaudio sinc kernel, reproduced exactly, and a general
//! high-quality resampler for loading audio at any rate: rubato by default, or with the `soxr`
//! feature libsoxr itself, called as the reference calls it (`soxr_hq`).
mod hq;
mod sinc;
#[cfg(feature = "soxr")]
mod soxr;

pub use hq::{resample, HqEngine, HqResampler};
pub use sinc::SincResampler;
#[cfg(feature = "soxr")]
pub use soxr::soxr_hq;

pub(crate) fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
