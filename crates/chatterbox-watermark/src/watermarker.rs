//! Port of perth/perth_net/perth_net_implicit/perth_watermarker.py (resemble-perth 1.0.1):
//! `PerthImplicitWatermarker.apply_watermark` and `get_watermark`.
//!
//! - Embedding resamples to the network's 32 kHz with `librosa.resample`'s default
//!   (`soxr_hq`: chatterbox-dsp's `HqResampler`, exact with the `soxr` feature), watermarks the
//!   STFT magnitude and resamples back.
//! - Detection resamples with `res_type="polyphase"` (`scipy.signal.resample_poly`:
//!   [`PolyphaseResampler`]), decodes one raw score, clips it to [0, 1] and rounds it (torch's
//!   round: ties to even), which is what chatterbox and Perth's CLI print as the watermark.
use crate::audio_processor::check_signal;
use crate::{PerthConfig, PerthNet, PolyphaseResampler, Result, WatermarkError};
use candle_core::{Device, Tensor};
use chatterbox_dsp::resample::HqResampler;
use std::path::Path;

/// Lowest sample rate accepted, in Hz.
pub const MIN_SAMPLE_RATE: u32 = 1_000;
/// Highest sample rate accepted, in Hz (the polyphase filter grows with the rates' reduced
/// ratio: at most about 7.7 M taps here).
pub const MAX_SAMPLE_RATE: u32 = 384_000;

/// What the detector says about a clip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Detection {
    /// The decoder's raw score (`get_watermark` before `clip`): about 1 when watermarked.
    pub raw: f32,
    /// `clip(raw, 0, 1)`: `get_watermark(..., round=False)`.
    pub score: f32,
    /// `round(score)`, 0 or 1: `get_watermark(...)`, the reference's default.
    pub confidence: f32,
}

impl Detection {
    /// Whether the reference would call the clip watermarked (`confidence == 1`).
    pub fn is_watermarked(&self) -> bool {
        self.confidence >= 1.0
    }
}

/// `PerthImplicitWatermarker`: embeds and detects Perth's implicit watermark.
#[derive(Debug, Clone)]
pub struct PerthWatermarker {
    net: PerthNet,
}

impl PerthWatermarker {
    /// Wraps a built network (its device is the one it computes on).
    pub fn new(net: PerthNet) -> Self {
        Self { net }
    }

    /// Loads the shipped `implicit` model ([`PerthConfig::implicit`]) from
    /// `perth_net_250000.pth.tar` (or a safetensors conversion) onto `device`.
    pub fn load(path: impl AsRef<Path>, device: &Device) -> Result<Self> {
        Ok(Self::new(PerthNet::load(
            path,
            &PerthConfig::implicit(),
            device,
        )?))
    }

    /// The shipped model's architecture ([`PerthConfig::implicit`]) with seeded random
    /// weights, uniform in `±1/sqrt(fan_in)` (the last layer of each stack 100 times smaller,
    /// so that the encoder's residual is a small change of the magnitudes, as the shipped
    /// model's is), on `device`: the same kernels and the same work per call as the shipped
    /// model, for tests and benches that cannot carry its 37 MB. The watermark it embeds is not
    /// Perth's (its detector will not find it).
    pub fn random(seed: u64, device: &Device) -> Result<Self> {
        let cfg = PerthConfig::implicit();
        // xorshift64 (a zero state would stay zero)
        let mut state = seed | 1;
        let mut weights = std::collections::HashMap::new();
        for (name, shape) in PerthNet::weight_shapes(&cfg) {
            let fan_in = shape.iter().skip(1).product::<usize>().max(1);
            let last = if name.contains(".6.conv.") { 0.01 } else { 1.0 };
            let scale = (last * (1.0 / fan_in as f64).sqrt()) as f32;
            let values: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let unit = (state >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                    (unit * 2.0 - 1.0) * scale
                })
                .collect();
            weights.insert(name, Tensor::from_vec(values, shape, device)?);
        }
        Ok(Self::new(PerthNet::from_state_dict(&cfg, weights, device)?))
    }

    /// The network.
    pub fn net(&self) -> &PerthNet {
        &self.net
    }

    fn check_rate(sample_rate: u32) -> Result<()> {
        if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&sample_rate) {
            return Err(WatermarkError::UnsupportedSampleRate {
                got: sample_rate,
                min: MIN_SAMPLE_RATE,
                max: MAX_SAMPLE_RATE,
            });
        }
        Ok(())
    }

    /// The fewest samples at `sample_rate` that both methods accept: after resampling to the
    /// network's rate they must fill the STFT's reflect padding (1025 samples at 32 kHz, 32 ms;
    /// 769 at 24 kHz).
    pub fn min_signal_len(&self, sample_rate: u32) -> usize {
        let need = self.net.audio_processor().min_signal_len();
        let net_sr = self.net.config().sample_rate;
        let resampled = |n: usize| -> usize {
            if sample_rate == net_sr {
                n
            } else {
                (n as f64 * (f64::from(net_sr) / f64::from(sample_rate.max(1)))).ceil() as usize
            }
        };
        let mut n = (need as u64 * u64::from(sample_rate) / u64::from(net_sr.max(1))) as usize;
        n = n.saturating_sub(2);
        while resampled(n) < need {
            n += 1;
        }
        n
    }

    fn check_input(&self, what: &'static str, signal: &[f32], sample_rate: u32) -> Result<()> {
        Self::check_rate(sample_rate)?;
        check_signal(what, signal)?;
        let min = self.min_signal_len(sample_rate);
        if signal.len() < min {
            return Err(WatermarkError::SignalTooShort {
                what,
                len: signal.len(),
                sample_rate,
                min,
            });
        }
        Ok(())
    }

    fn magspec(&self, mag: &[f32], n_freq: usize, n_frames: usize) -> Result<Tensor> {
        Ok(Tensor::from_slice(
            mag,
            (1, n_freq, n_frames),
            self.net.device(),
        )?)
    }

    /// `apply_watermark(signal, sample_rate)`: the watermarked signal at `sample_rate`. At the
    /// network's rate (32 kHz) the output is the input's length rounded down to a whole hop
    /// (320 samples), as the reference's iSTFT returns; at other rates it is
    /// `ceil(len32 * sample_rate / 32000)` for that rounded 32 kHz length `len32`.
    pub fn apply_watermark(&self, signal: &[f32], sample_rate: u32) -> Result<Vec<f32>> {
        self.check_input("apply_watermark", signal, sample_rate)?;
        let net_sr = self.net.config().sample_rate;
        let change_rate = sample_rate != net_sr;
        let resampled;
        let x = if change_rate {
            resampled = HqResampler::new(sample_rate, net_sr)?.process(signal)?;
            &resampled[..]
        } else {
            signal
        };
        let ap = self.net.audio_processor();
        let mut mp = ap.signal_to_magphase(x)?;
        let magspec = self.magspec(&mp.mag, mp.n_freq, mp.n_frames)?;
        let (wm, _mask) = self.net.encoder().forward(&magspec)?;
        mp.mag = wm.flatten_all()?.to_vec1::<f32>()?;
        let y = ap.magphase_to_signal(&mp)?;
        if change_rate {
            Ok(HqResampler::new(net_sr, sample_rate)?.process(&y)?)
        } else {
            Ok(y)
        }
    }

    /// Runs the detector: the raw score, clipped, and rounded ([`Detection`]). Silence (no
    /// frame passes the loudness mask) is [`WatermarkError::NothingToDetect`], where the
    /// reference returns NaN.
    pub fn detect(&self, signal: &[f32], sample_rate: u32) -> Result<Detection> {
        self.check_input("get_watermark", signal, sample_rate)?;
        let net_sr = self.net.config().sample_rate;
        let resampled;
        let x = if sample_rate != net_sr {
            resampled = PolyphaseResampler::new(sample_rate, net_sr)?.process(signal)?;
            &resampled[..]
        } else {
            signal
        };
        let mp = self.net.audio_processor().signal_to_magnitude(x)?;
        let magspec = self.magspec(&mp.mag, mp.n_freq, mp.n_frames)?;
        let raw = self
            .net
            .decoder()
            .forward(&magspec)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let raw = raw.first().copied().unwrap_or(f32::NAN);
        if !raw.is_finite() {
            return Err(WatermarkError::NothingToDetect);
        }
        let score = raw.clamp(0.0, 1.0);
        Ok(Detection {
            raw,
            score,
            confidence: score.round_ties_even(),
        })
    }

    /// `get_watermark(signal, sample_rate)`: 1.0 when the clip carries the watermark, 0.0 when
    /// not (the clipped, rounded score the reference returns by default).
    pub fn get_watermark(&self, signal: &[f32], sample_rate: u32) -> Result<f32> {
        Ok(self.detect(signal, sample_rate)?.confidence)
    }
}
