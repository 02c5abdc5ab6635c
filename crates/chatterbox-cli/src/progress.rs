//! Progress on standard error (indicatif): spinners for loading, bars for text chunks and
//! speech tokens; all hidden with `--quiet` or when standard error is not a terminal.
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

/// The progress display of one run.
#[derive(Debug, Clone)]
pub struct Progress {
    multi: MultiProgress,
    quiet: bool,
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

impl Progress {
    /// Draws on stderr, or nowhere when `quiet`.
    pub fn new(quiet: bool) -> Self {
        let target = if quiet {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        Self {
            multi: MultiProgress::with_draw_target(target),
            quiet,
        }
    }

    /// A spinner for a step of unknown length; finish it with [`Step::done`].
    pub fn step(&self, message: impl Into<String>) -> Step {
        let pb = self.multi.add(ProgressBar::new_spinner());
        pb.set_style(style("{spinner:.cyan} {msg} {elapsed:.dim}"));
        pb.set_message(message.into());
        pb.enable_steady_tick(Duration::from_millis(100));
        Step(pb)
    }

    /// A bar counting `total` units (`unit`: "chunks", "tokens").
    pub fn bar(&self, total: u64, message: impl Into<String>, unit: &str) -> ProgressBar {
        let pb = self.multi.add(ProgressBar::new(total));
        pb.set_style(
            style(&format!(
                "{{msg:>12.cyan}} [{{bar:30.cyan/blue}}] {{pos}}/{{len}} {unit} {{elapsed:.dim}}"
            ))
            .progress_chars("=> "),
        );
        pb.set_message(message.into());
        pb
    }

    /// Prints a line above the bars (nothing when quiet).
    pub fn note(&self, line: impl AsRef<str>) {
        if !self.quiet {
            // Printed even when stderr is not a terminal (where the bars are hidden).
            self.multi.suspend(|| eprintln!("{}", line.as_ref()));
        }
    }
}

/// A running spinner.
#[derive(Debug)]
pub struct Step(ProgressBar);

impl Step {
    /// Replaces the spinner with `✓ message (time)`.
    pub fn done(self, message: impl AsRef<str>) {
        let secs = self.0.elapsed().as_secs_f64();
        self.0.set_style(style("{msg}"));
        self.0
            .finish_with_message(format!("✓ {} ({secs:.1} s)", message.as_ref()));
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        // A step abandoned by an error disappears instead of spinning on.
        if !self.0.is_finished() {
            self.0.finish_and_clear();
        }
    }
}
