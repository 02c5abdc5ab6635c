//! `chatterbox`: text to speech with voice cloning, and voice conversion, from the command line
//! (the code is the library's, `src/lib.rs`).
use std::process::ExitCode;

fn main() -> ExitCode {
    chatterbox_cli::run(std::env::args_os())
}
