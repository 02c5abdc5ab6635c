//! Port of `librosa.effects.trim` (librosa 0.11), which `VoiceEncoder.embeds_from_wavs` applies
//! with `top_db=20` before computing mels.
use crate::error::{check_signal, invalid, Result};

/// Options of [`trim_silence`]; `Default` is librosa's defaults except `top_db`, which is the
/// VoiceEncoder's 20 dB.
#[derive(Debug, Clone, PartialEq)]
pub struct TrimOptions {
    /// Threshold in dB below the loudest frame under which frames count as silent. Default: `20`.
    pub top_db: f32,
    /// RMS frame length in samples. Default: `2048`.
    pub frame_length: usize,
    /// RMS hop in samples. Default: `512`.
    pub hop_length: usize,
}

with_setters!(TrimOptions {
    with_top_db => top_db: f32,
    with_frame_length => frame_length: usize,
    with_hop_length => hop_length: usize,
});

impl Default for TrimOptions {
    fn default() -> Self {
        Self {
            top_db: 20.0,
            frame_length: 2048,
            hop_length: 512,
        }
    }
}

/// Finds the non-silent span of `y`: returns `(start, end)` sample indices so that
/// `&y[start..end]` is the trimmed signal.
///
/// Frame RMS is computed on a centred, zero-padded framing; a frame is non-silent when its RMS
/// in dB relative to the loudest frame is above `-top_db`. Like librosa, an all-zero signal is
/// not trimmed at all (every frame is 0 dB relative to a zero reference).
pub fn trim_silence(y: &[f32], opts: &TrimOptions) -> Result<(usize, usize)> {
    check_signal("trim input", y)?;
    if opts.frame_length == 0 || opts.hop_length == 0 {
        return Err(invalid(
            "trim frame",
            "frame and hop lengths must be positive",
        ));
    }
    let n = y.len();
    let half = opts.frame_length / 2;
    let n_frames = 1 + n / opts.hop_length;
    // rms with center=True, pad_mode="constant"
    let mut rms = Vec::with_capacity(n_frames);
    for t in 0..n_frames {
        let start = (t * opts.hop_length) as isize - half as isize;
        let lo = start.max(0) as usize;
        let hi = ((start + opts.frame_length as isize).max(0) as usize).min(n);
        let sum: f64 = if lo < hi {
            y[lo..hi].iter().map(|&v| (v as f64) * (v as f64)).sum()
        } else {
            0.0
        };
        rms.push(((sum / opts.frame_length as f64) as f32).sqrt());
    }
    // amplitude_to_db(rms, ref=np.max, amin=1e-5, top_db=None) > -top_db
    let amin = 1e-5f64;
    let ref_value = rms.iter().cloned().fold(0f32, f32::max) as f64;
    let ref_db = 10.0 * (amin * amin).max(ref_value * ref_value).log10();
    let threshold = -(opts.top_db as f64);
    let loud = |r: f32| {
        let p = (r as f64) * (r as f64);
        10.0 * (amin * amin).max(p).log10() - ref_db > threshold
    };
    let first = rms.iter().position(|&r| loud(r));
    let last = rms.iter().rposition(|&r| loud(r));
    Ok(match (first, last) {
        (Some(a), Some(b)) => (a * opts.hop_length, n.min((b + 1) * opts.hop_length)),
        _ => (0, 0),
    })
}
