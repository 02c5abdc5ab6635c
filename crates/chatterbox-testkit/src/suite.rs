//! A component's parity suite: handlers per case kind, run over every fixture of the component.
use crate::{compare, Actual, Check, Fixture, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

/// What a handler returns: each named output it computed.
pub type Outputs = Vec<(String, Actual)>;

type Handler = Box<dyn Fn(&Fixture) -> Result<Outputs>>;

/// Verdict of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Within tolerance.
    Pass,
    /// Out of tolerance, wrong shape, or the case errored.
    Fail,
    /// A kind the Rust side handles has no fixture.
    Missing,
}

/// JSON writes non-finite numbers as `null`: read them back as infinity, so a report row of a
/// case that never computed an error (missing, errored) is not dropped by the reader.
fn null_as_infinity<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// One line of the parity table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// Component (`dsp`, ...).
    pub component: String,
    /// Case name (with `/output` when a case checks several outputs).
    pub case: String,
    /// `max |actual - expected|` (infinite when not computed: JSON `null`).
    #[serde(deserialize_with = "null_as_infinity")]
    pub max_abs: f64,
    /// `max_abs / max |expected|` (infinite when not computed: JSON `null`).
    #[serde(deserialize_with = "null_as_infinity")]
    pub max_rel: f64,
    /// SNR in dB where computed.
    pub snr_db: Option<f64>,
    /// The tolerance, as text.
    pub tolerance: String,
    /// The verdict.
    pub status: Status,
    /// Why it failed, or other detail.
    pub note: Option<String>,
    /// Wall time of the case in milliseconds (all outputs of a case share it).
    pub ms: f64,
}

impl Row {
    /// Table header matching [`Row::line`].
    pub fn header() -> String {
        format!(
            "{:<10} {:<44} {:>10} {:>10} {:>14} {:>7}",
            "component", "case", "max abs", "max rel", "tolerance", "result"
        )
    }

    /// One formatted table line.
    pub fn line(&self) -> String {
        let status = match self.status {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Missing => "MISSING",
        };
        let num = |x: f64| {
            if x.is_finite() {
                format!("{x:.2e}")
            } else {
                "-".to_string()
            }
        };
        let mut line = format!(
            "{:<10} {:<44} {:>10} {:>10} {:>14} {:>7}",
            self.component,
            self.case,
            num(self.max_abs),
            num(self.max_rel),
            self.tolerance,
            status
        );
        if let Some(snr) = self
            .snr_db
            .filter(|s| s.is_finite() && self.tolerance.starts_with("snr"))
        {
            line.push_str(&format!("  snr {snr:.1} dB"));
        }
        if let Some(note) = &self.note {
            line.push_str("  ");
            line.push_str(note);
        }
        line
    }

    /// Whether the row is a pass.
    pub fn passed(&self) -> bool {
        self.status == Status::Pass
    }
}

/// The parity cases of one component.
pub struct Suite {
    component: String,
    handlers: BTreeMap<String, Handler>,
}

fn selected(only: Option<&str>, component: &str, case: &str, kind: &str) -> bool {
    let Some(only) = only else { return true };
    only == component
        || only == kind
        || case.starts_with(only)
        || format!("{component}/{case}").starts_with(only)
}

impl Suite {
    /// An empty suite for `component` (the sub-folder of the fixtures root).
    pub fn new(component: &str) -> Self {
        Self {
            component: component.to_string(),
            handlers: BTreeMap::new(),
        }
    }

    /// Registers the handler of every fixture whose sidecar says `"kind": kind`.
    pub fn case(
        mut self,
        kind: &str,
        handler: impl Fn(&Fixture) -> Result<Outputs> + 'static,
    ) -> Self {
        self.handlers.insert(kind.to_string(), Box::new(handler));
        self
    }

    fn rows_for(&self, fx: &Fixture) -> Vec<Row> {
        let case = fx.meta.case.clone();
        let row = |output: Option<&str>, check: Option<Check>, note: Option<String>, ms: f64| {
            let name = match output {
                Some(o) if fx.meta.tolerances.len() > 1 => format!("{case}/{o}"),
                _ => case.clone(),
            };
            match check {
                Some(c) => Row {
                    component: self.component.clone(),
                    case: name,
                    max_abs: c.max_abs,
                    max_rel: c.max_rel,
                    snr_db: c.snr_db,
                    tolerance: c.tolerance.to_string(),
                    status: if c.passed { Status::Pass } else { Status::Fail },
                    note: c.note.or(note),
                    ms,
                },
                None => Row {
                    component: self.component.clone(),
                    case: name,
                    max_abs: f64::INFINITY,
                    max_rel: f64::INFINITY,
                    snr_db: None,
                    tolerance: "-".into(),
                    status: Status::Fail,
                    note,
                    ms,
                },
            }
        };
        let Some(handler) = self.handlers.get(&fx.meta.kind) else {
            return vec![row(
                None,
                None,
                Some(format!("no Rust handler for kind {:?}", fx.meta.kind)),
                0.0,
            )];
        };
        let start = Instant::now();
        let outputs = handler(fx);
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let outputs = match outputs {
            Ok(o) => o,
            Err(e) => return vec![row(None, None, Some(format!("error: {e}")), ms)],
        };
        let mut rows = Vec::new();
        for (name, tol) in &fx.meta.tolerances {
            let Some((_, actual)) = outputs.iter().find(|(n, _)| n == name) else {
                rows.push(row(
                    Some(name),
                    None,
                    Some("output not produced".into()),
                    ms,
                ));
                continue;
            };
            let key = format!("out.{name}");
            let check = match actual {
                Actual::F32(a) => fx.f32(&key).map(|e| {
                    let a64: Vec<f64> = a.data.iter().map(|&x| x as f64).collect();
                    let e64: Vec<f64> = e.data.iter().map(|&x| x as f64).collect();
                    compare(name, &a.shape, &a64, &e.shape, &e64, *tol)
                }),
                Actual::I64(a) => fx.i64(&key).map(|e| {
                    let a64: Vec<f64> = a.data.iter().map(|&x| x as f64).collect();
                    let e64: Vec<f64> = e.data.iter().map(|&x| x as f64).collect();
                    compare(name, &a.shape, &a64, &e.shape, &e64, *tol)
                }),
            };
            match check {
                Ok(c) => rows.push(row(Some(name), Some(c), None, ms)),
                Err(e) => rows.push(row(Some(name), None, Some(e.to_string()), ms)),
            }
        }
        rows
    }

    /// Runs every selected fixture and returns the rows. Reads `CHATTERBOX_FIXTURES` (root) and
    /// `CHATTERBOX_PARITY_ONLY` (a component, kind, `component/case` prefix or case prefix).
    pub fn run(&self) -> Vec<Row> {
        let only = std::env::var("CHATTERBOX_PARITY_ONLY")
            .ok()
            .filter(|s| !s.is_empty());
        let root = crate::fixtures_root();
        let mut rows = Vec::new();
        // A recording of other components (`cargo xtask parity --record --only X --out DIR`,
        // then `--fixtures DIR`) has no folder for this one: nothing to compare. The committed
        // fixtures must hold every component.
        if root != crate::committed_fixtures_root() && !root.join(&self.component).is_dir() {
            return rows;
        }
        let fixtures = match Fixture::discover(&root, &self.component) {
            Ok(f) => f,
            Err(e) => {
                rows.push(Row {
                    component: self.component.clone(),
                    case: "(fixtures)".into(),
                    max_abs: f64::INFINITY,
                    max_rel: f64::INFINITY,
                    snr_db: None,
                    tolerance: "-".into(),
                    status: Status::Fail,
                    note: Some(e.to_string()),
                    ms: 0.0,
                });
                return rows;
            }
        };
        for kind in self.handlers.keys() {
            let any = fixtures.iter().any(|f| &f.meta.kind == kind);
            if !any && selected(only.as_deref(), &self.component, kind, kind) {
                rows.push(Row {
                    component: self.component.clone(),
                    case: format!("{kind} (kind)"),
                    max_abs: f64::INFINITY,
                    max_rel: f64::INFINITY,
                    snr_db: None,
                    tolerance: "-".into(),
                    status: Status::Missing,
                    note: Some(format!(
                        "no fixture under {}",
                        root.join(&self.component).display()
                    )),
                    ms: 0.0,
                });
            }
        }
        for fx in &fixtures {
            if selected(
                only.as_deref(),
                &self.component,
                &fx.meta.case,
                &fx.meta.kind,
            ) {
                rows.extend(self.rows_for(fx));
            }
        }
        rows
    }

    /// Runs the suite, prints the table, appends JSON lines to `$CHATTERBOX_PARITY_REPORT` when
    /// set, and panics (failing the test) if any row is not a pass.
    #[allow(clippy::panic)] // called from #[test] functions: panicking is how a test fails
    pub fn run_and_assert(&self) {
        let rows = self.run();
        println!("{}", Row::header());
        for r in &rows {
            println!("{}", r.line());
        }
        if let Some(path) = std::env::var_os("CHATTERBOX_PARITY_REPORT") {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path);
            match file {
                Ok(mut f) => {
                    for r in &rows {
                        let line = serde_json::to_string(r).unwrap_or_default();
                        let _ = writeln!(f, "{line}");
                    }
                }
                Err(e) => panic!("cannot write parity report {path:?}: {e}"),
            }
        }
        let failed: Vec<&Row> = rows.iter().filter(|r| !r.passed()).collect();
        assert!(
            failed.is_empty(),
            "{} of {} parity rows failed:\n{}",
            failed.len(),
            rows.len(),
            failed
                .iter()
                .map(|r| r.line())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_row_survives_the_json_report() -> std::result::Result<(), serde_json::Error> {
        let row = Row {
            component: "dsp".into(),
            case: "stft (kind)".into(),
            max_abs: f64::INFINITY,
            max_rel: f64::INFINITY,
            snr_db: None,
            tolerance: "-".into(),
            status: Status::Missing,
            note: Some("no fixture".into()),
            ms: 0.0,
        };
        let line = serde_json::to_string(&row)?;
        assert!(line.contains("\"max_abs\":null"), "{line}");
        let back: Row = serde_json::from_str(&line)?;
        assert_eq!(back.status, Status::Missing);
        assert!(back.max_abs.is_infinite() && back.max_rel.is_infinite());
        assert!(!back.passed());
        let pass: Row =
            serde_json::from_str(&line.replace("null", "0.5").replace("Missing", "Pass"))?;
        assert_eq!(pass.max_abs, 0.5);
        Ok(())
    }
}
