//! Parity handlers shared by `parity.rs` (default kernels) and `candle_ops.rs` (candle tensor
//! ops on the CPU: the code path CUDA and Metal run).
#![allow(clippy::panic)] // test support: a bad test device fails the test
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_dsp::Matrix;
use chatterbox_speaker::{CAMPPlus, CAMPPlusConfig, EmbedOptions, VoiceEncConfig, VoiceEncoder};
use chatterbox_testkit::{f32_array, Actual, Error, Fixture, Suite};

type Outputs = chatterbox_testkit::Result<Vec<(String, Actual)>>;

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

fn out(name: &str, t: &Tensor) -> chatterbox_testkit::Result<(String, Actual)> {
    Ok((name.to_string(), f32_array(t)?.into()))
}

/// The device the models run on: the CPU, or with `CHATTERBOX_DEVICE=cuda` (built with
/// `--features cuda`) / `metal` (`--features metal`) the first GPU.
pub fn device() -> Device {
    chatterbox_testkit::test_device("CHATTERBOX_DEVICE").unwrap_or_else(|err| panic!("{err}"))
}

fn vb(fx: &Fixture) -> chatterbox_testkit::Result<VarBuilder<'static>> {
    // SAFETY: fixtures are not modified while the tests run.
    unsafe { VarBuilder::from_mmaped_safetensors(&[fx.safetensors_path()], DType::F32, &device()) }
        .map_err(e)
}

fn options(fx: &Fixture) -> chatterbox_testkit::Result<EmbedOptions> {
    let mut o = EmbedOptions::default();
    o.rate = fx.config("rate")?;
    o.overlap = fx.config("overlap")?;
    o.min_coverage = fx.config("min_coverage")?;
    o.batch_size = fx.config("batch_size")?;
    o.trim_top_db = fx.config("trim_top_db")?;
    Ok(o)
}

fn voice_encoder(
    fx: &Fixture,
    cpu_kernels: bool,
) -> chatterbox_testkit::Result<(VoiceEncConfig, VoiceEncoder)> {
    let cfg: VoiceEncConfig = fx.config("ve")?;
    let ve = VoiceEncoder::new(&cfg, vb(fx)?)
        .map_err(e)?
        .with_cpu_kernels(cpu_kernels);
    Ok((cfg, ve))
}

/// `embeds_from_wavs` on clips of one recording, utterance and speaker level.
fn ve_wavs(fx: &Fixture, cpu_kernels: bool) -> Outputs {
    let (_, ve) = voice_encoder(fx, cpu_kernels)?;
    let wav = fx.input("wav")?.data;
    let clips: Vec<[usize; 2]> = fx.config("clips")?;
    let wavs: Vec<&[f32]> = clips.iter().map(|[a, b]| &wav[*a..*b]).collect();
    let sr: u32 = fx.config("sample_rate")?;
    let opts = options(fx)?;
    let utt = ve.embeds_from_wavs(&wavs, sr, &opts).map_err(e)?;
    let spk = ve.speaker_embed_from_wavs(&wavs, sr, &opts).map_err(e)?;
    Ok(vec![out("utt", &utt)?, out("spk", &spk)?])
}

/// `forward`, `embeds_from_mels` (overlap rule), a clip shorter than one partial, and the same
/// clip with the weights loaded from the torch pickle `<case>.pt`.
fn ve_model(fx: &Fixture, cpu_kernels: bool) -> Outputs {
    let (cfg, ve) = voice_encoder(fx, cpu_kernels)?;
    let mels = fx.input("mels_fwd")?;
    let mels = Tensor::from_vec(mels.data, mels.shape, &Device::Cpu).map_err(e)?;
    let forward = ve.forward(&mels).map_err(e)?;

    let matrix = |name: &str| -> chatterbox_testkit::Result<Matrix> {
        let a = fx.input(name)?;
        Matrix::from_vec(a.data, a.shape[0], a.shape[1]).ok_or_else(|| e("bad mel shape"))
    };
    let mut mel_opts = options(fx)?;
    mel_opts.rate = fx.config("mels_rate")?;
    let utt_mels = ve
        .embeds_from_mels(&[matrix("mel0")?, matrix("mel1")?], &mel_opts)
        .map_err(e)?;

    let short = fx.input("short")?.data;
    let sr: u32 = fx.config("sample_rate")?;
    let opts = options(fx)?;
    let utt_short = ve.embeds_from_wavs(&[&short], sr, &opts).map_err(e)?;
    let pth = fx.safetensors_path().with_extension("pt");
    let ve_pth = VoiceEncoder::from_pth(&pth, &cfg, &device())
        .map_err(e)?
        .with_cpu_kernels(cpu_kernels);
    let utt_short_pth = ve_pth.embeds_from_wavs(&[&short], sr, &opts).map_err(e)?;
    Ok(vec![
        out("forward", &forward)?,
        out("utt_mels", &utt_mels)?,
        out("utt_short", &utt_short)?,
        out("utt_short_pth", &utt_short_pth)?,
    ])
}

/// `inference` on each clip `wav{i}` and `forward` on a batch of features.
fn campplus(fx: &Fixture, cpu_kernels: bool) -> Outputs {
    let cfg: CAMPPlusConfig = fx.config("campplus")?;
    let prefix: String = fx.config("prefix")?;
    let model = CAMPPlus::new(&cfg, vb(fx)?.pp(prefix))
        .map_err(e)?
        .with_cpu_kernels(cpu_kernels);
    let sr: u32 = fx.config("sample_rate")?;
    let mut outs = Vec::new();
    for i in 0.. {
        let Ok(wav) = fx.input(&format!("wav{i}")) else {
            break;
        };
        let x = model.inference(&wav.data, sr).map_err(e)?;
        outs.push(out(&format!("xvector{i}"), &x)?);
    }
    let feats = fx.input("feats")?;
    let feats = Tensor::from_vec(feats.data, feats.shape, &Device::Cpu).map_err(e)?;
    outs.push(out("forward", &model.forward(&feats).map_err(e)?)?);
    Ok(outs)
}

/// The suite of component `speaker`, with the crate's CPU kernels or with candle ops.
pub fn suite(cpu_kernels: bool) -> Suite {
    Suite::new("speaker")
        .case("ve_wavs", move |fx| ve_wavs(fx, cpu_kernels))
        .case("ve_model", move |fx| ve_model(fx, cpu_kernels))
        .case("campplus", move |fx| campplus(fx, cpu_kernels))
}
