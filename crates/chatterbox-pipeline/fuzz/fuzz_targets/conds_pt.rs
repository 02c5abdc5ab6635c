//! A voice file (`conds.pt`, the reference's `torch.save` of the conditionals) made of the
//! fuzzer's bytes, loaded as a user's would be: `Conditionals::load` runs the torch zip and
//! pickle checks (`src/torch_file.rs`) and then candle's pickle reader. Any input must give a
//! value or an error: a panic, an abort, a hang or an allocation past libFuzzer's limit is a
//! finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;

/// This process's scratch file (libFuzzer runs one input at a time per process).
fn scratch() -> PathBuf {
    std::env::temp_dir().join(format!("chatterbox-fuzz-conds-{}.pt", std::process::id()))
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    if std::fs::write(&path, data).is_ok() {
        let _ = chatterbox_pipeline::Conditionals::load(&path, &candle_core::Device::Cpu);
    }
});
