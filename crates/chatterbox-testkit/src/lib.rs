//! Shared test infrastructure of chatterbox-rs: parity fixtures recorded from the Python
//! reference (`parity/`), the comparisons that judge them, and benchmark records.
//!
//! Not a part of the inference API: the model crates use it only as a dev-dependency, and
//! `cargo xtask` reads the rows it writes. The fixture format is documented in `docs/parity.md`.

mod alloc;
mod array;
mod bench;
mod compare;
#[cfg(feature = "candle")]
mod device;
mod error;
mod fixture;
mod signal;
mod strings;
mod suite;
#[cfg(feature = "candle")]
mod tensors;
#[cfg(feature = "candle")]
mod weights;

pub use alloc::{live, peak, CountingAlloc, REFUSED};
pub use array::{Actual, Array};
pub use bench::{
    black_box, checkpoint_dir, emit_records, env_f64, env_usize, full_size_checkpoint, time_it,
    underrun_margin, BenchRecord, BenchRun, MemorySample, Timing,
};
pub use compare::{compare, Check, Tolerance};
#[cfg(feature = "candle")]
pub use device::{bench_dtype, device_name, test_device};
pub use error::{Error, Result};
pub use fixture::{committed_fixtures_root, fixtures_root, reference_venv_file, Fixture, Meta};
pub use signal::{dominant_hz, harmonic_tone, noisy_harmonics, speech_like};
pub use strings::{pack_ids, pack_strings};
pub use suite::{Row, Status, Suite};
#[cfg(feature = "candle")]
pub use tensors::{f32_array, i64_array, max_abs, max_abs_diff};
#[cfg(feature = "candle")]
pub use weights::{normals, state_dict, uniform};
