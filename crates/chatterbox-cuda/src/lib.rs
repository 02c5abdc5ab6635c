//! Shared CUDA plumbing of the chatterbox crates (see the README). Everything here needs the
//! `cuda` feature.
#![cfg_attr(feature = "cuda", doc = include_str!("../README.md"))]

#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod ptx;
#[cfg(feature = "cuda")]
mod view;

#[cfg(feature = "cuda")]
pub use device::{compute_capability, multiprocessors};
#[cfg(feature = "cuda")]
pub use ptx::Ptx;
#[cfg(feature = "cuda")]
pub use view::{contiguous_view, Elem};
