#![doc = include_str!("../README.md")]

#[macro_use]
mod builder;
pub mod audio;
mod error;
pub mod features;
mod math;
mod matrix;
mod mel;
pub mod resample;
mod stft;
pub mod stretch;
mod trim;
pub mod window;

pub use audio::{Audio, WavFormat};
pub use error::{check_signal, DspError, Result};
pub use matrix::Matrix;
pub use mel::{hz_to_mel, mel_to_hz, MelFilterbank};
pub use realfft::num_complex::Complex32;
pub use stft::{reflect_pad, Istft, Spectrum, Stft};
pub use stretch::{time_stretch, TimeStretcher};
pub use trim::{trim_silence, TrimOptions};
