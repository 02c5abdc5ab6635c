//! The vocoder's API beyond the parity rows: the plain-candle path (what GPUs run) against the
//! reference, `cache_source`, seeded draws, and typed errors for bad input.
// Test helpers outside `#[test]` functions: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::panic)]
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_testkit::{fixtures_root, max_abs, max_abs_diff, Fixture};
use chatterbox_vocoder::{F0PredictorConfig, HiFTConfig, HiFTGenerator, SineDraws, VocoderError};
use rand::SeedableRng;

fn fixture(case: &str) -> Fixture {
    Fixture::load(&fixtures_root().join("vocoder").join(format!("{case}.json"))).unwrap()
}

fn tensor(fx: &Fixture, name: &str) -> Tensor {
    let a = fx.f32(name).unwrap();
    Tensor::from_vec(a.data, a.shape, &Device::Cpu).unwrap()
}

fn model(fx: &Fixture) -> HiFTGenerator {
    let mut cfg: HiFTConfig = fx.config("hift").unwrap();
    cfg.f0_predictor = fx.config::<F0PredictorConfig>("f0_predictor").unwrap();
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(&[fx.safetensors_path()], DType::F32, &Device::Cpu)
    }
    .unwrap();
    HiFTGenerator::new(&cfg, vb).unwrap()
}

/// max |a - b| / max |b|
fn rel(a: &Tensor, b: &Tensor) -> f32 {
    max_abs_diff(a, b).unwrap() / max_abs(b).unwrap()
}

#[test]
fn candle_ops_path_matches_the_reference_and_the_cpu_kernels() {
    let fx = fixture("hift_inference");
    let mut hift = model(&fx);
    let (mel, source, want) = (
        tensor(&fx, "in.mel"),
        tensor(&fx, "in.source"),
        tensor(&fx, "out.wav"),
    );
    let fast = hift.decode(&mel, &source).unwrap();
    hift.set_cpu_kernels(false);
    let plain = hift.decode(&mel, &source).unwrap();
    assert!(
        rel(&plain, &want) < 1e-4,
        "plain candle ops vs reference: {}",
        rel(&plain, &want)
    );
    assert!(
        rel(&fast, &plain) < 1e-5,
        "CPU kernels vs candle ops: {}",
        rel(&fast, &plain)
    );
    let f0 = hift.f0(&mel).unwrap();
    assert!(rel(&f0, &tensor(&fx, "out.f0")) < 1e-5);
}

#[test]
fn cache_source_replaces_the_start_of_the_excitation() {
    let fx = fixture("hift_inference");
    let hift = model(&fx);
    let mel = tensor(&fx, "in.mel");
    let draws = SineDraws::new(tensor(&fx, "in.phase"), tensor(&fx, "in.noise"));
    let (wav, source) = hift.inference_with_draws(&mel, &draws, None).unwrap();
    // The source of the same draws as cache: nothing changes.
    let cache = source.narrow(2, 0, 1000).unwrap();
    let (wav2, source2) = hift
        .inference_with_draws(&mel, &draws, Some(&cache))
        .unwrap();
    assert_eq!(rel(&wav2, &wav), 0.0);
    assert_eq!(rel(&source2, &source), 0.0);
    // A different cache: the first samples are the cache, the rest the new source.
    let other = (cache.ones_like().unwrap() * 0.25).unwrap();
    let (wav3, source3) = hift
        .inference_with_draws(&mel, &draws, Some(&other))
        .unwrap();
    assert_eq!(rel(&source3.narrow(2, 0, 1000).unwrap(), &other), 0.0);
    let n = source.dim(2).unwrap();
    assert_eq!(
        rel(
            &source3.narrow(2, 1000, n - 1000).unwrap(),
            &source.narrow(2, 1000, n - 1000).unwrap()
        ),
        0.0
    );
    assert!(rel(&wav3, &wav) > 1e-3);
    // An empty cache is no cache.
    let empty = Tensor::zeros((1, 1, 0), DType::F32, &Device::Cpu).unwrap();
    let (wav4, _) = hift
        .inference_with_draws(&mel, &draws, Some(&empty))
        .unwrap();
    assert_eq!(rel(&wav4, &wav), 0.0);
}

#[test]
fn seeded_inference_is_deterministic() {
    let fx = fixture("hift_inference");
    let hift = model(&fx);
    let mel = tensor(&fx, "in.mel");
    let run = |seed| {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        hift.inference(&mel, None, &mut rng).unwrap().0
    };
    let (a, b, c) = (run(1), run(1), run(2));
    assert_eq!(rel(&a, &b), 0.0);
    assert!(rel(&a, &c) > 0.0);
    assert_eq!(a.dims(), [1, 16 * 480]);
    let peak = a
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(peak > 0.0 && peak <= 0.99);
}

fn invalid(r: chatterbox_vocoder::Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(e @ VocoderError::InvalidInput { .. }) => e.to_string(),
        other => panic!("expected an InvalidInput error, got {other:?}"),
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let fx = fixture("hift_decode_legacy_keys");
    let hift = model(&fx);
    let dev = Device::Cpu;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mel79 = Tensor::zeros((1, 79, 4), DType::F32, &dev).unwrap();
    assert!(invalid(hift.inference(&mel79, None, &mut rng)).contains("80 mel bins"));
    let empty = Tensor::zeros((1, 80, 0), DType::F32, &dev).unwrap();
    assert!(invalid(hift.inference(&empty, None, &mut rng)).contains("no frames"));
    let flat = Tensor::zeros((80, 4), DType::F32, &dev).unwrap();
    assert!(invalid(hift.f0(&flat)).contains("expected (batch, 80, frames)"));
    let mut v = vec![0f32; 80 * 4];
    v[17] = f32::NAN;
    let nan = Tensor::from_vec(v, (1, 80, 4), &dev).unwrap();
    assert!(invalid(hift.inference(&nan, None, &mut rng)).contains("NaN"));
    let mel = tensor(&fx, "in.mel");
    let short = Tensor::zeros((1, 1, 100), DType::F32, &dev).unwrap();
    assert!(invalid(hift.decode(&mel, &short)).contains("source"));
    let too_long = Tensor::zeros((1, 1, 8 * 480 + 1), DType::F32, &dev).unwrap();
    assert!(invalid(hift.inference(&mel, Some(&too_long), &mut rng)).contains("cache_source"));
    let draws = SineDraws::sample(&mut rng, 1, 9, 100, &dev).unwrap();
    assert!(invalid(hift.inference_with_draws(&mel, &draws, None)).contains("sine draws"));
}

#[test]
fn bad_configs_and_checkpoints_are_typed_errors() {
    let fx = fixture("hift_decode_legacy_keys");
    let mut cfg: HiFTConfig = fx.config("hift").unwrap();
    cfg.f0_predictor = fx.config::<F0PredictorConfig>("f0_predictor").unwrap();
    let vb = || {
        unsafe {
            VarBuilder::from_mmaped_safetensors(&[fx.safetensors_path()], DType::F32, &Device::Cpu)
        }
        .unwrap()
    };
    // A wider model than the checkpoint holds.
    let mut wide = cfg.clone();
    wide.base_channels = 64;
    match HiFTGenerator::new(&wide, vb()) {
        Err(VocoderError::ShapeMismatch { key, .. }) => assert!(key.contains("conv_pre"), "{key}"),
        other => panic!("expected a shape mismatch, got {:?}", other.err()),
    }
    // A missing module.
    match HiFTGenerator::new(&cfg, vb().pp("mel2wav")) {
        Err(VocoderError::MissingWeight { key, .. }) => {
            assert!(key.starts_with("mel2wav."), "{key}")
        }
        other => panic!("expected missing weights, got {:?}", other.err()),
    }
    let mut bad = cfg.clone();
    bad.upsample_kernel_sizes.pop();
    assert!(matches!(
        HiFTGenerator::new(&bad, vb()),
        Err(VocoderError::InvalidConfig(_))
    ));
    assert_eq!(HiFTConfig::s3gen().samples_per_frame(), 480);
    assert!(HiFTConfig::s3gen().validate().is_ok());
}

/// Full size (`cargo xtask parity --record --full --only vocoder --out /tmp/full`, then
/// `CHATTERBOX_FIXTURES=/tmp/full cargo test -p chatterbox-vocoder --test api -- --ignored`):
/// the plain candle ops that GPU backends run, on S3Gen's real architecture, against the reference.
#[test]
#[ignore = "needs the full-size fixtures (--full, ~170 MB, not committed)"]
fn full_size_candle_ops_path_matches_the_reference() {
    let fx = fixture("hift_full_inference");
    let mut hift = model(&fx);
    hift.set_cpu_kernels(false);
    let (mel, source) = (tensor(&fx, "in.mel"), tensor(&fx, "in.source"));
    let wav = hift.decode(&mel, &source).unwrap();
    let err = rel(&wav, &tensor(&fx, "out.wav"));
    assert!(err < 1e-4, "plain candle ops vs reference: {err}");
    let f0 = hift.f0(&mel).unwrap();
    assert!(rel(&f0, &tensor(&fx, "out.f0")) < 1e-5);
}
