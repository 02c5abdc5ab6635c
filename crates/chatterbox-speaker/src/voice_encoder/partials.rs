//! Port of `get_frame_step`, `get_num_wins` and `stride_as_partials` in
//! chatterbox/models/voice_encoder/voice_encoder.py (upstream 5de7a54): how an utterance's mel
//! is cut into overlapping fixed-length partial utterances, and the per-partial embeddings
//! `inference` averages.
use crate::error::invalid;
use crate::Result;
use candle_core::Tensor;
use std::ops::Range;

/// Options of the embedding functions: the keyword arguments of the reference's
/// `embeds_from_wavs` / `inference`. `Default` is what `embeds_from_wavs` uses.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EmbedOptions {
    /// Partials per second of audio; sets the frame step to
    /// `round((sample_rate / rate) / ve_partial_frames)` (77 frames at 1.3). `None` uses
    /// `overlap` instead (the default of the reference's `embeds_from_mels` and `inference`).
    /// Default: `Some(1.3)`.
    pub rate: Option<f64>,
    /// Overlap of consecutive partials when `rate` is `None`: the step is
    /// `round(ve_partial_frames * (1 - overlap))`. Must be in `[0, 1)`. Default: `0.5`.
    pub overlap: f64,
    /// A last partial is kept when at least this fraction of it is covered by real frames
    /// (the rest is zero padding). Must be in `(0, 1]`. Default: `0.8`.
    pub min_coverage: f64,
    /// At most this many partials go through the LSTM at once (memory bound only; the numbers
    /// do not depend on it). `0` means all at once. Default: `32`.
    pub batch_size: usize,
    /// Trim leading and trailing silence quieter than this many dB below the peak
    /// (`librosa.effects.trim`) before computing mels; `None` (or 0) keeps the clip as is.
    /// Default: `Some(20.0)`.
    pub trim_top_db: Option<f32>,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        Self {
            rate: Some(1.3),
            overlap: 0.5,
            min_coverage: 0.8,
            batch_size: 32,
            trim_top_db: Some(20.0),
        }
    }
}

impl EmbedOptions {
    /// Sets `rate` (`None`: the step comes from `overlap`).
    pub fn with_rate(mut self, rate: Option<f64>) -> Self {
        self.rate = rate;
        self
    }

    /// Sets `overlap` (used when `rate` is `None`).
    pub fn with_overlap(mut self, overlap: f64) -> Self {
        self.overlap = overlap;
        self
    }

    /// Sets `min_coverage`.
    pub fn with_min_coverage(mut self, min_coverage: f64) -> Self {
        self.min_coverage = min_coverage;
        self
    }

    /// Sets `batch_size` (`0`: all partials at once).
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets `trim_top_db` (`None`: no trimming).
    pub fn with_trim_top_db(mut self, trim_top_db: Option<f32>) -> Self {
        self.trim_top_db = trim_top_db;
        self
    }

    /// The defaults of the reference's `embeds_from_mels` / `inference` (`rate = None`, so
    /// partials overlap by half: a step of 80 frames).
    pub fn from_mels_defaults() -> Self {
        Self {
            rate: None,
            ..Self::default()
        }
    }
}

/// Number of frames between the starts of two partials (`get_frame_step`). Rounds half to
/// even, like `np.round`.
pub fn frame_step(
    overlap: f64,
    rate: Option<f64>,
    sample_rate: u32,
    partial_frames: usize,
) -> Result<usize> {
    if !(0.0..1.0).contains(&overlap) {
        return Err(invalid("overlap", format!("{overlap} is not in [0, 1)")));
    }
    let step = match rate {
        None => (partial_frames as f64 * (1.0 - overlap)).round_ties_even(),
        Some(rate) => {
            if !(rate > 0.0 && rate.is_finite()) {
                return Err(invalid("rate", format!("{rate} is not a positive number")));
            }
            ((sample_rate as f64 / rate) / partial_frames as f64).round_ties_even()
        }
    };
    if !(step >= 1.0 && step <= partial_frames as f64) {
        return Err(invalid(
            "rate/overlap",
            format!("they give a frame step of {step}, which must be in 1..={partial_frames}"),
        ));
    }
    Ok(step as usize)
}

/// `(n_partials, target_len)` for a mel of `n_frames` frames (`get_num_wins`): the mel is
/// zero-padded or cut to `target_len = partial_frames + step * (n_partials - 1)` frames.
///
/// An utterance shorter than one partial always gives one partial, zero-padded to
/// `partial_frames` frames (the reference's padding behaviour).
pub fn num_partials(
    n_frames: usize,
    step: usize,
    min_coverage: f64,
    partial_frames: usize,
) -> Result<(usize, usize)> {
    if n_frames == 0 {
        return Err(invalid("mel", "has no frames"));
    }
    if !(min_coverage > 0.0 && min_coverage <= 1.0) {
        return Err(invalid(
            "min_coverage",
            format!("{min_coverage} is not in (0, 1]"),
        ));
    }
    let win = partial_frames;
    let span = (n_frames + step).saturating_sub(win);
    let (mut n_wins, remainder) = (span / step, span % step);
    if n_wins == 0 || (remainder + (win - step)) as f64 / win as f64 >= min_coverage {
        n_wins += 1;
    }
    Ok((n_wins, win + step * (n_wins - 1)))
}

/// The frames each partial utterance of a mel of `n_frames` frames covers
/// (`stride_as_partials`): partial `i` is frames `i * step .. i * step + partial_frames`, and
/// frames at or past `n_frames` are zero padding. There are
/// [`num_partials`]`(n_frames, ..).0` of them.
pub fn partial_ranges(
    n_frames: usize,
    step: usize,
    min_coverage: f64,
    partial_frames: usize,
) -> Result<Vec<Range<usize>>> {
    let (n, _target) = num_partials(n_frames, step, min_coverage, partial_frames)?;
    Ok((0..n)
        .map(|i| i * step..i * step + partial_frames)
        .collect())
}

/// The embeddings of every partial utterance of a batch of utterances, before `inference`
/// averages them (`partial_embeds` in the reference).
#[derive(Debug, Clone)]
pub struct PartialEmbeds {
    /// `(N, speaker_embed_size)` f32, each row L2-normalised: utterance 0's partials first, in
    /// order, then utterance 1's, and so on.
    pub embeds: Tensor,
    /// Partials of each utterance (they sum to `N`).
    pub counts: Vec<usize>,
}

impl PartialEmbeds {
    /// The partial embeddings of utterance `index`, `(counts[index], speaker_embed_size)`.
    pub fn utterance(&self, index: usize) -> Result<Tensor> {
        let Some(&n) = self.counts.get(index) else {
            return Err(invalid(
                "utterance index",
                format!("{index} of {} utterances", self.counts.len()),
            ));
        };
        let start = self.counts[..index].iter().sum();
        Ok(self.embeds.narrow(0, start, n)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_step_matches_reference_rules() {
        // rate 1.3 at 16 kHz: round(12307.7 / 160) = 77
        assert_eq!(frame_step(0.5, Some(1.3), 16000, 160).unwrap(), 77);
        assert_eq!(frame_step(0.5, None, 16000, 160).unwrap(), 80);
        // np.round rounds half to even: 160 * 0.75 = 120, 10 * 0.25 = 2.5 -> 2
        assert_eq!(frame_step(0.75, None, 16000, 10).unwrap(), 2);
        assert!(frame_step(1.0, None, 16000, 160).is_err());
        assert!(frame_step(0.5, Some(0.0), 16000, 160).is_err());
        // a rate so low that the step exceeds a partial
        assert!(frame_step(0.5, Some(0.5), 16000, 160).is_err());
    }

    #[test]
    fn num_partials_matches_reference_rules() {
        // 6 s at 16 kHz: 601 frames -> 7 partials of 160 frames, step 77, padded to 622
        assert_eq!(num_partials(601, 77, 0.8, 160).unwrap(), (7, 622));
        // shorter than a partial: one zero-padded partial
        assert_eq!(num_partials(1, 77, 0.8, 160).unwrap(), (1, 160));
        assert_eq!(num_partials(159, 77, 0.8, 160).unwrap(), (1, 160));
        // exactly one partial; a last partial with too little coverage is dropped
        assert_eq!(num_partials(160, 77, 0.8, 160).unwrap(), (1, 160));
        assert_eq!(num_partials(237, 77, 0.8, 160).unwrap(), (2, 237));
        assert_eq!(num_partials(250, 77, 0.8, 160).unwrap(), (2, 237));
        assert!(num_partials(0, 77, 0.8, 160).is_err());
        assert!(num_partials(10, 77, 0.0, 160).is_err());
    }

    #[test]
    fn partial_ranges_step_through_the_mel() {
        assert_eq!(
            partial_ranges(237, 77, 0.8, 160).unwrap(),
            vec![0..160, 77..237]
        );
        // shorter than a partial: one range past the end (zero padding)
        assert_eq!(partial_ranges(10, 77, 0.8, 160).unwrap(), vec![0..160]);
        assert_eq!(partial_ranges(601, 77, 0.8, 160).unwrap().len(), 7);
        assert!(partial_ranges(0, 77, 0.8, 160).is_err());
    }
}
