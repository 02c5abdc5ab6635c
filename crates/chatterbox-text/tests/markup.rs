//! Properties of the markup parser: any input ends without a panic, text outside the tags is
//! kept as written, and pauses are summed as written.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use chatterbox_text::{parse_markup, MarkupSegment};
use proptest::prelude::*;

/// Words without markup characters.
fn word() -> impl Strategy<Value = String> {
    "[a-zA-Z,.!?' ]{1,12}"
}

proptest! {
    /// Arbitrary strings (markup characters frequent) give segments or an error, never a
    /// panic; text segments are never blank and pauses never zero.
    #[test]
    fn never_panics(s in "[\\[\\]<>/=\"&;a-z0-9 .psekbrmu]{0,200}") {
        if let Ok(segments) = parse_markup(&s) {
            for seg in segments {
                match seg {
                    MarkupSegment::Text(t) => prop_assert!(!t.trim().is_empty()),
                    MarkupSegment::Pause { ms } => prop_assert!(ms > 0),
                }
            }
        }
    }

    /// Any text without `[` or a leading `<speak` is one segment equal to it.
    #[test]
    fn plain_text_is_kept(s in "[^\\[<]{1,200}") {
        let got = parse_markup(&s).unwrap();
        if s.trim().is_empty() {
            prop_assert!(got.is_empty());
        } else {
            prop_assert_eq!(got, vec![MarkupSegment::Text(s.clone())]);
        }
    }

    /// Words and pauses written in turn come back in order: the words as written, each pause
    /// as its milliseconds, consecutive pauses summed.
    #[test]
    fn words_and_pauses_round_trip(
        pieces in proptest::collection::vec((word(), 0u32..3000, any::<bool>()), 1..8),
    ) {
        let mut text = String::new();
        let mut want: Vec<MarkupSegment> = Vec::new();
        for (w, ms, seconds) in &pieces {
            text.push_str(w);
            if !w.trim().is_empty() {
                match want.last_mut() {
                    Some(MarkupSegment::Text(t)) => t.push_str(w),
                    _ => want.push(MarkupSegment::Text(w.clone())),
                }
            } else if let Some(MarkupSegment::Text(t)) = want.last_mut() {
                t.push_str(w);
            }
            if *seconds {
                text.push_str(&format!("[pause {}.{:03}s]", ms / 1000, ms % 1000));
            } else {
                text.push_str(&format!("[pause {ms}ms]"));
            }
            if *ms > 0 {
                match want.last_mut() {
                    Some(MarkupSegment::Pause { ms: m }) => *m += ms,
                    _ => want.push(MarkupSegment::Pause { ms: *ms }),
                }
            }
        }
        let got = parse_markup(&text).unwrap();
        // whitespace-only text between pauses is dropped; compare the trimmed words
        let norm = |v: &[MarkupSegment]| -> Vec<MarkupSegment> {
            let mut out: Vec<MarkupSegment> = Vec::new();
            for s in v {
                match s {
                    MarkupSegment::Text(t) if t.trim().is_empty() => {}
                    MarkupSegment::Text(t) => out.push(MarkupSegment::Text(t.trim().to_string())),
                    MarkupSegment::Pause { ms } => match out.last_mut() {
                        Some(MarkupSegment::Pause { ms: m }) => *m += ms,
                        _ => out.push(MarkupSegment::Pause { ms: *ms }),
                    },
                }
            }
            out
        };
        prop_assert_eq!(norm(&got), norm(&want));
    }
}

/// Huge inputs are linear: a megabyte of nested-looking tags ends at once with an error.
#[test]
fn huge_markup_is_refused_quickly() {
    let started = std::time::Instant::now();
    let s = format!("<speak>{}</speak>", "<p>".repeat(200_000));
    assert!(parse_markup(&s).is_err());
    let s = "[pause ".repeat(200_000);
    assert!(parse_markup(&s).is_err());
    let s = "[".repeat(1_000_000);
    assert_eq!(parse_markup(&s).unwrap().len(), 1);
    assert!(started.elapsed().as_secs() < 5);
}
