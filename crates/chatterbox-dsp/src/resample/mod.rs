//! Sample-rate conversion: the torchaudio sinc kernel, reproduced exactly, and a general
//! high-quality resampler for loading audio at any rate.
mod hq;
mod sinc;

pub use hq::{resample, HqResampler};
pub use sinc::SincResampler;

pub(crate) fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
