//! The S3 speech tokenizer against fixtures recorded from the Python reference
//! (`parity/recorders/s3tokenizer.py`): codes exactly, pre-quantiser activations within 1e-4.
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_s3gen::tokenizer::{ModelConfig, S3Tokenizer};
use chatterbox_s3gen::S3GenError;
use chatterbox_testkit::{f32_array, Actual, Array, Error, Fixture, Suite};

type Outputs = Vec<(String, Actual)>;

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

fn out(name: &str, a: impl Into<Actual>) -> (String, Actual) {
    (name.to_string(), a.into())
}

fn load(fx: &Fixture, dev: &Device) -> chatterbox_testkit::Result<S3Tokenizer> {
    let cfg: ModelConfig = fx.config("model")?;
    // SAFETY: the fixture file is not modified while mapped.
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(&[fx.safetensors_path()], DType::F32, dev).map_err(e)?
    };
    S3Tokenizer::new(&cfg, vb).map_err(e)
}

/// The clips of a case: `in.wav{i}`, or for the long-audio case clip 0 built from `in.tile`
/// as the recorder builds it (pieces of the tile, some reversed, times gains k/8).
fn clips(fx: &Fixture) -> chatterbox_testkit::Result<Vec<Vec<f32>>> {
    let n: usize = fx.config("n_wavs")?;
    let long: Option<serde_json::Value> = fx.config_or("long_wav", None)?;
    let mut wavs = Vec::with_capacity(n);
    for i in 0..n {
        if i == 0 {
            if let Some(spec) = &long {
                let gains: Vec<f32> =
                    serde_json::from_value(spec["tile_gains"].clone()).map_err(e)?;
                let reverse: Vec<bool> =
                    serde_json::from_value(spec["tile_reverse"].clone()).map_err(e)?;
                let tile = fx.input("tile")?.data;
                let mut wav = Vec::with_capacity(tile.len() * gains.len());
                for (g, r) in gains.iter().zip(&reverse) {
                    if *r {
                        wav.extend(tile.iter().rev().map(|v| v * g));
                    } else {
                        wav.extend(tile.iter().map(|v| v * g));
                    }
                }
                wavs.push(wav);
                continue;
            }
        }
        wavs.push(fx.input(&format!("wav{i}"))?.data);
    }
    Ok(wavs)
}

fn forward(fx: &Fixture) -> chatterbox_testkit::Result<Outputs> {
    let dev = Device::Cpu;
    let tok = load(fx, &dev)?;
    let sr: u32 = fx.config("sample_rate")?;
    let max_len: Option<usize> = fx.config_or("max_len", None)?;
    let wavs = clips(fx)?;
    let refs: Vec<&[f32]> = wavs.iter().map(|w| w.as_slice()).collect();

    let tokens = tok.forward(&refs, sr, max_len).map_err(e)?;
    let codes = tokens.tokens.to_vec2::<u32>().map_err(e)?;
    let (b, t) = (codes.len(), codes.first().map_or(0, Vec::len));
    let codes: Vec<i64> = codes.into_iter().flatten().map(i64::from).collect();
    let lens: Vec<i64> = tokens.lens.iter().map(|&l| l as i64).collect();

    // the activations, through the same public steps `forward` takes
    let (mel, mel_lens) = tok.mel_batch(&refs, sr, max_len).map_err(e)?;
    let encoded = tok.model().encode(&mel, &mel_lens).map_err(e)?;
    let hidden = &encoded.output.hidden;
    let proj = tok.model().quantizer().project(hidden).map_err(e)?;
    Ok(vec![
        out("codes", Array::new([b, t], codes)),
        out("code_lens", Array::vector(lens)),
        out("hidden", f32_array(hidden)?),
        out("proj", f32_array(&proj)?),
    ])
}

fn pad(fx: &Fixture) -> chatterbox_testkit::Result<Outputs> {
    let lengths = fx.input_i64("lengths")?.data;
    let rates = fx.input_i64("sample_rates")?.data;
    let mut padded = Vec::new();
    for (&n, &sr) in lengths.iter().zip(&rates) {
        let wav: Vec<f32> = (0..n).map(|i| 1.0 + i as f32).collect();
        let p = S3Tokenizer::pad(&wav, sr as u32).map_err(e)?;
        // the samples are kept (or cropped) and only zeros are appended
        let kept = p.len().min(wav.len());
        if p[..kept] != wav[..kept] || p[kept..].iter().any(|&v| v != 0.0) {
            return Err(e(format!("pad({n}, {sr}) changed the samples")));
        }
        padded.push(p.len() as i64);
    }
    Ok(vec![out("padded_lengths", Array::vector(padded))])
}

#[test]
fn parity() {
    Suite::new("s3tokenizer")
        .case("forward", forward)
        .case("pad", pad)
        .run_and_assert();
}

/// The error paths need a checkpoint, not full-size weights: the tiny fixture's will do.
fn tiny_fixture() -> chatterbox_testkit::Result<Fixture> {
    Fixture::load(
        &chatterbox_testkit::committed_fixtures_root().join("s3tokenizer/single_speech_2s.json"),
    )
}

#[test]
fn typed_errors_for_bad_input() {
    let fx = tiny_fixture().unwrap();
    let tok = load(&fx, &Device::Cpu).unwrap();
    let wav = vec![0.1f32; 16_000];
    let err = tok.forward(&[&wav], 24_000, None).unwrap_err();
    assert!(matches!(
        err,
        S3GenError::UnsupportedSampleRate {
            got: 24_000,
            expected: 16_000,
            ..
        }
    ));
    let empty: Vec<f32> = Vec::new();
    let err = tok.forward(&[&wav, &empty], 16_000, None).unwrap_err();
    assert!(
        matches!(
            err,
            S3GenError::Dsp(chatterbox_dsp::DspError::EmptyAudio { .. })
        ),
        "{err}"
    );
    assert!(matches!(
        tok.forward(&[], 16_000, None).unwrap_err(),
        S3GenError::InvalidInput { .. }
    ));
    let mut nan = wav.clone();
    nan[10] = f32::NAN;
    assert!(matches!(
        tok.forward(&[&nan], 16_000, None).unwrap_err(),
        S3GenError::Dsp(chatterbox_dsp::DspError::NonFinite { index: 10, .. })
    ));
    assert!(matches!(
        tok.forward(&[&wav], 16_000, Some(0)).unwrap_err(),
        S3GenError::InvalidInput { .. }
    ));
}

#[test]
fn typed_errors_for_bad_checkpoints() {
    let fx = tiny_fixture().unwrap();
    let cfg: ModelConfig = fx.config("model").unwrap();
    let dev = Device::Cpu;
    let st = candle_core::safetensors::load(fx.safetensors_path(), &dev).unwrap();

    // a checkpoint without tokenizer weights (the fixture's own tensors under another prefix)
    let vb = VarBuilder::from_tensors(st.clone(), DType::F32, &dev);
    let err = S3Tokenizer::new(&cfg, vb.pp("tokenizer")).unwrap_err();
    match err {
        S3GenError::MissingWeights { key, .. } => {
            assert_eq!(key, "tokenizer.encoder.conv1.weight")
        }
        other => panic!("expected MissingWeights, got {other}"),
    }

    // a weight of the wrong shape
    let mut bad = st.clone();
    bad.insert(
        "encoder.blocks.0.attn.query.weight".into(),
        Tensor::zeros((64, 32), DType::F32, &dev).unwrap(),
    );
    let err = S3Tokenizer::new(&cfg, VarBuilder::from_tensors(bad, DType::F32, &dev)).unwrap_err();
    assert!(
        matches!(&err, S3GenError::ShapeMismatch { key, expected, actual }
            if key == "encoder.blocks.0.attn.query.weight" && expected == &[64, 64] && actual == &[64, 32]),
        "{err}"
    );

    // a mel filterbank buffer that is not librosa's
    let mut bad = st.clone();
    let fb = &st["_mel_filters"];
    bad.insert("_mel_filters".into(), (fb * 1.01).unwrap());
    let err = S3Tokenizer::new(&cfg, VarBuilder::from_tensors(bad, DType::F32, &dev)).unwrap_err();
    assert!(matches!(err, S3GenError::InvalidInput { .. }), "{err}");

    // a config the encoder cannot run (head width must be 64)
    let cfg2 = ModelConfig {
        n_audio_head: 2,
        ..cfg
    };
    let vb = VarBuilder::from_tensors(st, DType::F32, &dev);
    assert!(matches!(
        S3Tokenizer::new(&cfg2, vb).unwrap_err(),
        S3GenError::InvalidInput { .. }
    ));
}

#[test]
fn pad_then_forward_gives_whole_tokens() {
    // 1.3 s is 32.5 tokens: padded to 33 whole tokens, the clip encodes to exactly 33.
    let fx = tiny_fixture().unwrap();
    let tok = load(&fx, &Device::Cpu).unwrap();
    let wav: Vec<f32> = (0..20_800)
        .map(|i| (i as f32 * 0.031).sin() * 0.3)
        .collect();
    let padded = S3Tokenizer::pad(&wav, 16_000).unwrap();
    assert_eq!(padded.len(), 33 * 640);
    let t = tok.forward(&[&padded], 16_000, None).unwrap();
    assert_eq!(t.lens, vec![33]);
    assert_eq!(t.tokens.dims(), &[1, 33]);
    assert_eq!(t.to_vecs().unwrap()[0].len(), 33);
}
