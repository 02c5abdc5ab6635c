//! chatterbox-vocoder against fixtures recorded from the Python reference
//! (`parity/recorders/vocoder.py`).
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_testkit::{Actual, Array, Error, Fixture, Suite};
use chatterbox_vocoder::{F0PredictorConfig, HiFTConfig, HiFTGenerator, SineDraws, TrimFade};

type Outputs = chatterbox_testkit::Result<Vec<(String, Actual)>>;

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

fn input(fx: &Fixture, name: &str, dev: &Device) -> chatterbox_testkit::Result<Tensor> {
    let a = fx.input(name)?;
    Tensor::from_vec(a.data, a.shape, dev).map_err(e)
}

fn out(name: &str, t: &Tensor) -> chatterbox_testkit::Result<(String, Actual)> {
    let shape = t.dims().to_vec();
    let data = t
        .flatten_all()
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(e)?;
    Ok((name.to_string(), Array::new(shape, data).into()))
}

fn model(fx: &Fixture, dev: &Device) -> chatterbox_testkit::Result<HiFTGenerator> {
    let mut cfg: HiFTConfig = fx.config("hift")?;
    cfg.f0_predictor = fx.config::<F0PredictorConfig>("f0_predictor")?;
    let vb =
        unsafe { VarBuilder::from_mmaped_safetensors(&[fx.safetensors_path()], DType::F32, dev) }
            .map_err(e)?;
    HiFTGenerator::new(&cfg, vb).map_err(e)
}

/// The device the cases run on: the CPU, or `CHATTERBOX_PARITY_DEVICE=cuda` (or `metal`, with
/// the crate feature) to check a GPU build against the same recordings.
fn device() -> chatterbox_testkit::Result<Device> {
    match std::env::var("CHATTERBOX_PARITY_DEVICE").ok().as_deref() {
        None | Some("") | Some("cpu") => Ok(Device::Cpu),
        Some("cuda") => Device::new_cuda(0).map_err(e),
        Some("metal") => Device::new_metal(0).map_err(e),
        Some(other) => Err(e(format!("unknown CHATTERBOX_PARITY_DEVICE {other:?}"))),
    }
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

#[test]
fn parity() {
    Suite::new("vocoder")
        .case("decode", decode)
        .case("inference", inference)
        .run_and_assert();
}
