//! Port of `S3Tokenizer.log_mel_spectrogram` in chatterbox/models/s3tokenizer/s3tokenizer.py
//! (upstream 5de7a54): the whisper-style 128-bin log mel of the speech tokenizer.
use crate::error::Result;
use crate::{window, Matrix, MelFilterbank, Stft};

/// Sample rate of the speech tokenizer's input.
pub const S3_SR: u32 = 16_000;
const N_FFT: usize = 400;
const HOP: usize = 160;

/// The speech tokenizer's log mel: centred STFT (n_fft 400, hop 160, periodic Hann, reflect),
/// the last frame dropped, power spectrum, Slaney mel (`n_mels`, fmax 8 kHz),
/// `log10(max(x, 1e-10))`, floored at `max - 8` over the whole utterance, then `(x + 4) / 4`.
///
/// Output layout: `(n_mels, n_frames)` with `n_frames = len / 160` (100 frames per second).
#[derive(Debug, Clone)]
pub struct S3TokenizerMel {
    stft: Stft,
    mel: MelFilterbank,
}

impl S3TokenizerMel {
    /// Plans the transform with `n_mels` bins (128 for S3TokenizerV2).
    pub fn new(n_mels: usize) -> Result<Self> {
        Ok(Self {
            stft: Stft::new(N_FFT, HOP, &window::hann(N_FFT, true), true)?,
            mel: MelFilterbank::new(S3_SR, N_FFT, n_mels, 0.0, None)?,
        })
    }

    /// The filterbank (the reference keeps it as the `_mel_filters` buffer).
    pub fn filterbank(&self) -> &MelFilterbank {
        &self.mel
    }

    /// Frames produced for `n` samples.
    pub fn num_frames(&self, n: usize) -> usize {
        self.stft.num_frames(n).saturating_sub(1)
    }

    /// Computes the log mel of `wav` (mono, 16 kHz). Runs of frames go to rayon's threads;
    /// the values do not depend on the thread count.
    pub fn compute(&self, wav: &[f32]) -> Result<Matrix> {
        if rayon::current_num_threads() <= 1 {
            // one thread: the plain frame loop, without the runs' buffers (~20 % faster)
            return self.compute_serial(wav);
        }
        const RUN: usize = 64;
        let n_frames = self.num_frames(wav.len());
        let (n_mels, used) = (self.mel.n_mels(), self.mel.used_bins());
        // each run: its frames' log10 mel values, frame-major
        let runs = self.stft.par_frame_runs(
            wav,
            RUN,
            |frames| (vec![0f32; frames * n_mels], vec![0f32; self.stft.n_freq()]),
            |(mels, power), i, bins| {
                power_of(&bins[..used], power);
                let frame = &mut mels[i * n_mels..(i + 1) * n_mels];
                self.mel.apply_to_slice(power, frame);
                crate::math::log10_clamped(frame, 1e-10);
            },
        )?;
        let mut out = Matrix::zeros(n_mels, n_frames);
        let cols = out.cols();
        let data = out.as_mut_slice();
        // transposed run by run (a run's block stays in L1); the last STFT frame is dropped
        // (`stft[..., :-1]`)
        for (r, (mels, _)) in runs.iter().enumerate() {
            let t0 = r * RUN;
            let frames = (mels.len() / n_mels).min(n_frames.saturating_sub(t0));
            for m in 0..n_mels {
                let row = &mut data[m * cols + t0..m * cols + t0 + frames];
                for (i, o) in row.iter_mut().enumerate() {
                    *o = mels[i * n_mels + m];
                }
            }
        }
        normalise(out.as_mut_slice());
        Ok(out)
    }

    /// [`Self::compute`] frame by frame on the calling thread (the same values).
    fn compute_serial(&self, wav: &[f32]) -> Result<Matrix> {
        let n_frames = self.num_frames(wav.len());
        let mut out = Matrix::zeros(self.mel.n_mels(), n_frames);
        let mut power = vec![0f32; self.stft.n_freq()];
        let used = self.mel.used_bins();
        self.stft.for_each_frame(wav, |t, bins| {
            if t < n_frames {
                power_of(&bins[..used], &mut power);
                self.mel.apply_to_column(&power, &mut out, t);
            }
        })?;
        let data = out.as_mut_slice();
        crate::math::log10_clamped(data, 1e-10);
        normalise(data);
        Ok(out)
    }
}

/// `|bin|^2` of each bin into the start of `power`.
fn power_of(bins: &[realfft::num_complex::Complex32], power: &mut [f32]) {
    for (p, b) in power.iter_mut().zip(bins) {
        *p = b.re * b.re + b.im * b.im;
    }
}

/// Whisper's normalisation of a log10 mel: floor at the maximum - 8, then `(x + 4) / 4`.
fn normalise(data: &mut [f32]) {
    let floor = data.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) - 8.0;
    for v in data.iter_mut() {
        *v = (v.max(floor) + 4.0) / 4.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_frames_give_the_serial_values_exactly() -> Result<()> {
        let m = S3TokenizerMel::new(128)?;
        // lengths around the 64-frame runs: 1 run, a partial second run, several runs
        for n in [401, 160 * 64, 160 * 64 + 1, 160 * 200 + 37] {
            let wav: Vec<f32> = (0..n)
                .map(|i| {
                    ((i as f32) * 0.0123).sin() * 0.3 + ((i * 7919 % 101) as f32 - 50.0) * 1e-3
                })
                .collect();
            // on 3 threads whatever the machine, so that the parallel path runs
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .expect("a thread pool");
            let got = pool.install(|| m.compute(&wav))?;
            let want = m.compute_serial(&wav)?;
            assert_eq!(got.shape(), want.shape(), "{n} samples");
            assert_eq!(got.as_slice(), want.as_slice(), "{n} samples");
        }
        Ok(())
    }
}
