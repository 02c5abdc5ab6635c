//! Analysis windows: `torch.hann_window` / `scipy.signal.get_window("hann")` and Kaldi's
//! "povey" window (torchaudio `compliance/kaldi.py`).
use std::f64::consts::PI;

/// A Hann window of `len` samples. `periodic = true` is the DFT-even form used by
/// `torch.hann_window(len)` and librosa (`fftbins=True`); `false` is the symmetric form.
pub fn hann(len: usize, periodic: bool) -> Vec<f32> {
    match len {
        0 => Vec::new(),
        1 => vec![1.0],
        _ => {
            let denom = if periodic { len } else { len - 1 } as f64;
            (0..len)
                .map(|n| (0.5 - 0.5 * (2.0 * PI * n as f64 / denom).cos()) as f32)
                .collect()
        }
    }
}

/// Kaldi's povey window: the symmetric Hann window raised to the power 0.85.
pub fn povey(len: usize) -> Vec<f32> {
    hann(len, false)
        .into_iter()
        .map(|w| (w as f64).powf(0.85) as f32)
        .collect()
}

/// A Hamming window (symmetric, as Kaldi uses it).
pub fn hamming(len: usize) -> Vec<f32> {
    match len {
        0 => Vec::new(),
        1 => vec![1.0],
        _ => (0..len)
            .map(|n| (0.54 - 0.46 * (2.0 * PI * n as f64 / (len - 1) as f64).cos()) as f32)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    #[test]
    fn periodic_hann_is_symmetric_hann_of_one_more() {
        let p = hann(8, true);
        let s = hann(9, false);
        assert_abs_diff_eq!(p.as_slice(), &s[..8], epsilon = 1e-7);
        assert_eq!(p[0], 0.0);
        assert_abs_diff_eq!(p[4], 1.0, epsilon = 1e-7);
    }

    #[test]
    fn povey_endpoints_are_zero() {
        let w = povey(400);
        assert_eq!(w[0], 0.0);
        assert_abs_diff_eq!(w[399], 0.0, epsilon = 1e-12);
        assert!(w[200] > 0.99);
    }
}
