//! Decoding allocates in proportion to the input, whatever its headers claim: a counting global
//! allocator records the peak bytes live during each `decode`, and that peak must stay below
//! [`FIXED_BUDGET`] + [`PER_INPUT_BYTE`] x the input's size.
//!
//! Measured (x86-64, symphonia 0.6.1): 20 MB for the largest Vorbis setup header that the check
//! in decode.rs lets through (two codebooks of 2^16 16-bit codewords, 250 bytes; without the
//! check, 20 bytes of codebook took 430 MB), under 5 MiB for every other input. The fixed part
//! is symphonia's: a 64 KiB read-ahead ring per stream, decoder tables (AAC, Vorbis), and up to
//! 4 MiB that `read_boxed_slice_exact` reserves up front for a chunk that claims more (a WAV
//! `LIST` or FLAC metadata block of 4 GiB costs 4 MiB, then fails at the end of the input). The
//! decoded output is in proportion to the input for these files (a few hundred KiB), except for
//! the FLAC of constant frames that expands past the length limit, whose output the limit bounds
//! (600 s at 1 kHz: 2.4 MB).
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Bytes any decode may use whatever its input: symphonia's fixed buffers and tables, and the
/// Vorbis codebooks decode.rs allows (32 MiB by its estimate, 20 MB measured at most).
const FIXED_BUDGET: usize = 64 << 20;
/// Bytes per input byte: PCM to `f32` is 2x (16-bit) to 4x (8-bit); the codecs here compress a
/// few times more, and the output `Vec` may hold twice its length while it grows.
const PER_INPUT_BYTE: usize = 64;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(live, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // counted as the new block allocated before the old one is freed (the worst case)
            let live = LIVE.fetch_add(new_size, Relaxed) + new_size;
            PEAK.fetch_max(live, Relaxed);
            LIVE.fetch_sub(layout.size(), Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Peak bytes allocated during `decode(bytes)`, above what was live before it.
fn peak_during_decode(bytes: Vec<u8>) -> usize {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let result = chatterbox_dsp::audio::decode(bytes, None);
    let peak = PEAK.load(Relaxed) - base;
    drop(result);
    peak
}

/// One test, so that no other test allocates while one is measured.
#[test]
fn decode_allocates_in_proportion_to_the_input() {
    // symphonia panics on two inputs here in debug builds (decode turns that into an error); the
    // default hook would print it and, with RUST_BACKTRACE set, symbolize a backtrace: tens of MB
    // that are the hook's, not decode's
    std::panic::set_hook(Box::new(|_| {}));
    let mut inputs = common::hostile_inputs();
    for (name, bytes) in common::valid_files() {
        for cut in [1, 16, 100, 1000, bytes.len() / 2] {
            inputs.push((
                format!("{name}[..{cut}]"),
                bytes[..cut.min(bytes.len())].to_vec(),
            ));
        }
        inputs.push((name, bytes));
    }
    let (mut worst, mut worst_name) = (0, String::new());
    for (name, bytes) in inputs {
        let len = bytes.len();
        // the input `Vec` itself is allocated before decoding starts
        let peak = peak_during_decode(bytes);
        let bound = FIXED_BUDGET + PER_INPUT_BYTE * len;
        assert!(
            peak <= bound,
            "{name}: {peak} bytes allocated for {len} input bytes"
        );
        if peak > worst {
            (worst, worst_name) = (peak, name);
        }
    }
    println!("largest peak: {worst} bytes ({worst_name})");
}
