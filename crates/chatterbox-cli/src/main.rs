//! `chatterbox`: text to speech with voice cloning, and voice conversion, from the command line.
use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;

mod args;
mod device;
mod hub;
mod input;
mod output;
mod progress;
mod source;
mod speak;
mod vc;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    init_logging();
    let result = match cli.command {
        args::Command::Speak(a) => speak::run(*a),
        args::Command::Vc(a) => vc::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", report(&e));
            ExitCode::FAILURE
        }
    }
}

/// `error: what failed` and one `caused by:` line per cause that the message above does not
/// already quote.
fn report(e: &anyhow::Error) -> String {
    let mut out = format!("error: {e}");
    let mut previous = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !previous.contains(&text) {
            out.push_str(&format!("\n  caused by: {text}"));
        }
        previous = text;
    }
    out
}

/// `RUST_LOG=info` (or `debug`, `chatterbox_t3=trace`) shows the pipeline's tracing logs on
/// standard error; nothing by default but warnings.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}
