//! chatterbox-vocoder against fixtures recorded from the Python reference
//! (`parity/recorders/vocoder.py`).
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_testkit::{f32_array, Actual, Error, Fixture, Suite};
use chatterbox_vocoder::{F0PredictorConfig, HiFTConfig, HiFTGenerator, SineDraws, TrimFade};
use std::path::Path;

type Outputs = chatterbox_testkit::Result<Vec<(String, Actual)>>;

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

fn input(fx: &Fixture, name: &str, dev: &Device) -> chatterbox_testkit::Result<Tensor> {
    let a = fx.input(name)?;
    Tensor::from_vec(a.data, a.shape, dev).map_err(e)
}

fn out(name: &str, t: &Tensor) -> chatterbox_testkit::Result<(String, Actual)> {
    Ok((name.to_string(), f32_array(t)?.into()))
}

fn model(fx: &Fixture, dev: &Device) -> chatterbox_testkit::Result<HiFTGenerator> {
    model_from(fx, fx.safetensors_path(), dev)
}

/// The fixture's HiFT configuration with the weights of `weights`.
fn model_from(
    fx: &Fixture,
    weights: &Path,
    dev: &Device,
) -> chatterbox_testkit::Result<HiFTGenerator> {
    let mut cfg: HiFTConfig = fx.config("hift")?;
    cfg.f0_predictor = fx.config::<F0PredictorConfig>("f0_predictor")?;
    // SAFETY: the fixture file is not modified while the test runs.
    let vb =
        unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, dev) }.map_err(e)?;
    HiFTGenerator::new(&cfg, vb).map_err(e)
}

/// The device the cases run on: the CPU, or `CHATTERBOX_PARITY_DEVICE=cuda` (or `metal`, with
/// the crate feature) to check a GPU build against the same recordings.
fn device() -> chatterbox_testkit::Result<Device> {
    chatterbox_testkit::test_device("CHATTERBOX_PARITY_DEVICE")
}

/// `decode(mel, source)` from a recorded source.
fn decode(fx: &Fixture) -> Outputs {
    let dev = device()?;
    let hift = model(fx, &dev)?;
    let wav = hift
        .decode(&input(fx, "mel", &dev)?, &input(fx, "source", &dev)?)
        .map_err(e)?;
    Ok(vec![out("wav", &wav)?])
}

/// `inference` with recorded draws: the F0, the source from the recorded F0, the waveform from
/// the recorded source (+ trim_fade), and the whole chain from the mel.
fn inference(fx: &Fixture) -> Outputs {
    let dev = device()?;
    let hift = model(fx, &dev)?;
    let mel = input(fx, "mel", &dev)?;
    let draws = SineDraws::new(input(fx, "phase", &dev)?, input(fx, "noise", &dev)?);
    let cache = if fx.names().iter().any(|n| n == "in.cache_source") {
        Some(input(fx, "cache_source", &dev)?)
    } else {
        None
    };
    let f0 = hift.f0(&mel).map_err(e)?;
    let source = hift
        .source(&input(fx, "f0", &dev)?, &draws, cache.as_ref())
        .map_err(e)?;
    let wav = hift.decode(&mel, &input(fx, "source", &dev)?).map_err(e)?;
    let faded = TrimFade::new(hift.config().sampling_rate, &dev)
        .and_then(|t| t.forward(&wav))
        .map_err(e)?;
    let (wav_chain, _) = hift
        .inference_with_draws(&mel, &draws, cache.as_ref())
        .map_err(e)?;
    Ok(vec![
        out("f0", &f0)?,
        out("source", &source)?,
        out("wav", &wav)?,
        out("wav_faded", &faded)?,
        out("wav_chain", &wav_chain)?,
    ])
}

#[derive(serde::Deserialize)]
struct StreamChunk {
    finalize: bool,
}

/// The HiFT half of a streaming case (`recorders/vocoder.py` `record_stream`), chunk by chunk
/// through the recorded schedule, joined as CosyVoice2's `token2wav` joins chunks (the join is
/// restated here; chatterbox-pipeline's `StreamingVocoder` is the library's): each chunk's mel
/// behind the previous input's last `mel_cache_frames` frames, `cache_source` = the previous
/// source's last `source_cache_samples`, the head crossfaded (Hamming window) with the previous
/// waveform's held-back tail, and `trim_fade` on the start of the stream. Weights: the
/// `weights_case` fixture's.
fn hift_stream(fx: &Fixture) -> Outputs {
    let dev = device()?;
    let wcase: String = fx.config("weights_case")?;
    let hift = model_from(
        fx,
        &fx.safetensors_path()
            .with_file_name(format!("{wcase}.safetensors")),
        &dev,
    )?;
    let overlap: usize = fx.config("mel_cache_frames")?;
    let tail: usize = fx.config("source_cache_samples")?;
    let spf = hift.config().samples_per_frame();
    if tail != overlap * spf {
        return Err(e(format!(
            "source_cache_samples {tail} != {overlap} frames x {spf}"
        )));
    }
    let n = 2 * tail;
    let window: Vec<f64> = (0..n)
        .map(|i| 0.54 - 0.46 * (2.0 * std::f64::consts::PI * i as f64 / (n - 1) as f64).cos())
        .collect();
    let trim = TrimFade::new(hift.config().sampling_rate, &dev).map_err(e)?;
    let fade = trim
        .forward(&Tensor::ones((1, trim.len()), DType::F32, &dev).map_err(e)?)
        .map_err(e)?
        .squeeze(0)
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(e)?;
    let chunks: Vec<StreamChunk> = fx.config("chunks")?;
    // (mel, source, speech) tails of the previous chunk
    let mut cache: Option<(Tensor, Tensor, Vec<f32>)> = None;
    let mut emitted = 0;
    let mut outs = Vec::new();
    for (k, c) in chunks.iter().enumerate() {
        let mel = input(fx, &format!("mel_{k}"), &dev)?;
        let (mel_in, cache_source) = match &cache {
            Some((m, s, _)) => (Tensor::cat(&[m, &mel], 2).map_err(e)?, Some(s)),
            None => (mel, None),
        };
        let t = mel_in.dim(2).map_err(e)?;
        let block = input(fx, &format!("noise_block_{k}"), &dev)?;
        let reps = (t * spf).div_ceil(block.dim(2).map_err(e)?);
        let noise = block
            .repeat((1, 1, reps))
            .and_then(|b| b.narrow(2, 0, t * spf)?.contiguous())
            .map_err(e)?;
        let draws = SineDraws::new(input(fx, &format!("phase_{k}"), &dev)?, noise);
        let (wav, source) = hift
            .inference_with_draws(&mel_in, &draws, cache_source)
            .map_err(e)?;
        let mut speech = wav.squeeze(0).and_then(|w| w.to_vec1::<f32>()).map_err(e)?;
        if let Some((_, _, prev)) = &cache {
            for (i, s) in speech[..tail].iter_mut().enumerate() {
                *s = (f64::from(*s) * window[i] + f64::from(prev[i]) * window[tail + i]) as f32;
            }
        }
        cache = if c.finalize {
            None
        } else {
            let len = source.dim(2).map_err(e)?;
            Some((
                mel_in.narrow(2, t - overlap, overlap).map_err(e)?,
                source.narrow(2, len - tail, tail).map_err(e)?,
                speech.split_off(speech.len() - tail),
            ))
        };
        for (s, f) in speech.iter_mut().zip(fade.iter().skip(emitted)) {
            *s *= f;
        }
        emitted += speech.len();
        let len = speech.len();
        outs.push(out(
            &format!("audio_{k}"),
            &Tensor::from_vec(speech, (1, len), &Device::Cpu).map_err(e)?,
        )?);
    }
    Ok(outs)
}

#[test]
fn parity() {
    Suite::new("vocoder")
        .case("decode", decode)
        .case("inference", inference)
        .case("hift_stream", hift_stream)
        .run_and_assert();
}
