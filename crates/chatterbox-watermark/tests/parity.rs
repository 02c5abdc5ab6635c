//! chatterbox-watermark against fixtures recorded from the Python reference
//! (`parity/recorders/watermark.py`, resemble-perth 1.0.1 with a small random PerthNet).
use candle_core::{Device, Tensor};
use chatterbox_testkit::{f32_array, Actual, Array, Error, Fixture, Suite};
use chatterbox_watermark::{PerthConfig, PerthNet, PerthWatermarker, PolyphaseResampler};

type Outputs = chatterbox_testkit::Result<Vec<(String, Actual)>>;

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

fn input(fx: &Fixture, name: &str) -> chatterbox_testkit::Result<Array<f32>> {
    fx.input(name)
}

fn tensor(fx: &Fixture, name: &str, dev: &Device) -> chatterbox_testkit::Result<Tensor> {
    let a = fx.input(name)?;
    Tensor::from_vec(a.data, a.shape, dev).map_err(e)
}

fn out_vec(name: &str, shape: Vec<usize>, data: Vec<f32>) -> (String, Actual) {
    (name.to_string(), Array::new(shape, data).into())
}

fn out(name: &str, t: &Tensor) -> chatterbox_testkit::Result<(String, Actual)> {
    Ok((name.to_string(), f32_array(t)?.into()))
}

/// The device the cases run on: the CPU, or the GPU `CHATTERBOX_PARITY_DEVICE` names.
fn device() -> chatterbox_testkit::Result<Device> {
    chatterbox_testkit::test_device("CHATTERBOX_PARITY_DEVICE")
}

/// The fixture's PerthNet, with the weights of its `weights_case` (stored once, in `encoder`).
fn net(fx: &Fixture, dev: &Device) -> chatterbox_testkit::Result<PerthNet> {
    let cfg: PerthConfig = fx.config("perth")?;
    let wcase: String = fx.config("weights_case")?;
    let path = fx
        .safetensors_path()
        .with_file_name(format!("{wcase}.safetensors"));
    let tensors = candle_core::safetensors::load(&path, &Device::Cpu).map_err(e)?;
    // the loader's own path: presence and shape checks, then the VarBuilder
    PerthNet::from_state_dict(&cfg, tensors, dev).map_err(e)
}

/// Wraps `phase` onto the reference's branch: phases are equal modulo 2 pi, and bins whose
/// angle sits at +-pi may come out on either side.
fn align_phase(phase: &[f32], reference: &[f32]) -> Vec<f32> {
    let tau = std::f32::consts::TAU;
    phase
        .iter()
        .zip(reference)
        .map(|(&p, &r)| p + tau * ((r - p) / tau).round())
        .collect()
}

/// `ap.signal_to_magphase` and `ap.magphase_to_signal`.
fn magphase(fx: &Fixture) -> Outputs {
    let dev = device()?;
    let net = net(fx, &dev)?;
    let ap = net.audio_processor();
    let x = input(fx, "signal")?;
    let mp = ap.signal_to_magphase(&x.data).map_err(e)?;
    let y = ap.magphase_to_signal(&mp).map_err(e)?;
    let shape = vec![mp.n_freq, mp.n_frames];
    let ref_phase = fx.f32("out.phase")?;
    if ref_phase.data.len() != mp.phase.len() {
        return Err(e("phase: frame count differs from the reference"));
    }
    Ok(vec![
        out_vec("mag", shape.clone(), mp.mag.clone()),
        out_vec("phase", shape, align_phase(&mp.phase, &ref_phase.data)),
        out_vec("signal", vec![y.len()], y),
    ])
}

/// `encoder(magspec)`.
fn encoder(fx: &Fixture) -> Outputs {
    let dev = device()?;
    let net = net(fx, &dev)?;
    let (wm, mask) = net
        .encoder()
        .forward(&tensor(fx, "magspec", &dev)?)
        .map_err(e)?;
    Ok(vec![out("magspec", &wm)?, out("mask", &mask)?])
}

/// `decoder(magspec)`, the raw score.
fn decoder(fx: &Fixture) -> Outputs {
    let dev = device()?;
    let net = net(fx, &dev)?;
    let raw = net
        .decoder()
        .forward(&tensor(fx, "magspec", &dev)?)
        .map_err(e)?;
    Ok(vec![out("raw", &raw)?])
}

/// `PerthImplicitWatermarker.apply_watermark(signal, sample_rate)`.
fn apply(fx: &Fixture) -> Outputs {
    let dev = device()?;
    let wm = PerthWatermarker::new(net(fx, &dev)?);
    let sr: u32 = fx.config("sample_rate")?;
    let y = wm
        .apply_watermark(&input(fx, "signal")?.data, sr)
        .map_err(e)?;
    Ok(vec![out_vec("signal", vec![y.len()], y)])
}

/// `get_watermark(signal, sample_rate)` with `round=False` and `True`, the raw decoder score,
/// and the polyphase resampling to 32 kHz.
fn detect(fx: &Fixture) -> Outputs {
    let dev = device()?;
    let wm = PerthWatermarker::new(net(fx, &dev)?);
    let sr: u32 = fx.config("sample_rate")?;
    let x = input(fx, "signal")?.data;
    let d = wm.detect(&x, sr).map_err(e)?;
    let confidence = wm.get_watermark(&x, sr).map_err(e)?;
    let mut outs = vec![
        out_vec("raw", vec![1], vec![d.raw]),
        out_vec("score", vec![1], vec![d.score]),
        out_vec("confidence", vec![1], vec![confidence]),
    ];
    if sr != wm.net().config().sample_rate {
        let y = PolyphaseResampler::new(sr, wm.net().config().sample_rate)
            .and_then(|r| r.process(&x))
            .map_err(e)?;
        outs.push(out_vec("resampled", vec![y.len()], y));
    }
    Ok(outs)
}

#[test]
fn parity() {
    Suite::new("watermark")
        .case("magphase", magphase)
        .case("encoder", encoder)
        .case("decoder", decoder)
        .case("apply", apply)
        .case("detect", detect)
        .run_and_assert();
}

/// The `watermark/soxr` cases (24 kHz embedding with libsoxr on both sides), with the `soxr`
/// feature: `cargo test -p chatterbox-watermark --features soxr --test parity`.
#[cfg(feature = "soxr")]
#[test]
fn parity_soxr() {
    Suite::new("watermark/soxr")
        .case("apply", apply)
        .run_and_assert();
}

/// Without the `soxr` feature the `watermark/soxr` cases are skipped (the `apply_24k` row of
/// `watermark` judges the rubato path by SNR instead). Their fixtures must still load.
#[cfg(not(feature = "soxr"))]
#[test]
fn parity_soxr() {
    let root = chatterbox_testkit::committed_fixtures_root();
    let fixtures = Fixture::discover(&root, "watermark/soxr").unwrap();
    assert!(!fixtures.is_empty(), "no fixtures under watermark/soxr");
    for fx in &fixtures {
        assert_eq!(fx.meta.kind, "apply", "{}", fx.meta.case);
    }
    println!(
        "watermark/soxr: {} cases skipped (exact libsoxr resampling): run \
         `cargo test -p chatterbox-watermark --features soxr --test parity`",
        fixtures.len()
    );
}
