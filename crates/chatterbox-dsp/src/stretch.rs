//! Speed: pitch-preserving time-scale modification of speech, whole or streamed.
//!
//! The audio is played `speed` times faster (`2.0`: half as long) at the same pitch, by WSOLA
//! (waveform-similarity overlap-add, the [`wsola`] crate: pure Rust, MIT): the input is cut
//! into 30 ms Hann frames that are laid down 15 ms apart in the output but taken
//! `15 ms · speed` apart in the input, each moved by up to ±12 ms to the spot whose waveform
//! best continues the output so far. Frames are copied, never resampled, so the pitch and the
//! voice stay as they were; only the time between them changes.
//!
//! The output of `n` input samples is exactly [`stretched_len`]`(n, speed)` samples long
//! (`round(n / speed)`), and streaming gives the same samples as the whole file: a
//! [`TimeStretcher`] fed chunk by chunk (any sizes) hands out, concatenated, exactly what
//! [`time_stretch`] returns for the concatenated input. It holds back about 60 ms of input
//! (a frame plus the search range) until more comes or [`TimeStretcher::finish`] is called.
//! At `speed == 1.0` the output is the input, bit for bit.
//!
//! WSOLA places each frame by its start, so its output at time `t` holds the input around
//! `t · speed + hop · (1 − speed)`: late by up to 11 ms of input when slowing down, early when
//! speeding up (at 4x the last 45 ms of input would never be heard), and the first hop fades in
//! (the first frame has nothing to overlap). The stretcher cancels that offset: it feeds one hop
//! of silence before the input and drops the first hop of output, so the output at `t` holds the
//! input at `t · speed` from the first sample to the last, and it pads the end with silence so
//! that the last frames are placed with a full search range before the output is cut to its
//! length.
use crate::error::{DspError, Result};
use std::num::{NonZeroU16, NonZeroU32};

/// The slowest speed (OpenAI's `speed` range): four times as long.
pub const MIN_SPEED: f32 = 0.25;
/// The fastest speed (OpenAI's `speed` range): a quarter of the length.
pub const MAX_SPEED: f32 = 4.0;

/// WSOLA's synthesis hop (half a frame), in milliseconds: the crate's speech default.
const HOP_MS: f32 = 15.0;
/// WSOLA's similarity search range (either side), in milliseconds: the crate's default.
const SEARCH_MS: f32 = 12.0;
/// Output frames pulled from the stretcher per call.
const PULL_HOPS: usize = 16;

/// Returns `speed` when it is finite and within [`MIN_SPEED`]`..=`[`MAX_SPEED`], else
/// [`DspError::SpeedOutOfRange`].
pub fn check_speed(speed: f32) -> Result<f32> {
    if speed.is_finite() && (MIN_SPEED..=MAX_SPEED).contains(&speed) {
        Ok(speed)
    } else {
        Err(DspError::SpeedOutOfRange { speed })
    }
}

/// Where sample `position` of the input lies in the output at `speed` (`round(position /
/// speed)`); for `position` = the input's length, the output's length.
pub fn stretched_len(position: usize, speed: f32) -> usize {
    (position as f64 / f64::from(speed)).round() as usize
}

/// `floor(position / speed)`: how far the output may go while more input can still come.
fn stretched_floor(position: usize, speed: f32) -> usize {
    (position as f64 / f64::from(speed)).floor() as usize
}

/// Plays `samples` (mono, `sample_rate` Hz) `speed` times faster at the same pitch: the whole
/// signal at once (see the [module](self) documentation). The output has
/// [`stretched_len`]`(samples.len(), speed)` samples; at `speed == 1.0` it is `samples`.
pub fn time_stretch(samples: &[f32], sample_rate: u32, speed: f32) -> Result<Vec<f32>> {
    let mut stretcher = TimeStretcher::new(sample_rate, speed)?;
    let mut out = stretcher.process(samples)?;
    out.extend(stretcher.finish()?);
    Ok(out)
}

/// A streaming time stretcher for one mono signal: [`TimeStretcher::process`] each piece as it
/// comes, then [`TimeStretcher::finish`]. The pieces it returns, concatenated, are exactly
/// [`time_stretch`] of the whole signal, whatever the pieces' sizes.
#[derive(Debug, Clone)]
pub struct TimeStretcher {
    /// WSOLA's state; `None` at speed 1 (the input passes through).
    wsola: Option<wsola::TimeStretch>,
    speed: f32,
    /// WSOLA's hop, in samples.
    hop: usize,
    /// Silence fed after the input's end so that its last samples are placed with a full
    /// frame and search range (a frame plus the search range).
    end_padding: usize,
    /// Input samples taken so far.
    taken: usize,
    /// Output samples handed out so far.
    given: usize,
    /// Output samples still to drop at the start (the hop that the leading silence makes).
    skip: usize,
    /// Output made but not yet handed out (it would run past `floor(taken / speed)`).
    pending: Vec<f32>,
    /// Scratch for WSOLA's output.
    scratch: Vec<f32>,
}

impl TimeStretcher {
    /// A stretcher for a mono signal at `sample_rate` Hz, played `speed` times faster
    /// ([`MIN_SPEED`]`..=`[`MAX_SPEED`]).
    pub fn new(sample_rate: u32, speed: f32) -> Result<Self> {
        let speed = check_speed(speed)?;
        let rate = NonZeroU32::new(sample_rate).ok_or_else(|| DspError::UnsupportedSampleRate {
            what: "time stretch".into(),
            got: sample_rate,
            expected: None,
        })?;
        let config = wsola::Config {
            hop_ms: HOP_MS,
            search_ms: SEARCH_MS,
        };
        let ms = |v: f32| ((sample_rate as f32 * v / 1000.0).round() as usize).max(1);
        let hop = ms(HOP_MS);
        let wsola = if speed == 1.0 {
            None
        } else {
            let mut w = wsola::TimeStretch::with_config(rate, NonZeroU16::MIN, config)
                .map_err(|e| DspError::Stretch(e.to_string()))?;
            w.set_tempo(speed);
            Some(w)
        };
        let mut s = Self {
            wsola,
            speed,
            hop,
            end_padding: 2 * hop + ms(SEARCH_MS),
            taken: 0,
            given: 0,
            skip: 0,
            pending: Vec::new(),
            scratch: vec![0.0; hop * PULL_HOPS],
        };
        s.start();
        Ok(s)
    }

    /// Starts a signal: the hop of silence before it (see the [module](self) documentation).
    fn start(&mut self) {
        if let Some(w) = self.wsola.as_mut() {
            w.push(&vec![0.0; self.hop]);
            self.skip = self.hop;
        }
    }

    /// The speed.
    pub fn speed(&self) -> f32 {
        self.speed
    }

    /// Takes the next piece of the signal; returns the output that is final (possibly none:
    /// about 60 ms of input are held back until more comes).
    pub fn process(&mut self, samples: &[f32]) -> Result<Vec<f32>> {
        if let Some((index, &value)) = samples.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(DspError::NonFinite {
                what: "time stretch input".into(),
                index: self.taken + index,
                value,
            });
        }
        self.taken += samples.len();
        let Some(w) = self.wsola.as_mut() else {
            self.given += samples.len();
            return Ok(samples.to_vec());
        };
        w.push(samples);
        self.pull()?;
        let due = stretched_floor(self.taken, self.speed).saturating_sub(self.given);
        Ok(self.hand_out(due))
    }

    /// Ends the signal: the rest of the output, which makes the whole exactly
    /// [`stretched_len`] of the input. The stretcher is then ready for a new signal.
    pub fn finish(&mut self) -> Result<Vec<f32>> {
        let target = stretched_len(self.taken, self.speed);
        let out = match self.wsola.as_mut() {
            None => Vec::new(),
            Some(w) => {
                w.push(&vec![0.0; self.end_padding]);
                w.set_draining();
                self.pull()?;
                let due = target.saturating_sub(self.given);
                // WSOLA's last frame can fall a little short: the rest is the padding's silence
                self.pending.resize(due.max(self.pending.len()), 0.0);
                self.hand_out(due)
            }
        };
        self.taken = 0;
        self.given = 0;
        self.pending.clear();
        self.start();
        Ok(out)
    }

    /// Moves everything WSOLA can make now into `pending`.
    fn pull(&mut self) -> Result<()> {
        let Some(w) = self.wsola.as_mut() else {
            return Ok(());
        };
        loop {
            match w.pull(&mut self.scratch) {
                Ok(0) | Err(wsola::Error::NotEnoughInput) => return Ok(()),
                Ok(n) => {
                    let dropped = self.skip.min(n);
                    self.skip -= dropped;
                    self.pending.extend_from_slice(&self.scratch[dropped..n]);
                }
                Err(e) => return Err(DspError::Stretch(e.to_string())),
            }
        }
    }

    /// Hands out up to `due` samples of `pending`.
    fn hand_out(&mut self, due: usize) -> Vec<f32> {
        let n = due.min(self.pending.len());
        self.given += n;
        self.pending.drain(..n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SR: u32 = 24_000;

    /// `secs` of a tone of `f0` Hz with `harmonics` harmonics of falling amplitude.
    fn harmonic(f0: f64, harmonics: usize, secs: f64) -> Vec<f32> {
        chatterbox_testkit::harmonic_tone(SR, f0, harmonics, secs)
    }

    #[test]
    fn the_pitch_stays_and_the_length_scales() {
        for (f0, harmonics) in [(220.0, 1), (150.0, 8)] {
            let x = harmonic(f0, harmonics, 2.0);
            for speed in [0.25, 0.5, 0.8, 1.25, 2.0, 4.0] {
                let y = time_stretch(&x, SR, speed).unwrap();
                assert_eq!(y.len(), stretched_len(x.len(), speed), "speed {speed}");
                let got = chatterbox_testkit::dominant_hz(&y, SR).unwrap();
                let err = (got - f0).abs() / f0;
                assert!(err < 0.01, "{f0} Hz at speed {speed}: {got:.2} Hz");
                assert!(y.iter().all(|v| v.is_finite() && v.abs() < 1.0));
            }
        }
    }

    #[test]
    fn the_start_and_the_end_are_real_audio() {
        let x = harmonic(220.0, 1, 1.0);
        for speed in [0.25, 2.0, 4.0] {
            let y = time_stretch(&x, SR, speed).unwrap();
            let tail = &y[y.len() - 240..];
            let rms = (tail.iter().map(|v| v * v).sum::<f32>() / tail.len() as f32).sqrt();
            // a sine of amplitude 0.3 has an RMS of 0.21
            assert!(rms > 0.15, "speed {speed}: the last 10 ms have RMS {rms}");
            let head = &y[..240];
            let rms = (head.iter().map(|v| v * v).sum::<f32>() / head.len() as f32).sqrt();
            assert!(rms > 0.15, "speed {speed}: the first 10 ms have RMS {rms}");
        }
    }

    #[test]
    fn input_at_t_is_heard_at_t_over_speed() {
        // silence, then a tone from 0.5 s on: its onset moves to 0.5 s / speed
        let mut x = vec![0.0; 12_000];
        x.extend(harmonic(220.0, 1, 0.5));
        for speed in [0.25, 0.5, 2.0, 4.0] {
            let y = time_stretch(&x, SR, speed).unwrap();
            let onset = y.iter().position(|v| v.abs() > 0.05).unwrap();
            let want = stretched_len(12_000, speed);
            // within a hop (15 ms): WSOLA moves frames by whole waveform periods
            assert!(
                onset.abs_diff(want) <= 360,
                "speed {speed}: {onset} vs {want}"
            );
        }
    }

    #[test]
    fn streaming_equals_the_whole_file() {
        let x = harmonic(130.0, 6, 1.3);
        for speed in [0.25, 0.7, 1.5, 4.0] {
            let whole = time_stretch(&x, SR, speed).unwrap();
            let mut s = TimeStretcher::new(SR, speed).unwrap();
            let mut streamed = Vec::new();
            let mut at = 0;
            // pieces of uneven sizes, an empty one among them
            for (i, size) in [1, 0, 333, 4_800, 17, 9_600].iter().cycle().enumerate() {
                if at >= x.len() {
                    break;
                }
                let end = (at + size + i).min(x.len());
                let piece = s.process(&x[at..end]).unwrap();
                assert!(streamed.len() + piece.len() <= stretched_len(end, speed));
                streamed.extend(piece);
                at = end;
            }
            streamed.extend(s.finish().unwrap());
            assert_eq!(streamed, whole, "speed {speed}");
        }
    }

    #[test]
    fn speed_one_is_the_identity() {
        let x = harmonic(200.0, 3, 0.5);
        assert_eq!(time_stretch(&x, SR, 1.0).unwrap(), x);
        let mut s = TimeStretcher::new(SR, 1.0).unwrap();
        assert_eq!(s.process(&x[..100]).unwrap(), &x[..100]);
        assert!(s.finish().unwrap().is_empty());
    }

    #[test]
    fn short_and_empty_signals_keep_their_length() {
        for len in [0, 1, 100, 719, 2_000] {
            let x = vec![0.1; len];
            let y = time_stretch(&x, SR, 2.0).unwrap();
            assert_eq!(y.len(), stretched_len(len, 2.0));
        }
        // finish resets: the next signal starts afresh
        let mut s = TimeStretcher::new(SR, 0.5).unwrap();
        let x = harmonic(220.0, 1, 0.2);
        let mut first = s.process(&x).unwrap();
        first.extend(s.finish().unwrap());
        let mut second = s.process(&x).unwrap();
        second.extend(s.finish().unwrap());
        assert_eq!(first, second);
    }

    #[test]
    fn bad_speeds_rates_and_samples_are_errors() {
        for speed in [0.0, 0.24, 4.01, -1.0, f32::NAN, f32::INFINITY] {
            let e = time_stretch(&[0.0; 10], SR, speed).unwrap_err();
            assert!(
                matches!(e, DspError::SpeedOutOfRange { .. }),
                "{speed}: {e}"
            );
            assert!(e.to_string().contains("0.25 to 4"), "{e}");
        }
        assert_eq!(check_speed(0.25).unwrap(), 0.25);
        assert_eq!(check_speed(4.0).unwrap(), 4.0);
        assert!(matches!(
            TimeStretcher::new(0, 2.0).unwrap_err(),
            DspError::UnsupportedSampleRate { got: 0, .. }
        ));
        let e = time_stretch(&[0.0, f32::NAN], SR, 2.0).unwrap_err();
        assert!(matches!(e, DspError::NonFinite { index: 1, .. }), "{e}");
    }
}
