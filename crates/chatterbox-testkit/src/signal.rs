//! Deterministic test signals shared by the benches and the long-input tests (no counterpart
//! in the reference; `parity/bench/*.py` builds the same clip in numpy), and the pitch of one.

/// A speech-like clip: a glottal-like tone gliding around 120 Hz (20 harmonics falling as
/// 1/h) under a 4 Hz syllable envelope, `seconds` long at `sr`. The benches prepare their
/// voice from it (`parity/bench/harness.py`'s `speech_like` is the same clip).
pub fn speech_like(sr: u32, seconds: f64) -> Vec<f32> {
    let n = (f64::from(sr) * seconds) as usize;
    let mut phase = 0.0f64;
    (0..n)
        .map(|i| {
            let t = i as f64 / f64::from(sr);
            let f0 = 120.0 + 30.0 * (2.0 * std::f64::consts::PI * 0.7 * t).sin();
            phase += 2.0 * std::f64::consts::PI * f0 / f64::from(sr);
            let env = 0.5 + 0.5 * (2.0 * std::f64::consts::PI * 4.0 * t).sin();
            let y: f64 = (1..=20).map(|h| (phase * h as f64).sin() / h as f64).sum();
            (0.2 * env * y) as f32
        })
        .collect()
}

/// A speech-like clip with a little noise: 10 harmonics (falling as 1/h) of a tone gliding
/// around 120 Hz, amplitude-modulated at 4 Hz, plus xorshift noise, `seconds` long at `sr`
/// (rounded to a whole sample). Never 20 dB below its peak for long, so the VoiceEncoder's trim
/// keeps it whole; the DSP, speaker and tokenizer benches time their stages on it.
pub fn noisy_harmonics(sr: u32, seconds: f64) -> Vec<f32> {
    let n = (sr as f64 * seconds).round() as usize;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| {
            let t = i as f64 / sr as f64;
            let f0 = 120.0 + 30.0 * (2.0 * std::f64::consts::PI * 0.7 * t).sin();
            let mut v = 0.0;
            for h in 1..=10 {
                v += (2.0 * std::f64::consts::PI * f0 * h as f64 * t).sin() / h as f64;
            }
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let noise = (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            (0.2 * v * (0.55 + 0.45 * (8.0 * std::f64::consts::PI * t).sin()) + 0.01 * noise) as f32
        })
        .collect()
}

/// `seconds` of a steady tone of `f0` Hz at `sr` with `harmonics` harmonics of amplitude 0.3/h:
/// the time-stretch tests and bench measure its pitch before and after.
pub fn harmonic_tone(sr: u32, f0: f64, harmonics: usize, seconds: f64) -> Vec<f32> {
    let n = (f64::from(sr) * seconds) as usize;
    (0..n)
        .map(|i| {
            let t = i as f64 / f64::from(sr);
            let v: f64 = (1..=harmonics)
                .map(|h| (2.0 * std::f64::consts::PI * f0 * h as f64 * t).sin() / h as f64)
                .sum();
            (0.3 * v) as f32
        })
        .collect()
}

/// The frequency in Hz of the strongest spectral peak of `x` at `sr` (Hann window, parabolic
/// interpolation between bins), the first and last 10 % left out.
pub fn dominant_hz(x: &[f32], sr: u32) -> crate::Result<f64> {
    let x = &x[x.len() / 10..x.len() - x.len() / 10];
    let n = x.len();
    let mut buf: Vec<f32> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let w = 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos();
            v * w as f32
        })
        .collect();
    let fft = realfft::RealFftPlanner::<f32>::new().plan_fft_forward(n);
    let mut spec = fft.make_output_vec();
    fft.process(&mut buf, &mut spec)
        .map_err(crate::Error::case)?;
    let mag: Vec<f64> = spec.iter().map(|c| f64::from(c.norm())).collect();
    let k = (1..mag.len() - 1)
        .max_by(|&a, &b| mag[a].total_cmp(&mag[b]))
        .unwrap_or(1);
    let (a, b, c) = (mag[k - 1].ln(), mag[k].ln(), mag[k + 1].ln());
    let delta = 0.5 * (a - c) / (a - 2.0 * b + c);
    Ok((k as f64 + delta) * f64::from(sr) / n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speech_like_has_its_length_and_level() {
        let x = speech_like(16_000, 0.5);
        assert_eq!(x.len(), 8_000);
        let peak = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(peak > 0.1 && peak < 1.0, "peak {peak}");
        assert_eq!(x, speech_like(16_000, 0.5), "deterministic");
    }

    #[test]
    fn noisy_harmonics_has_its_length_and_level() {
        let x = noisy_harmonics(16_000, 0.25);
        assert_eq!(x.len(), 4_000);
        let peak = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(peak > 0.1 && peak < 1.0, "peak {peak}");
        assert_eq!(x, noisy_harmonics(16_000, 0.25), "deterministic");
    }
}
