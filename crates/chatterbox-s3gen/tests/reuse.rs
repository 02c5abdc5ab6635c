//! The crate as another project uses it: the speech tokenizer, the flow and the reference-voice
//! encoder each built from a tiny in-memory state_dict (a plain `HashMap<String, Tensor>`
//! through `VarBuilder::from_tensors`) and run through the public API only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_dsp::resample::SincResampler;
use chatterbox_s3gen::flow::{CfmConfig, DecoderConfig, EncoderConfig};
use chatterbox_s3gen::tokenizer::ModelConfig;
use chatterbox_s3gen::{
    CausalMaskedDiffWithXvec, FlowConfig, FlowOptions, FlowPrompt, RefEncoder, RefEncoderConfig,
    S3GenError, S3Tokenizer,
};
use chatterbox_speaker::CAMPPlusConfig;
use chatterbox_testkit::{state_dict, uniform};
use std::collections::HashMap;

type R<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn from_tensors(sd: &HashMap<String, Tensor>) -> VarBuilder<'static> {
    VarBuilder::from_tensors(sd.clone(), DType::F32, &Device::Cpu)
}

/// A deterministic speech-like signal, `secs` seconds at `sr`: a chirp under a syllable-rate
/// envelope, plus some noise.
fn clip(sr: u32, secs: f32) -> Vec<f32> {
    let n = (sr as f32 * secs) as usize;
    let tau = 2.0 * std::f32::consts::PI;
    (0..n)
        .map(|i| {
            let t = i as f32 / sr as f32;
            let env = 0.5 + 0.5 * (tau * 3.1 * t).sin();
            env * 0.3 * (tau * (150.0 * t + 400.0 * t * t)).sin() + 0.02 * uniform(99, i)
        })
        .collect()
}

fn tokenizer_config() -> ModelConfig {
    ModelConfig {
        n_audio_state: 64,
        n_audio_head: 1,
        n_audio_layer: 1,
        ..ModelConfig::v2_25hz()
    }
}

fn ref_config() -> RefEncoderConfig {
    RefEncoderConfig {
        tokenizer: tokenizer_config(),
        speaker_encoder: CAMPPlusConfig {
            growth_rate: 2,
            bn_size: 2,
            init_channels: 4,
            embedding_size: 8,
            ..CAMPPlusConfig::s3gen()
        },
    }
}

fn flow_config() -> FlowConfig {
    FlowConfig {
        input_size: 32,
        spk_embed_dim: 8,
        encoder: EncoderConfig {
            input_size: 32,
            output_size: 32,
            attention_heads: 2,
            linear_units: 64,
            num_blocks: 1,
            num_up_blocks: 1,
            ..EncoderConfig::s3gen()
        },
        decoder: DecoderConfig {
            channels: vec![32],
            attention_head_dim: 16,
            n_blocks: 1,
            num_mid_blocks: 2,
            num_heads: 2,
            ..DecoderConfig::s3gen()
        },
        cfm: CfmConfig::s3gen(),
        ..FlowConfig::s3gen()
    }
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .and_then(|d| d.abs())
        .and_then(|d| d.flatten_all())
        .and_then(|d| d.max(0))
        .and_then(|d| d.to_scalar::<f32>())
        .unwrap()
}

#[test]
fn tokenizer_from_a_state_dict() -> R<()> {
    let cfg = tokenizer_config();
    let sd = state_dict(|vb| S3Tokenizer::new(&cfg, vb.pp("tokenizer")))?;
    assert!(sd.contains_key("tokenizer.encoder.conv1.weight"));
    let tok = S3Tokenizer::new(&cfg, from_tensors(&sd).pp("tokenizer"))?;
    let a = clip(16_000, 2.0);
    let b = clip(16_000, 1.0);
    let out = tok.forward(&[&a, &b], 16_000, None)?;
    assert_eq!(out.lens, vec![50, 25]); // 25 tokens per second
    let rows = out.to_vecs()?;
    assert!(rows.iter().flatten().all(|&t| t < 6561));
    // not one repeated code
    assert!(rows[0].iter().any(|&t| t != rows[0][0]));
    // batching does not change a clip's tokens; neither does rebuilding the model
    let alone = S3Tokenizer::new(&cfg, from_tensors(&sd).pp("tokenizer"))?
        .forward(&[&b], 16_000, None)?
        .to_vecs()?;
    assert_eq!(alone[0], rows[1]);
    Ok(())
}

#[test]
fn flow_from_a_state_dict() -> R<()> {
    let cfg = flow_config();
    let sd = state_dict(|vb| CausalMaskedDiffWithXvec::new(&cfg, vb.pp("flow")))?;
    let flow = CausalMaskedDiffWithXvec::new(&cfg, from_tensors(&sd).pp("flow"))?;
    let dev = Device::Cpu;
    let n_prompt = 6;
    let prompt = FlowPrompt {
        prompt_token: Tensor::new(&[[5u32, 17, 300, 6000, 42, 9]], &dev)?,
        prompt_feat: (Tensor::arange(0f32, (2 * n_prompt * 80) as f32, &dev)? * 0.01)?
            .sin()?
            .reshape((1, 2 * n_prompt, 80))?,
        embedding: Tensor::new(&[[0.5f32, -0.1, 0.3, 0.0, 1.0, 0.2, -0.7, 0.4]], &dev)?,
    };
    let tokens = Tensor::new(&[[3u32, 1, 4, 1, 5, 9, 2, 6]], &dev)?;
    let (b, c, t) = flow.noise_shape(1, n_prompt, 8, true);
    assert_eq!((b, c, t), (1, 80, 2 * (n_prompt + 8)));
    let noise = (Tensor::arange(0f32, (c * t) as f32, &dev)? * 0.37)?
        .sin()?
        .reshape((b, c, t))?;
    let opts = FlowOptions::default().with_n_timesteps(2);
    let mel = flow.inference(&tokens, &prompt, &noise, None, &opts)?;
    assert_eq!(mel.dims(), &[1, 80, 16]);
    let v = mel.flatten_all()?.to_vec1::<f32>()?;
    assert!(v.iter().all(|v| v.is_finite()));
    assert!(v.iter().any(|&x| (x - v[0]).abs() > 1e-3));
    // deterministic: the same inputs give the same mel
    let again = CausalMaskedDiffWithXvec::new(&cfg, from_tensors(&sd).pp("flow"))?
        .inference(&tokens, &prompt, &noise, None, &opts)?;
    assert_eq!(max_abs_diff(&mel, &again), 0.0);
    // the tokens matter
    let other = Tensor::new(&[[30u32, 10, 40, 10, 50, 90, 20, 60]], &dev)?;
    let mel2 = flow.inference(&other, &prompt, &noise, None, &opts)?;
    assert!(max_abs_diff(&mel, &mel2) > 1e-3);
    Ok(())
}

#[test]
fn ref_encoder_needs_no_flow_or_vocoder_weights() -> R<()> {
    let cfg = ref_config();
    let sd = state_dict(|vb| RefEncoder::new(&cfg, vb))?;
    assert!(sd
        .keys()
        .all(|k| k.starts_with("tokenizer.") || k.starts_with("speaker_encoder.")));
    let enc = RefEncoder::new(&cfg, from_tensors(&sd))?;

    // at 24 kHz, as S3Gen's callers give it
    let wav = clip(24_000, 2.0);
    let p = enc.embed_ref(&wav, 24_000)?;
    let n = p.prompt_token.dim(1)?;
    assert_eq!(n, 50);
    assert_eq!(p.prompt_token.dims(), &[1, n]);
    assert_eq!(p.prompt_feat.dims(), &[1, 2 * n, 80]);
    assert_eq!(p.embedding.dims(), &[1, 8]);
    // the x-vector and the tokens are those of the 16 kHz copy (torchaudio's sinc resampler)
    let wav_16k = SincResampler::new(24_000, 16_000)?.process(&wav)?;
    let x = enc.speaker_encoder().inference(&wav_16k, 16_000)?;
    assert_eq!(max_abs_diff(&p.embedding, &x), 0.0);
    let tokens = enc
        .tokenizer()
        .forward(&[&wav_16k], 16_000, None)?
        .to_vecs()?;
    assert_eq!(p.prompt_token.to_vec2::<u32>()?[0], tokens[0][..n]);
    // the prompt mel is S3Gen's 24 kHz log mel, frame-major
    let mel = enc.mel().compute(&wav)?;
    let feat = p.prompt_feat.squeeze(0)?.to_vec2::<f32>()?;
    for (f, frame) in feat.iter().enumerate().step_by(17) {
        for (bin, &v) in frame.iter().enumerate() {
            assert_eq!(v, mel.get(bin, f));
        }
    }

    // at 16 kHz: no resampling for the tokenizer and the speaker encoder
    let wav16 = clip(16_000, 2.0);
    let p16 = enc.embed_ref(&wav16, 16_000)?;
    let x16 = enc.speaker_encoder().inference(&wav16, 16_000)?;
    assert_eq!(max_abs_diff(&p16.embedding, &x16), 0.0);
    // any other rate is resampled to both
    let p22 = enc.embed_ref(&clip(22_050, 2.0), 22_050)?;
    assert_eq!(p22.prompt_token.dims(), &[1, 50]);
    assert_eq!(p22.prompt_feat.dims(), &[1, 100, 80]);

    // the prompt drives a flow whose x-vector width matches
    let fcfg = flow_config();
    let fsd = state_dict(|vb| CausalMaskedDiffWithXvec::new(&fcfg, vb))?;
    let flow = CausalMaskedDiffWithXvec::new(&fcfg, from_tensors(&fsd))?;
    let tokens = Tensor::new(&[[3u32, 1, 4, 1, 5]], &Device::Cpu)?;
    let (b, c, t) = flow.noise_shape(1, n, 5, true);
    let noise = Tensor::ones((b, c, t), DType::F32, &Device::Cpu)?;
    let opts = FlowOptions::default().with_n_timesteps(1);
    let out = flow.inference(&tokens, &p, &noise, None, &opts)?;
    assert_eq!(out.dims(), &[1, 80, 10]);

    // a whole S3Gen's tokenizer and speaker encoder can be reused as they are
    let parts = RefEncoder::from_parts(enc.tokenizer().clone(), enc.speaker_encoder().clone())?;
    let again = parts.embed_ref(&wav, 24_000)?;
    assert_eq!(max_abs_diff(&again.prompt_feat, &p.prompt_feat), 0.0);
    assert_eq!(max_abs_diff(&again.embedding, &p.embedding), 0.0);

    // bad clips are typed errors
    assert!(matches!(
        enc.embed_ref(&vec![0.0; 24_000], 24_000),
        Err(S3GenError::SilentAudio { .. })
    ));
    assert!(matches!(
        enc.embed_ref(&[], 24_000),
        Err(S3GenError::Dsp(_))
    ));
    assert!(matches!(
        enc.embed_ref(&wav[..100], 24_000),
        Err(S3GenError::Speaker(_) | S3GenError::Dsp(_) | S3GenError::InvalidInput { .. })
    ));
    Ok(())
}

#[test]
fn missing_keys_are_named_with_their_prefix() -> R<()> {
    let cfg = flow_config();
    let mut sd = state_dict(|vb| CausalMaskedDiffWithXvec::new(&cfg, vb.pp("flow")))?;
    sd.remove("flow.input_embedding.weight");
    match CausalMaskedDiffWithXvec::new(&cfg, from_tensors(&sd).pp("flow")) {
        Err(S3GenError::MissingWeights { key, .. }) => {
            assert_eq!(key, "flow.input_embedding.weight")
        }
        other => panic!("expected MissingWeights, got {:?}", other.err()),
    }
    let rcfg = ref_config();
    let mut sd = state_dict(|vb| RefEncoder::new(&rcfg, vb))?;
    sd.remove("tokenizer.encoder.conv1.weight");
    match RefEncoder::new(&rcfg, from_tensors(&sd)) {
        Err(S3GenError::MissingWeights { key, .. }) => {
            assert_eq!(key, "tokenizer.encoder.conv1.weight")
        }
        other => panic!("expected MissingWeights, got {:?}", other.err()),
    }
    let mut sd = state_dict(|vb| RefEncoder::new(&rcfg, vb))?;
    sd.remove("speaker_encoder.head.conv1.weight");
    match RefEncoder::new(&rcfg, from_tensors(&sd)) {
        Err(S3GenError::Speaker(e))
            if matches!(*e, chatterbox_speaker::SpeakerError::MissingWeight { .. }) =>
        {
            let chatterbox_speaker::SpeakerError::MissingWeight { key } = *e else {
                unreachable!()
            };
            assert_eq!(key, "speaker_encoder.head.conv1.weight")
        }
        other => panic!("expected a speaker MissingWeight, got {:?}", other.err()),
    }
    Ok(())
}

#[test]
fn configs_have_presets_and_read_json() -> R<()> {
    // what serde writes reads back, for every config
    let flow = FlowConfig::s3gen_meanflow();
    assert_eq!(
        serde_json::from_str::<FlowConfig>(&serde_json::to_string(&flow)?)?,
        flow
    );
    let r = RefEncoderConfig::s3gen();
    assert_eq!(
        serde_json::from_str::<RefEncoderConfig>(&serde_json::to_string(&r)?)?,
        r
    );
    // omitted fields take the presets' values
    let r: RefEncoderConfig = serde_json::from_str(r#"{"tokenizer": {"n_audio_layer": 2}}"#)?;
    assert_eq!(r.tokenizer.n_audio_layer, 2);
    assert_eq!(r.tokenizer.n_audio_state, 1280);
    assert_eq!(r.speaker_encoder, CAMPPlusConfig::s3gen());
    assert_eq!(RefEncoderConfig::default(), RefEncoderConfig::s3gen());
    let opts = FlowOptions::default()
        .with_n_timesteps(4)
        .with_finalize(false);
    assert_eq!((opts.n_timesteps, opts.finalize), (Some(4), false));
    Ok(())
}
