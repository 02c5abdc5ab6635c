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

use crate::error::{DspError, Result};

/// A source or target rate of 0 is an [`UnsupportedSampleRate`](DspError::UnsupportedSampleRate)
/// error naming which.
pub(crate) fn check_rates(from_hz: u32, to_hz: u32) -> Result<()> {
    for (what, hz) in [
        ("resample source rate", from_hz),
        ("resample target rate", to_hz),
    ] {
        if hz == 0 {
            return Err(DspError::UnsupportedSampleRate {
                what: what.into(),
                got: 0,
                expected: None,
            });
        }
    }
    Ok(())
}

pub(crate) fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
