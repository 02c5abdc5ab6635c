//! `chatterbox`: text to speech with voice cloning, and voice conversion, from the command line.
//!
//! The command's code as a library: `src/main.rs` calls [`run`] with the process's arguments,
//! and so does the `chatterbox` command that the Python package (crates/chatterbox-python)
//! installs.
use clap::Parser;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::process::ExitCode;

mod args;
mod captions;
mod device;
mod hub;
mod input;
mod interrupt;
mod japanese;
mod model;
mod output;
mod playout;
mod preflight;
mod progress;
mod quantize;
mod serve;
mod source;
mod speak;
mod vc;
mod watermark;

/// Runs the command with `args` (the program name first, as `std::env::args_os` gives them)
/// and returns its exit status: 0 on success, 1 on an error (printed to standard error), 2 for
/// bad arguments (clap prints them and exits), 3 when `watermark detect` finds an unmarked
/// file; a signal during `speak` or `vc` exits the process with 130.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = args::Cli::parse_from(args);
    let result = match cli.command {
        args::Command::Speak(a) => {
            init_logging(DEFAULT_LOG_FILTER);
            interrupt::install();
            speak::run(*a)
        }
        args::Command::Vc(a) => {
            init_logging(DEFAULT_LOG_FILTER);
            interrupt::install();
            vc::run(a)
        }
        // No ctrlc handler: the server's own SIGINT/SIGTERM handling stops it gracefully.
        args::Command::Serve(a) => {
            init_logging(SERVE_LOG_FILTER);
            serve::run(*a)
        }
        args::Command::Quantize(a) => {
            init_logging(DEFAULT_LOG_FILTER);
            quantize::run(a)
        }
        args::Command::Watermark(c) => {
            init_logging(DEFAULT_LOG_FILTER);
            match watermark::run(c) {
                Ok(code) => return code,
                Err(e) => Err(e),
            }
        }
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
    let download_failed = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<chatterbox_pipeline::PipelineError>(),
            Some(chatterbox_pipeline::PipelineError::Hub { .. })
        )
    });
    if download_failed {
        out.push_str(
            "\n  hint: without access to the Hugging Face hub, put the checkpoint files in a \
             folder and pass --model-dir DIR",
        );
    }
    out
}

/// What is logged without `RUST_LOG`: warnings, but not the decoders' complaints about
/// damaged frames in a voice clip (the clip's own error, if any, says what is wrong).
const DEFAULT_LOG_FILTER: &str = "warn,symphonia_codec_aac=off,symphonia_format_ogg=error,\
    symphonia_bundle_flac=error,symphonia_bundle_mp3=error,symphonia_format_isomp4=error";

/// What `chatterbox serve` logs without `RUST_LOG`: the server's and the command's own info
/// lines (start-up, models loaded, one line per request without its text), else warnings.
const SERVE_LOG_FILTER: &str = "warn,chatterbox_server=info,chatterbox_cli::serve=info,\
    symphonia_codec_aac=off,symphonia_format_ogg=error,symphonia_bundle_flac=error,\
    symphonia_bundle_mp3=error,symphonia_format_isomp4=error";

/// `RUST_LOG=info` (or `debug`, `chatterbox_t3=trace`) shows the pipeline's tracing logs on
/// standard error; nothing by default but `default` (warnings for `speak` and `vc`).
fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| progress::LogWriter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::report;
    use chatterbox_pipeline::PipelineError;

    #[test]
    fn a_failed_download_points_at_model_dir() {
        let e = anyhow::Error::new(PipelineError::Hub {
            repo: "ResembleAI/chatterbox".into(),
            file: "ve.safetensors".into(),
            reason: "connection refused".into(),
        })
        .context("cannot load the english model");
        let text = report(&e);
        assert_eq!(
            text.lines().next(),
            Some("error: cannot load the english model")
        );
        assert!(text.contains("caused by: hub download of ResembleAI/chatterbox/ve.safetensors"));
        assert!(text.ends_with("pass --model-dir DIR"), "{text}");
    }

    #[test]
    fn other_errors_get_no_download_hint() {
        let e = anyhow::anyhow!("cannot read voice.wav").context("cannot load the voice");
        assert_eq!(
            report(&e),
            "error: cannot load the voice\n  caused by: cannot read voice.wav"
        );
    }
}
