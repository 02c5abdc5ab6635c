//! chatterbox-speaker against fixtures recorded from the Python reference
//! (`parity/recorders/speaker.py`), with the default (CPU-kernel) code path.
mod common;

#[test]
fn parity() {
    common::suite(true).run_and_assert();
}
