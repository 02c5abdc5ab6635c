//! A counting global allocator for allocation-bound tests (no counterpart in the reference):
//! a test binary declares `#[global_allocator] static A: CountingAlloc = CountingAlloc;` and
//! measures with [`peak`] or [`live`].
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Counts live heap bytes and their peak. A single request above [`REFUSED`] fails (and the
/// process aborts, "memory allocation of N bytes failed") instead of reaching the system: a
/// hostile file asking for terabytes ends the test instead of the machine.
pub struct CountingAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Largest single allocation [`CountingAlloc`] lets through (4 GiB).
pub const REFUSED: usize = 1 << 32;

fn counted(p: *mut u8, size: usize) -> *mut u8 {
    if !p.is_null() {
        PEAK.fetch_max(LIVE.fetch_add(size, Relaxed) + size, Relaxed);
    }
    p
}

// SAFETY: forwards to `System`, only counting; a refused request returns null as `alloc` may.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.size() > REFUSED {
            return std::ptr::null_mut();
        }
        counted(unsafe { System.alloc(l) }, l.size())
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.size() > REFUSED {
            return std::ptr::null_mut();
        }
        counted(unsafe { System.alloc_zeroed(l) }, l.size())
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if new > REFUSED {
            return std::ptr::null_mut();
        }
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Relaxed);
            counted(q, new);
        }
        q
    }
}

/// Heap bytes live now (signed, so that two readings subtract into a growth). Meaningful only
/// in a binary whose global allocator is [`CountingAlloc`].
pub fn live() -> isize {
    LIVE.load(Relaxed) as isize
}

/// Peak heap bytes `f` adds over what was live when it started (run once before, unmeasured).
/// Meaningful only in a binary whose global allocator is [`CountingAlloc`], one call at a time.
pub fn peak<R>(mut f: impl FnMut() -> R) -> usize {
    drop(f());
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    drop(f());
    PEAK.load(Relaxed).saturating_sub(base)
}
