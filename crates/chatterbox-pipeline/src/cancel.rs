//! [`Cancel`]: a flag another thread sets to stop a generation at its next step (no
//! counterpart in the reference, whose `generate` runs to its end).
use crate::error::{PipelineError, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A generation's stop flag, shared by clones: set it from any thread
/// ([`Cancel::cancel`]) and a `generate` that was given it in
/// [`crate::GenerateOptions::cancel`] returns [`PipelineError::Cancelled`] after the speech
/// token, flow or vocoder call it is in (T3 checks before every token). Two handles are
/// equal when they share one flag.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A flag not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every generation holding this flag to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// [`PipelineError::Cancelled`] once cancelled.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(PipelineError::Cancelled)
        } else {
            Ok(())
        }
    }
}

impl PartialEq for Cancel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_flag() {
        let a = Cancel::new();
        let b = a.clone();
        assert!(a.check().is_ok() && !b.is_cancelled());
        b.cancel();
        assert!(a.is_cancelled());
        assert!(matches!(a.check(), Err(PipelineError::Cancelled)));
        assert_eq!(a, b);
        assert_ne!(a, Cancel::new());
    }
}
