//! Long calls run on a thread of their own while the calling Python thread waits without the
//! GIL, waking every [`POLL`] to run Python's signal handlers. Other Python threads run (and
//! generate) meanwhile, and Ctrl-C raises `KeyboardInterrupt` in the caller at once: the call
//! returns, and the generation left behind is told to stop ([`Cancel`]) and does so at its
//! next chance (the next speech token, flow or vocoder call for `generate`, the next chunk of
//! tokens for `stream`, the next decode step for `generate_many`). A panic in the work is a
//! `RuntimeError`, never a crash of the interpreter.
use crate::error::{Error, Result};
use chatterbox_pipeline::GenerateOptions;
use pyo3::prelude::*;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How often a waiting caller looks for Ctrl-C.
pub const POLL: Duration = Duration::from_millis(50);

/// Set when the caller has gone (interrupted): the work stops at its next check. The
/// pipeline's own flag, so a `generate` given it ([`Cancel::options`]) stops within one step.
#[derive(Debug, Clone, Default)]
pub struct Cancel(chatterbox_pipeline::Cancel);

impl Cancel {
    /// Asks the work to stop.
    pub fn set(&self) {
        self.0.cancel();
    }

    /// Whether the work should stop.
    pub fn is_set(&self) -> bool {
        self.0.is_cancelled()
    }

    /// `Err` once cancelled, for the pipeline's audio callbacks (which stop on an error).
    pub fn check(&self) -> chatterbox_pipeline::Result<()> {
        self.0.check()
    }

    /// `opts` stopping at the next token, flow or vocoder call once this is set.
    pub fn options(&self, opts: &GenerateOptions) -> GenerateOptions {
        opts.clone().with_cancel(self.0.clone())
    }
}

/// The message of a caught panic.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Starts a named thread.
pub fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| Error::Runtime(format!("cannot start a thread: {e}")))
}

/// Waits for `rx`'s next message without the GIL, running Python's signal handlers every
/// [`POLL`]; a raised exception (Ctrl-C's `KeyboardInterrupt`) is returned as
/// [`Error::Python`]. `None` when the sender is gone without sending.
pub fn wait<T: Send>(py: Python<'_>, rx: &Mutex<Receiver<T>>) -> Result<Option<T>> {
    loop {
        let got = py.detach(|| {
            rx.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .recv_timeout(POLL)
        });
        match got {
            Ok(v) => return Ok(Some(v)),
            Err(RecvTimeoutError::Disconnected) => return Ok(None),
            Err(RecvTimeoutError::Timeout) => py.check_signals().map_err(Error::Python)?,
        }
    }
}

/// Runs `job` on its own thread and waits for it (see the module's description).
pub fn run<T: Send + 'static>(
    py: Python<'_>,
    name: &str,
    job: impl FnOnce(&Cancel) -> Result<T> + Send + 'static,
) -> Result<T> {
    let cancel = Cancel::default();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let c = cancel.clone();
    spawn(name, move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&c)))
            .unwrap_or_else(|p| {
                Err(Error::Runtime(format!(
                    "internal error (a bug in chatterbox_rs): {}",
                    panic_message(p.as_ref())
                )))
            });
        let _ = tx.send(out); // the caller may have gone (interrupted)
    })?;
    match wait(py, &Mutex::new(rx)) {
        Ok(Some(out)) => out,
        Ok(None) => Err(Error::Runtime(
            "the worker thread ended without a result (a bug in chatterbox_rs)".into(),
        )),
        Err(e) => {
            cancel.set();
            Err(e)
        }
    }
}
