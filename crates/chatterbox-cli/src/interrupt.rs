//! Ctrl-C, SIGTERM (what `timeout` and service managers send) and SIGHUP (a closed terminal):
//! the audio finished so far is kept in a valid WAV file that the message names, and the file
//! at `-o` is left as it was. Without this, the default action would kill the process mid-write.
use chatterbox_dsp::audio::WavFileWriter;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};

/// A file being written, shared between the writing code and the signal handler (which waits
/// for a piece being written to finish before it takes the file).
pub type Shared = Arc<Mutex<Option<WavFileWriter>>>;

/// The file a signal must save, if any.
static ACTIVE: Mutex<Option<Shared>> = Mutex::new(None);

/// The exit status after a signal: 128 + SIGINT, as a shell reports Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Takes over SIGINT, SIGTERM and SIGHUP for the rest of the process. If the handler cannot be
/// installed the signals keep their default action (with a warning).
pub fn install() {
    if let Err(e) = ctrlc::set_handler(on_signal) {
        tracing::warn!("cannot handle Ctrl-C: an interrupted run will lose its audio ({e})");
    }
}

/// Makes `file` the one a signal saves (replacing any other).
pub fn guard(file: &Shared) {
    *ACTIVE.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(file));
}

/// Forgets the guarded file (it was finished or abandoned).
pub fn release() {
    *ACTIVE.lock().unwrap_or_else(PoisonError::into_inner) = None;
}

fn on_signal() {
    let message = save();
    let mut err = std::io::stderr().lock();
    // The progress bar's line, if any, is left as it was: start a fresh one. Writing may fail
    // (a closed terminal): there is nothing left to tell then.
    let lead = if std::io::stderr().is_terminal() {
        "\n"
    } else {
        ""
    };
    let _ = writeln!(err, "{lead}{message}");
    let _ = err.flush();
    std::process::exit(EXIT_INTERRUPTED);
}

/// Saves the guarded file, if any, and says what happened.
fn save() -> String {
    save_from(&ACTIVE)
}

/// Saves the file guarded in `active` (the process's `ACTIVE`, or a test's own, so that
/// tests running in parallel do not take each other's files).
fn save_from(active: &Mutex<Option<Shared>>) -> String {
    let shared = active.lock().unwrap_or_else(PoisonError::into_inner).take();
    let Some(shared) = shared else {
        return "interrupted: nothing was written".into();
    };
    let writer = shared.lock().unwrap_or_else(PoisonError::into_inner).take();
    match writer {
        None => "interrupted: nothing was written".into(),
        Some(w) => interrupted(w),
    }
}

/// Keeps `w`'s samples under its partial name (or removes it when it has none).
pub fn interrupted(w: WavFileWriter) -> String {
    let dest = w.destination().display().to_string();
    let samples = w.samples();
    if samples == 0 {
        drop(w);
        return format!("interrupted before any audio was finished: {dest} was not changed");
    }
    let secs = samples as f64 / f64::from(chatterbox_pipeline::ChatterboxTts::SAMPLE_RATE);
    match w.keep_partial() {
        Ok(kept) => format!(
            "interrupted: the {secs:.1} s of audio finished so far are in {} ({dest} was not \
             changed)",
            kept.display()
        ),
        Err(e) => format!("interrupted: the audio finished so far could not be kept ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guarded_file_is_kept_valid_and_the_destination_untouched() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("story.wav");
        std::fs::write(&dest, b"an earlier file")?;
        let mut w = WavFileWriter::create(&dest, 24_000, chatterbox_dsp::WavFormat::Pcm16)?;
        w.push(&[0.1; 12_000])?;
        let shared: Shared = Arc::new(Mutex::new(Some(w)));
        // A registry of the test's own: the process-wide one is used by other tests' sinks.
        let active = Mutex::new(Some(shared));
        let msg = save_from(&active);
        assert!(msg.contains("0.5 s of audio"), "{msg}");
        let kept = msg
            .split(" are in ")
            .nth(1)
            .and_then(|s| s.split(" (").next())
            .map(std::path::PathBuf::from)
            .ok_or_else(|| anyhow::anyhow!("no path in {msg}"))?;
        assert_eq!(chatterbox_dsp::audio::load(&kept)?.samples.len(), 12_000);
        assert_eq!(std::fs::read(&dest)?, b"an earlier file");
        assert_eq!(
            save_from(&active),
            "interrupted: nothing was written",
            "taken once"
        );
        Ok(())
    }
}
