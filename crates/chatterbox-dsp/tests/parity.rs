//! chatterbox-dsp against fixtures recorded from the Python reference (`parity/recorders/dsp.py`).
use chatterbox_dsp::features::{
    FbankOptions, KaldiFbank, S3GenMel, S3GenMelConfig, S3TokenizerMel, VoiceEncoderMel,
    VoiceEncoderMelConfig,
};
use chatterbox_dsp::resample::{HqResampler, SincResampler};
use chatterbox_dsp::{
    window, Complex32, DspError, Istft, Matrix, MelFilterbank, Spectrum, Stft, TrimOptions,
};
use chatterbox_testkit::{Actual, Array, Error, Fixture, Suite};

fn out(name: &str, a: impl Into<Actual>) -> (String, Actual) {
    (name.to_string(), a.into())
}

fn matrix(m: Matrix) -> Array<f32> {
    let (r, c) = m.shape();
    Array::new([r, c], m.into_vec())
}

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

/// The matrix `compute` makes of the fixture's input `wav`, as the output `name`.
fn wav_matrix(
    fx: &Fixture,
    name: &str,
    compute: impl FnOnce(&[f32]) -> Result<Matrix, DspError>,
) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let m = compute(&fx.input("wav")?.data).map_err(e)?;
    Ok(vec![out(name, matrix(m))])
}

/// The samples `process` makes of the fixture's input `x`, as the output `y`.
fn resampled(
    fx: &Fixture,
    process: impl FnOnce(&[f32]) -> Result<Vec<f32>, DspError>,
) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let y = process(&fx.input("x")?.data).map_err(e)?;
    Ok(vec![out("y", Array::vector(y))])
}

/// The fixture's audio file (input `file`, one byte per value) decoded as its `extension`.
fn decoded(fx: &Fixture) -> chatterbox_testkit::Result<chatterbox_dsp::Audio> {
    let bytes: Vec<u8> = fx
        .input_i64("file")?
        .data
        .iter()
        .map(|&b| b as u8)
        .collect();
    let ext: String = fx.config("extension")?;
    chatterbox_dsp::audio::decode(bytes, Some(&ext)).map_err(e)
}

fn window_and_stft_args(
    fx: &Fixture,
) -> chatterbox_testkit::Result<(usize, usize, Vec<f32>, bool)> {
    let n_fft: usize = fx.config("n_fft")?;
    let hop: usize = fx.config("hop")?;
    let win: usize = fx.config("win_length")?;
    let center: bool = fx.config("center")?;
    Ok((n_fft, hop, window::hann(win, true), center))
}

fn stft(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let (n_fft, hop, w, center) = window_and_stft_args(fx)?;
    let x = fx.input("x")?;
    let spec = Stft::new(n_fft, hop, &w, center)
        .map_err(e)?
        .process(&x.data)
        .map_err(e)?;
    // torch layout: (n_freq, n_frames)
    let (f, t) = (spec.n_freq, spec.n_frames);
    let mut re = vec![0f32; f * t];
    let mut im = vec![0f32; f * t];
    for ti in 0..t {
        for (k, c) in spec.frame(ti).iter().enumerate() {
            re[k * t + ti] = c.re;
            im[k * t + ti] = c.im;
        }
    }
    Ok(vec![
        out("re", Array::new([f, t], re)),
        out("im", Array::new([f, t], im)),
    ])
}

fn istft(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let (n_fft, hop, w, center) = window_and_stft_args(fx)?;
    let re = fx.input("re")?;
    let im = fx.input("im")?;
    let (f, t) = (re.shape[0], re.shape[1]);
    let mut data = vec![Complex32::new(0.0, 0.0); f * t];
    for k in 0..f {
        for ti in 0..t {
            data[ti * f + k] = Complex32::new(re.data[k * t + ti], im.data[k * t + ti]);
        }
    }
    let spec = Spectrum {
        n_freq: f,
        n_frames: t,
        data,
    };
    let y = Istft::new(n_fft, hop, &w, center)
        .map_err(e)?
        .process(&spec)
        .map_err(e)?;
    Ok(vec![out("y", Array::vector(y))])
}

fn mel_filters(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let fb = MelFilterbank::new(
        fx.config("sr")?,
        fx.config("n_fft")?,
        fx.config("n_mels")?,
        fx.config("fmin")?,
        fx.config::<Option<f64>>("fmax")?,
    )
    .map_err(e)?;
    Ok(vec![out("filters", matrix(fb.to_dense()))])
}

fn s3gen_mel(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let m = S3GenMel::new(S3GenMelConfig::default()).map_err(e)?;
    wav_matrix(fx, "mel", |x| m.compute(x))
}

fn ve_mel(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let m = VoiceEncoderMel::new(VoiceEncoderMelConfig::default()).map_err(e)?;
    wav_matrix(fx, "mel", |x| m.compute(x))
}

fn s3tokenizer_mel(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let m = S3TokenizerMel::new(128).map_err(e)?;
    wav_matrix(fx, "mel", |x| m.compute(x))
}

fn kaldi_fbank(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let opts = FbankOptions {
        num_mel_bins: fx.config("num_mel_bins")?,
        subtract_mean: fx.config("subtract_mean")?,
        ..FbankOptions::default()
    };
    let f = KaldiFbank::new(opts).map_err(e)?;
    wav_matrix(fx, "feats", |x| f.compute(x))
}

fn trim(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let opts = TrimOptions {
        top_db: fx.config("top_db")?,
        frame_length: fx.config("frame_length")?,
        hop_length: fx.config("hop_length")?,
    };
    let (a, b) = chatterbox_dsp::trim_silence(&fx.input("wav")?.data, &opts).map_err(e)?;
    Ok(vec![out("range", Array::vector(vec![a as i64, b as i64]))])
}

fn resample_sinc(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let r = SincResampler::new(fx.config("orig")?, fx.config("new")?).map_err(e)?;
    resampled(fx, |x| r.process(x))
}

fn resample_hq(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let mut r = HqResampler::new(fx.config("orig")?, fx.config("new")?).map_err(e)?;
    resampled(fx, |x| r.process(x))
}

fn audio_decode(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    let audio = decoded(fx)?;
    Ok(vec![
        out("samples", Array::vector(audio.samples)),
        out("sample_rate", Array::vector(vec![audio.sample_rate as i64])),
    ])
}

/// The reference's route for a voice clip: `librosa.load(path, sr=rates[0])` (decode, channel
/// mean, soxr_hq), then `librosa.resample` (soxr_hq) to each next rate. Exact only with the
/// `soxr` feature; its fixtures live in `dsp/soxr`, which the default build does not compare.
#[cfg(feature = "soxr")]
fn load_soxr(fx: &Fixture) -> chatterbox_testkit::Result<Vec<(String, Actual)>> {
    use chatterbox_dsp::resample::HqEngine;
    let rates: Vec<u32> = fx.config("rates")?;
    let audio = decoded(fx)?;
    let mut outs = Vec::new();
    let mut rate = audio.sample_rate;
    let mut wav = audio.samples;
    for &to in &rates {
        let mut r = HqResampler::new(rate, to).map_err(e)?;
        if r.engine() != HqEngine::Soxr {
            return Err(e("the soxr feature's default engine is not libsoxr"));
        }
        wav = r.process(&wav).map_err(e)?;
        rate = to;
        outs.push(out(&format!("y_{to}"), Array::vector(wav.clone())));
    }
    Ok(outs)
}

/// The `dsp/soxr` cases (exact libsoxr resampling), with the `soxr` feature:
/// `cargo test -p chatterbox-dsp --features soxr --test parity`.
#[cfg(feature = "soxr")]
#[test]
fn dsp_soxr_parity() {
    Suite::new("dsp/soxr")
        .case("load_soxr", load_soxr)
        .run_and_assert();
}

/// Without the `soxr` feature the `dsp/soxr` cases are skipped: rubato cannot match libsoxr
/// to their tolerance (the `resample_hq` rows judge it by SNR instead). Their fixtures must
/// still load.
#[cfg(not(feature = "soxr"))]
#[test]
fn dsp_soxr_parity() {
    let root = chatterbox_testkit::committed_fixtures_root();
    let fixtures = Fixture::discover(&root, "dsp/soxr").unwrap();
    assert!(!fixtures.is_empty(), "no fixtures under dsp/soxr");
    for fx in &fixtures {
        assert_eq!(fx.meta.kind, "load_soxr", "{}", fx.meta.case);
    }
    println!(
        "dsp/soxr: {} cases skipped (exact libsoxr resampling): run \
         `cargo test -p chatterbox-dsp --features soxr --test parity`",
        fixtures.len()
    );
}

#[test]
fn dsp_parity() {
    Suite::new("dsp")
        .case("stft", stft)
        .case("istft", istft)
        .case("mel_filters", mel_filters)
        .case("s3gen_mel", s3gen_mel)
        .case("ve_mel", ve_mel)
        .case("s3tokenizer_mel", s3tokenizer_mel)
        .case("kaldi_fbank", kaldi_fbank)
        .case("trim", trim)
        .case("resample_sinc", resample_sinc)
        .case("resample_hq", resample_hq)
        .case("audio_decode", audio_decode)
        .run_and_assert();
}
