//! Progress on standard error (indicatif): spinners for loading, bars for text chunks and
//! speech tokens on a terminal; plain lines when standard error is not a terminal (nohup, CI,
//! `2>log`), so a long run is never silent; nothing with `--quiet`. Log lines (`RUST_LOG`,
//! warnings) go through [`LogWriter`], which lifts the bars while it writes, so no stale
//! spinner line is left behind.
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The bars of this process (one run per process), shared with the log writer.
static MULTI: OnceLock<MultiProgress> = OnceLock::new();

fn multi() -> &'static MultiProgress {
    MULTI.get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Bars and spinners (standard error is a terminal).
    Bars,
    /// One line per step and per finished chunk, and a line every [`PLAIN_EVERY`] during long
    /// steps.
    Plain,
    /// Nothing (`--quiet`).
    Quiet,
}

/// How often plain mode reports on a step that is still running.
pub const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// The progress display of one run.
#[derive(Debug, Clone)]
pub struct Progress {
    mode: Mode,
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

impl Progress {
    /// Bars on a terminal, plain lines elsewhere, nothing when `quiet`.
    pub fn new(quiet: bool) -> Self {
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Bars
        } else {
            Mode::Plain
        };
        Self::with_mode(mode)
    }

    /// A display in `mode`.
    pub fn with_mode(mode: Mode) -> Self {
        if mode != Mode::Bars {
            multi().set_draw_target(ProgressDrawTarget::hidden());
        }
        Self { mode }
    }

    /// A spinner for a step of unknown length (plain mode: a line now); finish it with
    /// [`Step::done`].
    pub fn step(&self, message: impl Into<String>) -> Step {
        let message = message.into();
        let pb = multi().add(ProgressBar::new_spinner());
        if self.mode == Mode::Bars {
            pb.set_style(style("{spinner:.cyan} {msg} {elapsed:.dim}"));
            pb.set_message(message);
            pb.enable_steady_tick(Duration::from_millis(100));
        } else {
            self.plain(format!("{message}..."));
        }
        Step {
            pb,
            mode: self.mode,
        }
    }

    /// A bar counting `total` units (`unit`: "chunks", "tokens"); hidden off a terminal
    /// (plain mode reports through [`Progress::note`] and [`Progress::ticker`]).
    pub fn bar(&self, total: u64, message: impl Into<String>, unit: &str) -> ProgressBar {
        let pb = multi().add(ProgressBar::new(total));
        pb.set_style(
            style(&format!(
                "{{msg:>12.cyan}} [{{bar:30.cyan/blue}}] {{pos}}/{{len}} {unit} {{elapsed:.dim}}"
            ))
            .progress_chars("=> "),
        );
        pb.set_message(message.into());
        pb
    }

    /// Prints a line above the bars (nothing when quiet; also off a terminal).
    pub fn note(&self, line: impl AsRef<str>) {
        if self.mode != Mode::Quiet {
            multi().suspend(|| eprintln!("{}", line.as_ref()));
        }
    }

    /// Prints a line in plain mode only (what the bars show on a terminal).
    pub fn plain(&self, line: impl AsRef<str>) {
        if self.mode == Mode::Plain {
            eprintln!("{}", line.as_ref());
        }
    }

    /// A clock for plain-mode lines during a long step: [`Ticker::due`] is true at most every
    /// [`PLAIN_EVERY`], and never outside plain mode.
    pub fn ticker(&self) -> Ticker {
        Ticker {
            plain: self.mode == Mode::Plain,
            last: Instant::now(),
        }
    }
}

/// See [`Progress::ticker`].
#[derive(Debug)]
pub struct Ticker {
    plain: bool,
    last: Instant,
}

impl Ticker {
    /// Whether a plain-mode line is due now (and, if so, restarts the clock).
    pub fn due(&mut self) -> bool {
        if self.plain && self.last.elapsed() >= PLAIN_EVERY {
            self.last = Instant::now();
            return true;
        }
        false
    }
}

/// A running spinner.
#[derive(Debug)]
pub struct Step {
    pb: ProgressBar,
    mode: Mode,
}

impl Step {
    /// Replaces the spinner with `✓ message (time)` (plain mode: prints it).
    pub fn done(self, message: impl AsRef<str>) {
        let secs = self.pb.elapsed().as_secs_f64();
        let line = format!("✓ {} ({secs:.1} s)", message.as_ref());
        match self.mode {
            Mode::Bars => {
                self.pb.set_style(style("{msg}"));
                self.pb.finish_with_message(line);
            }
            Mode::Plain => {
                eprintln!("{line}");
                self.pb.finish_and_clear();
            }
            Mode::Quiet => self.pb.finish_and_clear(),
        }
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        // A step abandoned by an error disappears instead of spinning on.
        if !self.pb.is_finished() {
            self.pb.finish_and_clear();
        }
    }
}

/// Standard error for the log subscriber: each log line is written with the bars lifted, so
/// warnings and `RUST_LOG` lines never leave a half-drawn spinner behind them.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match MULTI.get() {
            Some(m) => m.suspend(|| std::io::stderr().write(buf)),
            None => std::io::stderr().write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match MULTI.get() {
            Some(m) => m.suspend(|| std::io::stderr().write_all(buf)),
            None => std::io::stderr().write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ticker_fires_only_in_plain_mode_and_at_most_every_interval() {
        let mut t = Ticker {
            plain: true,
            last: Instant::now() - PLAIN_EVERY,
        };
        assert!(t.due());
        assert!(!t.due(), "restarted");
        let mut bars = Ticker {
            plain: false,
            last: Instant::now() - PLAIN_EVERY,
        };
        assert!(!bars.due());
    }

    #[test]
    fn the_log_writer_writes_everything() {
        let mut w = LogWriter;
        assert_eq!(w.write(b"").ok(), Some(0));
        assert!(w.flush().is_ok());
    }
}
