//! Property tests: STFT/iSTFT round trip, resampler lengths and DC gain, filterbank shapes,
//! and decoding arbitrary or damaged files.
mod common;

use chatterbox_dsp::resample::{HqResampler, SincResampler};
use chatterbox_dsp::{audio, window, Istft, MelFilterbank, Stft};
use proptest::prelude::*;
use std::sync::LazyLock;

fn signal(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

const RATES: [u32; 7] = [8000, 16000, 22050, 24000, 32000, 44100, 48000];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// torch.istft(torch.stft(x)) == x for a centred Hann STFT with hop <= n_fft / 2.
    #[test]
    fn stft_istft_round_trip(
        n_fft in prop::sample::select(vec![16usize, 64, 400, 512, 1920]),
        hop_div in 2usize..=4,
        frames in 2usize..40,
        seed in any::<u64>(),
    ) {
        let hop = n_fft / hop_div;
        let len = hop * frames + 1;
        prop_assume!(len > n_fft / 2);
        let x = signal(len, seed);
        let w = window::hann(n_fft, true);
        let spec = Stft::new(n_fft, hop, &w, true).unwrap().process(&x).unwrap();
        let y = Istft::new(n_fft, hop, &w, true).unwrap().process(&spec).unwrap();
        // length None: istft returns hop * (frames - 1) samples
        prop_assert_eq!(y.len(), hop * (spec.n_frames - 1));
        for (a, b) in x.iter().zip(&y) {
            prop_assert!((a - b).abs() < 1e-5, "{} vs {}", a, b);
        }
    }

    /// Both resamplers give ceil-length output and pass DC with unit gain away from the edges.
    #[test]
    fn resampler_length_and_dc_gain(
        from in prop::sample::select(RATES.to_vec()),
        to in prop::sample::select(RATES.to_vec()),
        len in 2000usize..12000,
    ) {
        let x = vec![0.25f32; len];
        let sinc = SincResampler::new(from, to).unwrap();
        let y = sinc.process(&x).unwrap();
        prop_assert_eq!(y.len(), (len * to as usize).div_ceil(from as usize));
        let mut hq = HqResampler::new(from, to).unwrap();
        let z = hq.process(&x).unwrap();
        prop_assert_eq!(z.len(), (len as f64 * (to as f64 / from as f64)).ceil() as usize);
        // away from the edges (the filters' support), DC passes unchanged
        let edge = 400 * to as usize / from.min(to) as usize;
        for v in y.iter().chain(&z).skip(edge).take(y.len().saturating_sub(2 * edge)) {
            prop_assert!((v - 0.25).abs() < 1e-3, "dc gain off: {}", v);
        }
    }

    /// Filterbanks have the requested shape, non-negative weights, and every filter a single
    /// contiguous non-zero span.
    #[test]
    fn filterbank_shapes(
        sr in prop::sample::select(RATES.to_vec()),
        n_fft in prop::sample::select(vec![256usize, 400, 512, 1024, 1920, 2048]),
        n_mels in 8usize..128,
    ) {
        let fb = MelFilterbank::new(sr, n_fft, n_mels, 0.0, None).unwrap();
        let dense = fb.to_dense();
        prop_assert_eq!(dense.shape(), (n_mels, n_fft / 2 + 1));
        for m in 0..n_mels {
            let row = dense.row(m);
            prop_assert!(row.iter().all(|&w| w >= 0.0));
            let nz: Vec<usize> = (0..row.len()).filter(|&k| row[k] > 0.0).collect();
            if let (Some(a), Some(b)) = (nz.first(), nz.last()) {
                prop_assert_eq!(b - a + 1, nz.len(), "filter {} is not contiguous", m);
            }
        }
    }
}

/// Each container's first bytes, so that arbitrary bytes after them reach its parser.
const MAGICS: [&[u8]; 9] = [
    b"",
    b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00",
    b"fLaC\x00\x00\x00\x22",
    b"OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00",
    b"\x00\x00\x00\x1cftypM4A \x00\x00\x02\x00",
    b"\xff\xfb\x90\x64",
    b"\xff\xf1\x50\x80",
    b"ID3\x04\x00\x00\x00\x00\x00\x00",
    b"\x00\x00\x00\x00moov",
];

static FILES: LazyLock<Vec<(String, Vec<u8>)>> = LazyLock::new(common::valid_files);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes, alone or behind a container's magic, are audio or a typed error.
    #[test]
    fn decode_arbitrary_bytes(
        magic in prop::sample::select(MAGICS.to_vec()),
        body in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let bytes = [magic, &body[..]].concat();
        let result = audio::decode(bytes, None);
        if let Err(why) = common::audio_or_file_error(result) {
            prop_assert!(false, "{}", why);
        }
    }

    /// A valid file cut at a random point, with up to 8 bytes overwritten: audio or a typed
    /// error.
    #[test]
    fn decode_damaged_files(
        file in 0..FILES.len(),
        cut in 0.0..=1.0f64,
        edits in prop::collection::vec((0.0..1.0f64, any::<u8>()), 0..8),
    ) {
        let (name, whole) = &FILES[file];
        let mut bytes = whole[..(whole.len() as f64 * cut) as usize].to_vec();
        for (at, value) in edits {
            if !bytes.is_empty() {
                let i = (at * bytes.len() as f64) as usize;
                bytes[i] = value;
            }
        }
        let result = audio::decode(bytes, None);
        if let Err(why) = common::audio_or_file_error(result) {
            prop_assert!(false, "{}: {}", name, why);
        }
    }
}
