//! Numeric comparison of an actual output against the reference's expected output.
use serde::{Deserialize, Serialize};
use std::fmt;

/// How close an output must be to the reference. Recorded in each fixture's JSON sidecar
/// (`"tolerances": {"<output>": {"kind": "abs", "value": 1e-4}}`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Tolerance {
    /// `max |actual - expected| <= value`.
    Abs {
        /// The bound.
        value: f64,
    },
    /// `max |actual - expected| / max |expected| <= value` (error relative to the signal's peak).
    Rel {
        /// The bound.
        value: f64,
    },
    /// Every element equal (integer outputs).
    Exact,
    /// Signal-to-noise ratio `10 log10(sum e^2 / sum (a - e)^2) >= min_db`, for outputs that are
    /// a close approximation by design (a different resampler), not a port of the same formula.
    SnrDb {
        /// The least acceptable SNR in dB.
        min_db: f64,
    },
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tolerance::Abs { value } => write!(f, "abs {value:.0e}"),
            Tolerance::Rel { value } => write!(f, "rel {value:.0e}"),
            Tolerance::Exact => write!(f, "exact"),
            Tolerance::SnrDb { min_db } => write!(f, "snr>={min_db}dB"),
        }
    }
}

/// The outcome of comparing one output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// Output name.
    pub output: String,
    /// `max |actual - expected|` (`inf` on a shape mismatch or a NaN).
    pub max_abs: f64,
    /// `max_abs / max |expected|`.
    pub max_rel: f64,
    /// SNR in dB, for every float comparison.
    pub snr_db: Option<f64>,
    /// The tolerance applied.
    pub tolerance: Tolerance,
    /// Whether the output is within tolerance.
    pub passed: bool,
    /// Why it failed when that is not a number (shape, dtype, NaN).
    pub note: Option<String>,
}

fn fail(output: &str, tolerance: Tolerance, note: String) -> Check {
    Check {
        output: output.to_string(),
        max_abs: f64::INFINITY,
        max_rel: f64::INFINITY,
        snr_db: None,
        tolerance,
        passed: false,
        note: Some(note),
    }
}

/// Compares `actual` with `expected` (both row-major with the given shapes).
pub fn compare(
    output: &str,
    actual_shape: &[usize],
    actual: &[f64],
    expected_shape: &[usize],
    expected: &[f64],
    tolerance: Tolerance,
) -> Check {
    if actual_shape != expected_shape || actual.len() != expected.len() {
        return fail(
            output,
            tolerance,
            format!("shape {actual_shape:?}, expected {expected_shape:?}"),
        );
    }
    let mut max_abs = 0f64;
    let mut peak = 0f64;
    let mut signal = 0f64;
    let mut noise = 0f64;
    let mut mismatches = 0usize;
    for (&a, &e) in actual.iter().zip(expected) {
        if a.is_nan() != e.is_nan() || (a.is_infinite() && a != e) {
            return fail(
                output,
                tolerance,
                format!("non-finite mismatch: {a} vs {e}"),
            );
        }
        if a.is_nan() || a.is_infinite() {
            continue;
        }
        let d = (a - e).abs();
        if d != 0.0 {
            mismatches += 1;
        }
        max_abs = max_abs.max(d);
        peak = peak.max(e.abs());
        signal += e * e;
        noise += d * d;
    }
    let max_rel = if peak > 0.0 {
        max_abs / peak
    } else if max_abs == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    let snr_db = if noise == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (signal / noise).log10()
    };
    let passed = match tolerance {
        Tolerance::Abs { value } => max_abs <= value,
        Tolerance::Rel { value } => max_rel <= value,
        Tolerance::Exact => mismatches == 0,
        Tolerance::SnrDb { min_db } => snr_db >= min_db,
    };
    let note = (matches!(tolerance, Tolerance::Exact) && mismatches > 0)
        .then(|| format!("{mismatches} of {} elements differ", actual.len()));
    Check {
        output: output.to_string(),
        max_abs,
        max_rel,
        snr_db: Some(snr_db),
        tolerance,
        passed,
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `compare` of two 1-D outputs of the same length.
    fn vector(actual: &[f64], expected: &[f64], tolerance: Tolerance) -> Check {
        compare(
            "x",
            &[actual.len()],
            actual,
            &[expected.len()],
            expected,
            tolerance,
        )
    }

    #[test]
    fn abs_and_rel_errors_are_measured() {
        let c = vector(
            &[1.0, 2.0, 3.5],
            &[1.0, 2.0, 4.0],
            Tolerance::Abs { value: 0.4 },
        );
        assert_eq!(c.max_abs, 0.5);
        assert_eq!(c.max_rel, 0.125);
        assert!(!c.passed);
        let c = vector(
            &[1.0, 2.0, 3.5],
            &[1.0, 2.0, 4.0],
            Tolerance::Rel { value: 0.2 },
        );
        assert!(c.passed);
    }

    #[test]
    fn shape_mismatch_fails() {
        let c = compare(
            "x",
            &[2, 1],
            &[1.0, 2.0],
            &[1, 2],
            &[1.0, 2.0],
            Tolerance::Exact,
        );
        assert!(!c.passed);
        assert!(c.note.unwrap().contains("shape"));
    }

    #[test]
    fn nan_fails_unless_expected() {
        let c = vector(&[f64::NAN], &[0.0], Tolerance::Abs { value: 1.0 });
        assert!(!c.passed);
    }

    #[test]
    fn exact_counts_mismatches() {
        let c = vector(&[1.0, 2.0, 3.0], &[1.0, 5.0, 3.0], Tolerance::Exact);
        assert!(!c.passed);
        assert_eq!(c.note.as_deref(), Some("1 of 3 elements differ"));
    }

    #[test]
    fn snr_is_computed() {
        // noise energy 0.01 over signal energy 1.0 -> 20 dB
        let c = vector(&[1.1], &[1.0], Tolerance::SnrDb { min_db: 19.0 });
        assert!((c.snr_db.unwrap() - 20.0).abs() < 1e-9);
        assert!(c.passed);
    }
}
