//! Ctrl-C, SIGTERM (what `timeout` and service managers send) and SIGHUP (a closed terminal):
//! the audio finished so far is kept in a valid WAV file (or raw PCM file) that the message
//! names, and the file at `-o` is left as it was. Without this, the default action would kill
//! the process mid-write. Audio already streamed to standard output stays there; the message
//! says how much.
use crate::output::FileWriter;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A file being written, shared between the writing code and the signal handler (which waits
/// for a piece being written to finish before it takes the file).
pub type Shared = Arc<Mutex<Option<FileWriter>>>;

/// The file a signal must save, if any.
static ACTIVE: Mutex<Option<Shared>> = Mutex::new(None);

/// Samples written to standard output as they came (`--stream`, raw PCM).
static PIPED: AtomicUsize = AtomicUsize::new(0);

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

/// Counts `samples` written to standard output (for the message after a signal).
pub fn piped(samples: usize) {
    PIPED.fetch_add(samples, Ordering::Relaxed);
}

fn on_signal() {
    let shared = ACTIVE.lock().unwrap_or_else(PoisonError::into_inner).take();
    // The file stays locked until the process exits: the writing code waits for it instead of
    // finding it gone, reporting that as an error and exiting with status 1 before this does.
    let mut held = shared
        .as_deref()
        .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner));
    let message = save(held.as_deref_mut(), PIPED.load(Ordering::Relaxed));
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

/// Saves the file in `slot` (the guarded one, taken out of it), if any, and says what
/// happened; `piped` samples went to standard output.
fn save(slot: Option<&mut Option<FileWriter>>, piped: usize) -> String {
    match slot.and_then(Option::take) {
        Some(w) => interrupted(w),
        None if piped > 0 => format!(
            "interrupted: the {:.1} s of audio finished so far went to standard output",
            secs(piped)
        ),
        None => "interrupted: nothing was written".into(),
    }
}

fn secs(samples: usize) -> f64 {
    samples as f64 / f64::from(chatterbox_pipeline::ChatterboxTts::SAMPLE_RATE)
}

/// Keeps `w`'s samples under its partial name (or removes it when it has none).
pub fn interrupted(w: FileWriter) -> String {
    let dest = w.destination().display().to_string();
    let samples = w.samples();
    if samples == 0 {
        drop(w);
        return format!("interrupted before any audio was finished: {dest} was not changed");
    }
    let secs = secs(samples);
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
        let w = chatterbox_dsp::audio::WavFileWriter::create(
            &dest,
            24_000,
            chatterbox_dsp::WavFormat::Pcm16,
        )?;
        let mut w = FileWriter::Wav(w);
        w.push(&[0.1; 12_000])?;
        let shared: Shared = Arc::new(Mutex::new(Some(w)));
        let lock = || shared.lock().unwrap_or_else(PoisonError::into_inner);
        let msg = save(Some(&mut *lock()), 0);
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
            save(Some(&mut *lock()), 0),
            "interrupted: nothing was written",
            "taken once"
        );
        let msg = save(None, 36_000);
        assert!(
            msg.contains("1.5 s of audio") && msg.contains("standard output"),
            "{msg}"
        );
        Ok(())
    }

    #[test]
    fn a_guarded_raw_file_is_kept_too() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("story.raw");
        let w =
            chatterbox_dsp::audio::RawFileWriter::create(&dest, chatterbox_dsp::WavFormat::Pcm16)?;
        let mut w = FileWriter::Raw(w);
        w.push(&[0.1; 2_400])?;
        let msg = save(Some(&mut Some(w)), 0);
        assert!(msg.contains("0.1 s of audio"), "{msg}");
        let kept = std::fs::read_dir(dir.path())?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<Vec<_>>>()?;
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(std::fs::metadata(&kept[0])?.len(), 4_800);
        assert!(!dest.exists());
        Ok(())
    }
}
