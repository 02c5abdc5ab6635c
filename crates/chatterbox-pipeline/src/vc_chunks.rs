//! Long voice-conversion sources in overlapping windows (no counterpart in the reference, which
//! converts the whole source in one pass, at a cost that grows with the square of its length:
//! the flow's conformer encoder and estimator attend over all of it).
//!
//! Windows are counted in speech tokens (40 ms: 640 samples at 16 kHz in, 960 at 24 kHz out).
//! Every window but the last starts and ends on a token boundary inside the source, so its
//! tokens line up with those of a single pass, and the windows' kept stretches tile the source:
//! the output has exactly the single pass's length.
use crate::crossfade::Crossfader;
use crate::error::invalid;
use crate::options::CROSSFADE_MS;
use crate::s3gen::{S3GEN_SR, SAMPLES_PER_TOKEN};
use crate::Result;
use std::ops::Range;

/// Source samples (16 kHz) per speech token.
pub(crate) const SOURCE_SAMPLES_PER_TOKEN: usize = 640;
/// Milliseconds per speech token.
const MS_PER_TOKEN: u32 = 40;
/// Shortest overlap: the join needs a token of margin on each side of the crossfade.
pub(crate) const MIN_OVERLAP_MS: u32 = 4 * MS_PER_TOKEN;

/// Progress of a conversion: `done` of `total` windows converted (`total` is 1 for a source
/// no longer than [`VcOptions::window_ms`](crate::VcOptions::window_ms)). Reported once with
/// `done = 0` before the first window, then after each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct VcProgress {
    /// Windows converted so far.
    pub done: usize,
    /// Windows in all.
    pub total: usize,
}

impl VcProgress {
    pub(crate) fn new(done: usize, total: usize) -> Self {
        Self { done, total }
    }
}

/// One window: the tokens it converts and those whose audio it contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    /// Tokens converted (with some context on each side shared with the neighbours).
    pub tokens: Range<usize>,
    /// Tokens whose audio is kept; the windows' `keep` ranges tile `0..n`.
    pub keep: Range<usize>,
}

impl Window {
    /// The 16 kHz source samples of the window (the last one runs to the end of the source).
    pub(crate) fn source(&self, n_tokens: usize, source_len: usize) -> Range<usize> {
        let end = if self.tokens.end == n_tokens {
            source_len
        } else {
            self.tokens.end * SOURCE_SAMPLES_PER_TOKEN
        };
        self.tokens.start * SOURCE_SAMPLES_PER_TOKEN..end
    }
}

/// Window and overlap of `window_ms` / `overlap_ms` in tokens; `None` never splits.
pub(crate) fn window_tokens(window_ms: u32, overlap_ms: u32) -> Result<Option<(usize, usize)>> {
    if window_ms == 0 {
        return Ok(None);
    }
    if overlap_ms < MIN_OVERLAP_MS || overlap_ms.saturating_mul(2) > window_ms {
        return Err(invalid(
            "voice conversion option",
            format!(
                "overlap_ms = {overlap_ms} with window_ms = {window_ms}; expected an overlap of \
                 at least {MIN_OVERLAP_MS} ms and at most half the window (window_ms = 0 never \
                 splits)"
            ),
        ));
    }
    Ok(Some((
        (window_ms / MS_PER_TOKEN) as usize,
        (overlap_ms / MS_PER_TOKEN) as usize,
    )))
}

/// Speech tokens the S3 tokenizer makes of `samples` 16 kHz samples: one mel frame per 160
/// samples, two stride-2 convolutions.
pub(crate) fn tokens_for(samples: usize) -> usize {
    (samples / 160).div_ceil(4)
}

/// Energy of the source under each token (what the join looks at to find a quiet spot).
pub(crate) fn token_energy(source_16k: &[f32]) -> Vec<f32> {
    source_16k
        .chunks(SOURCE_SAMPLES_PER_TOKEN)
        .map(|c| c.iter().map(|v| v * v).sum())
        .collect()
}

/// Splits `n` tokens into the fewest windows of at most `window` tokens that overlap by at least
/// `overlap`, all of one length (the last may end short of it only when `n <= window`: then
/// there is one window). Each join sits at the quietest token boundary (by `energy`) in the
/// middle half of its overlap, so each side keeps at least a quarter of the overlap as context.
pub(crate) fn plan(n: usize, window: usize, overlap: usize, energy: &[f32]) -> Vec<Window> {
    if n <= window || window <= overlap {
        return vec![Window {
            tokens: 0..n,
            keep: 0..n,
        }];
    }
    let stride = window - overlap;
    let count = (n - overlap).div_ceil(stride);
    let len = (n + (count - 1) * overlap).div_ceil(count);
    let starts: Vec<usize> = (0..count).map(|i| i * (n - len) / (count - 1)).collect();
    let e = |i: usize| energy.get(i).copied().unwrap_or(0.0);
    let mut cuts = Vec::with_capacity(count + 1);
    cuts.push(0);
    for pair in starts.windows(2) {
        let (lo, hi) = (pair[1], pair[0] + len);
        let quarter = ((hi - lo) / 4).max(1);
        let (from, to) = (lo + quarter, hi - quarter);
        // the boundary c: the crossfade spans the end of token c - 1 and the start of token c
        let cut = (from..=to.max(from))
            .min_by(|&a, &b| {
                let (ea, eb) = (e(a - 1) + e(a), e(b - 1) + e(b));
                ea.total_cmp(&eb)
            })
            .unwrap_or(from);
        cuts.push(cut);
    }
    cuts.push(n);
    starts
        .iter()
        .zip(cuts.windows(2))
        .map(|(&s, c)| Window {
            tokens: s..(s + len).min(n),
            keep: c[0]..c[1],
        })
        .collect()
}

/// Joins the windows' audio: each window's kept stretch, widened by half the crossfade into its
/// neighbours' stretches, through a [`Crossfader`] of [`CROSSFADE_MS`]. The result has exactly
/// `960 n` samples (`n` tokens).
#[derive(Debug)]
pub(crate) struct Joiner {
    fader: Crossfader,
    fade: usize,
    windows: usize,
}

impl Joiner {
    pub(crate) fn new(windows: usize) -> Self {
        let fade = CROSSFADE_MS as usize * S3GEN_SR as usize / 1000;
        Self {
            fader: Crossfader::new(fade),
            fade,
            windows,
        }
    }

    /// Adds window `index`'s waveform (`960` samples per converted token); returns the samples
    /// that are final.
    pub(crate) fn push(&mut self, index: usize, w: &Window, wav: &[f32]) -> Vec<f32> {
        let head = if index > 0 { self.fade / 2 } else { 0 };
        let tail = if index + 1 < self.windows {
            self.fade - self.fade / 2
        } else {
            0
        };
        let from = ((w.keep.start - w.tokens.start) * SAMPLES_PER_TOKEN).saturating_sub(head);
        let to = ((w.keep.end - w.tokens.start) * SAMPLES_PER_TOKEN + tail).min(wav.len());
        self.fader.push(wav[from.min(to)..to].to_vec())
    }

    /// The held-back tail, at the end.
    pub(crate) fn finish(&mut self) -> Vec<f32> {
        self.fader.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_sources_are_one_window() {
        assert_eq!(
            plan(500, 500, 50, &[]),
            vec![Window {
                tokens: 0..500,
                keep: 0..500
            }]
        );
    }

    #[test]
    fn windows_tile_the_source_within_bounds() {
        for (window, overlap) in [(500, 50), (100, 4), (8, 4), (750, 50)] {
            for n in window + 1..window * 7 {
                let energy: Vec<f32> = (0..n).map(|i| ((i * 7919) % 13) as f32).collect();
                let p = plan(n, window, overlap, &energy);
                assert!(p.len() >= 2, "n {n}");
                assert_eq!(p[0].tokens.start, 0);
                assert_eq!(p[0].keep.start, 0);
                assert_eq!(p.last().unwrap().tokens.end, n);
                assert_eq!(p.last().unwrap().keep.end, n);
                let len = p[0].tokens.len();
                for (i, w) in p.iter().enumerate() {
                    assert_eq!(w.tokens.len(), len, "n {n} window {i}");
                    assert!(len <= window);
                }
                for pair in p.windows(2) {
                    let (a, b) = (&pair[0], &pair[1]);
                    assert!(a.tokens.end - b.tokens.start >= overlap, "n {n}");
                    assert_eq!(a.keep.end, b.keep.start);
                    // a token of context at least on each side of the join
                    assert!(b.keep.start > b.tokens.start, "n {n}");
                    assert!(a.keep.end < a.tokens.end, "n {n}");
                    assert!(a.keep.start < a.keep.end);
                }
                // the fewest windows
                let k = p.len();
                assert!(
                    (k - 2) * (window - overlap) + window < n,
                    "n {n}: {k} windows"
                );
            }
        }
    }

    #[test]
    fn joins_sit_at_the_quietest_point() {
        let mut energy = vec![1.0; 200];
        energy[95] = 0.0;
        energy[96] = 0.0;
        let p = plan(200, 120, 40, &energy);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].keep.end, 96);
    }

    #[test]
    fn joined_length_is_960_per_token() {
        let n = 1234;
        let p = plan(n, 300, 50, &[]);
        let mut j = Joiner::new(p.len());
        let mut out = Vec::new();
        for (i, w) in p.iter().enumerate() {
            out.extend(j.push(i, w, &vec![1.0; w.tokens.len() * SAMPLES_PER_TOKEN]));
        }
        out.extend(j.finish());
        assert_eq!(out.len(), n * SAMPLES_PER_TOKEN);
        assert!(out.iter().all(|&v| (v - 1.0).abs() < 1e-6));
    }

    /// Largest sample-to-sample step of the windows of `n` tokens each playing a 200 Hz tone
    /// with its own phase, joined with a crossfade of `fade` samples.
    fn largest_step(fade: usize) -> (f32, f32) {
        let n = 600;
        let p = plan(n, 250, 50, &[]);
        let mut j = Joiner::new(p.len());
        j.fader = Crossfader::new(fade);
        j.fade = fade;
        let mut out = Vec::new();
        for (i, w) in p.iter().enumerate() {
            let wav: Vec<f32> = (0..w.tokens.len() * SAMPLES_PER_TOKEN)
                .map(|s| {
                    let t = (w.tokens.start * SAMPLES_PER_TOKEN + s) as f32 / 24_000.0;
                    (2.0 * std::f32::consts::PI * 200.0 * t + 2.0 * i as f32).sin()
                })
                .collect();
            out.extend(j.push(i, w, &wav));
        }
        out.extend(j.finish());
        assert_eq!(out.len(), n * SAMPLES_PER_TOKEN);
        let mut steps: Vec<f32> = out.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
        let max = steps.iter().copied().fold(0.0, f32::max);
        steps.sort_by(f32::total_cmp);
        (max, steps[steps.len() * 999 / 1000])
    }

    #[test]
    fn the_crossfade_removes_the_jump_between_windows() {
        // a hard cut between windows out of phase jumps by far more than the tone's own steps
        let (cut, p999) = largest_step(0);
        assert!(
            cut > 10.0 * p999,
            "hard cut {cut}, 99.9th percentile {p999}"
        );
        // the crossfade's own ramp adds at most 2 / 1201 (two unit tones, 1200 samples) to it
        let (joined, p999) = largest_step(CROSSFADE_MS as usize * 24);
        assert!(
            joined <= p999 + 2.0 / 1201.0,
            "joined {joined}, p99.9 {p999}"
        );
    }

    #[test]
    fn token_counts() {
        assert_eq!(tokens_for(640), 1);
        assert_eq!(tokens_for(6400), 10);
        assert_eq!(tokens_for(6400 + 159), 10);
        assert_eq!(tokens_for(6400 + 160), 11);
        assert!(window_tokens(20_000, 2_000).unwrap() == Some((500, 50)));
        assert!(window_tokens(0, 0).unwrap().is_none());
        assert!(window_tokens(1_000, 600).is_err());
        assert!(window_tokens(1_000, 100).is_err());
    }
}
