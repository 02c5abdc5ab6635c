//! Behaviour and error tests on the tiny english/turbo checkpoints of the parity fixtures.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
mod fuzz_support;

use candle_core::{DType, Device, Tensor};
use chatterbox_pipeline::{
    drop_invalid_tokens, Audio, ChatterboxConfig, ChatterboxTts, ChatterboxTurboTts, ChatterboxVc,
    Conditionals, GenerateOptions, PipelineError, Progress, S3GEN_SIL,
};
use chatterbox_testkit::fixtures_root;
use fuzz_support::{checkpoint_dir, english_model, fixture_config, pipeline_fixture, ref_clip};
use std::path::PathBuf;

fn fixture_dir() -> PathBuf {
    fixtures_root().join("pipeline")
}

fn config(case: &str) -> ChatterboxConfig {
    serde_json::from_value(fixture_config(case)).unwrap()
}

fn small_opts() -> GenerateOptions {
    let mut o = GenerateOptions::english().with_seed(7);
    o.max_new_tokens = 8;
    o
}

#[test]
fn missing_file_is_named() {
    let dir = checkpoint_dir("english", "missing");
    std::fs::remove_file(dir.join("t3_cfg.safetensors")).unwrap();
    let err = ChatterboxTts::from_dir(&dir, &Device::Cpu, DType::F32).unwrap_err();
    match &err {
        PipelineError::MissingFile { file, .. } => assert_eq!(file, "t3_cfg.safetensors"),
        other => panic!("unexpected error {other:?}"),
    }
    assert!(err.to_string().contains("t3_cfg.safetensors"));
    let mut vc = ChatterboxVc::from_dir(&dir, &Device::Cpu, DType::F32).unwrap();
    let err = vc
        .set_target_voice(&Audio::new(vec![0.1; 2400], 24_000))
        .unwrap_err();
    assert!(
        matches!(err, PipelineError::ReferenceTooShort { .. }),
        "{err:?}"
    );
    let err = vc
        .generate(&Audio::new(vec![0.1; 16_000], 16_000), &Default::default())
        .unwrap_err();
    assert!(matches!(err, PipelineError::NoConditionals), "{err:?}");
    let err = ChatterboxVc::from_dir(dir.join("nope"), &Device::Cpu, DType::F32).unwrap_err();
    assert!(matches!(err, PipelineError::Io { .. }), "{err:?}");
    let err = ChatterboxTurboTts::from_dir(&dir, false, &Device::Cpu, DType::F32).unwrap_err();
    assert!(err.to_string().contains("t3_turbo_v1.safetensors"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupt_weights_are_a_typed_error() {
    let dir = checkpoint_dir("english", "corrupt");
    std::fs::write(dir.join("s3gen.safetensors"), b"not a safetensors file").unwrap();
    let err = ChatterboxTts::from_dir(&dir, &Device::Cpu, DType::F32).unwrap_err();
    assert!(matches!(err, PipelineError::Checkpoint { .. }), "{err:?}");
    assert!(err.to_string().contains("s3gen.safetensors"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_voice_clips() {
    let (mut tts, dir) = english_model("clips");
    let err = tts
        .prepare_conditionals_from_audio(&Audio::new(vec![0.0; 48_000], 24_000), 0.5)
        .unwrap_err();
    assert!(matches!(err, PipelineError::SilentAudio { .. }), "{err:?}");
    let err = tts
        .prepare_conditionals_from_audio(&Audio::new(vec![0.1, -0.1, 0.2], 24_000), 0.5)
        .unwrap_err();
    assert!(
        matches!(err, PipelineError::ReferenceTooShort { .. }),
        "{err:?}"
    );
    let mut nan = ref_clip(0);
    nan.samples[100] = f32::NAN;
    assert!(tts.prepare_conditionals_from_audio(&nan, 0.5).is_err());
    let garbage = dir.join("garbage.wav");
    std::fs::write(&garbage, b"RIFF....garbage").unwrap();
    assert!(tts.prepare_conditionals(&garbage, 0.5).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_options_and_language() {
    let (tts, dir) = english_model("options");
    let mut o = small_opts();
    o.temperature = 0.0;
    let err = tts.generate("Hi there.", &o).unwrap_err();
    assert!(err.to_string().contains("temperature"), "{err}");
    let mut o = small_opts();
    o.top_p = 1.5;
    assert!(tts.generate("Hi there.", &o).is_err());
    let mut o = small_opts();
    o.max_new_tokens = 0;
    assert!(tts.generate("Hi there.", &o).is_err());
    let o = small_opts().with_language("fr");
    let err = tts.generate("Bonjour.", &o).unwrap_err();
    assert!(err.to_string().contains("language"), "{err}");
    let err = tts.generate("   ", &small_opts()).unwrap_err();
    assert!(matches!(err, PipelineError::Text(_)), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn generate_without_voice_fails() {
    let dir = checkpoint_dir("english", "novoice");
    let tts = ChatterboxTts::from_dir(&dir, &Device::Cpu, DType::F32).unwrap();
    assert!(tts.conditionals().is_none());
    let err = tts.generate("Hello.", &small_opts()).unwrap_err();
    assert!(matches!(err, PipelineError::NoConditionals), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn turbo_needs_five_seconds() {
    let dir = checkpoint_dir("turbo", "turbo");
    let cfg = config("turbo");
    let mut tts =
        ChatterboxTurboTts::from_dir_with_config(&dir, false, &cfg, &Device::Cpu, DType::F32)
            .unwrap();
    let err = tts
        .prepare_conditionals_from_audio(&ref_clip(0), 0.0)
        .unwrap_err();
    assert!(
        matches!(err, PipelineError::ReferenceTooShort { .. }),
        "{err:?}"
    );
    // A 5.5 s clip is accepted (normalised to -27 LUFS first).
    let mut long = ref_clip(0).samples;
    while long.len() < 132_000 {
        long.extend_from_within(..28_800);
    }
    tts.prepare_conditionals_from_audio(&Audio::new(long, 24_000), 0.0)
        .unwrap();
    let mut o = GenerateOptions::turbo().with_seed(1);
    o.max_new_tokens = 6;
    let tokens = tts.post_process_tokens(&[1, 2, 6561, 3]);
    assert_eq!(tokens, vec![1, 2, 3, S3GEN_SIL, S3GEN_SIL, S3GEN_SIL]);
    let mut events = Vec::new();
    let audio = tts
        .generate_with_progress("Hello there.", &o, &mut |p| events.push(p.clone()))
        .unwrap();
    assert_eq!(audio.sample_rate, 24_000);
    assert!(!audio.samples.is_empty() && audio.samples.iter().all(|v| v.is_finite()));
    // Turbo draws up to max_gen_len + 1 tokens; the reported count stops at the maximum.
    let reported: Vec<(usize, usize)> = events
        .iter()
        .filter_map(|e| match e {
            Progress::Tokens { generated, max, .. } => Some((*generated, *max)),
            _ => None,
        })
        .collect();
    assert!(!reported.is_empty());
    assert!(reported.iter().all(|(g, m)| g <= m), "{reported:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn chunked_generation_streams_and_reports_progress() {
    let (tts, dir) = english_model("chunks");
    let mut o = small_opts();
    o.max_chunk_chars = 12;
    let text = "Hello there. How are you?";
    let mut events = Vec::new();
    let audio = tts
        .generate_with_progress(text, &o, &mut |p| events.push(p.clone()))
        .unwrap();
    let started = events
        .iter()
        .filter(|e| matches!(e, Progress::ChunkStarted { .. }))
        .count();
    let finished: Vec<usize> = events
        .iter()
        .filter_map(|e| match e {
            Progress::ChunkFinished { samples, .. } => Some(*samples),
            _ => None,
        })
        .collect();
    assert_eq!(started, 2);
    assert_eq!(finished.len(), 2);
    assert!(events.iter().any(|e| matches!(e, Progress::Tokens { .. })));
    // The token count never passes its maximum (the stop token may come after max draws).
    for e in &events {
        if let Progress::Tokens { generated, max, .. } = e {
            assert!(generated <= max, "{generated} of {max}");
        }
    }
    // Two chunks joined with a 50 ms crossfade: the overlap is counted once.
    let fade = 24_000 * 50 / 1000;
    let overlap = fade.min(finished[0]).min(finished[1]);
    assert_eq!(audio.samples.len(), finished[0] + finished[1] - overlap);
    // Streaming gives the same samples in pieces; the same seed gives the same audio.
    let mut streamed = Vec::new();
    let mut pieces = 0;
    tts.generate_stream(text, &o, &mut |_| {}, &mut |s| {
        pieces += 1;
        streamed.extend_from_slice(s);
        Ok(())
    })
    .unwrap();
    assert!(pieces >= 2);
    assert_eq!(streamed, audio.samples);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn conditionals_roundtrip_and_reference_conds_pt() {
    let (tts, dir) = english_model("conds");
    let c = tts.conditionals().unwrap();
    let p = dir.join("voice.safetensors");
    std::fs::write(&p, b"an older voice file").unwrap();
    let before: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    c.save(&p).unwrap();
    // Replaced whole, through a temporary file that is gone afterwards.
    let after: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(before.len(), after.len(), "{after:?}");
    let back = Conditionals::load(&p, &Device::Cpu).unwrap();
    let eq = |a: &Tensor, b: &Tensor| {
        let a = a
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let b = b
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(a, b);
    };
    eq(&c.t3.speaker_emb, &back.t3.speaker_emb);
    eq(&c.gen.prompt_feat, &back.gen.prompt_feat);
    eq(&c.gen.prompt_token, &back.gen.prompt_token);
    assert_eq!(back.t3.emotion_adv, 0.5);

    // The reference's conds.pt of the same voice (same 16 kHz copy) holds the recorded values.
    let r = Conditionals::load(fixture_dir().join("english_conds.pt"), &Device::Cpu).unwrap();
    let fx = pipeline_fixture("english");
    eq(&r.t3.speaker_emb, &fx["out.speaker_emb"]);
    eq(&r.gen.prompt_feat, &fx["out.prompt_feat"]);
    eq(&r.gen.embedding, &fx["out.embedding"]);
    eq(&r.gen.prompt_token, &fx["out.prompt_token"]);
    eq(
        r.t3.cond_prompt_speech_tokens.as_ref().unwrap(),
        &fx["out.cond_prompt_speech_tokens"],
    );
    assert_eq!(r.t3.emotion_adv, 0.5);

    // A checkpoint that ships conds.pt has a voice right after loading.
    std::fs::copy(fixture_dir().join("english_conds.pt"), dir.join("conds.pt")).unwrap();
    let tts2 = ChatterboxTts::from_dir(&dir, &Device::Cpu, DType::F32).unwrap();
    assert!(tts2.conditionals().is_some());
    let bad = dir.join("bad.safetensors");
    std::fs::write(&bad, b"garbage").unwrap();
    assert!(matches!(
        Conditionals::load(&bad, &Device::Cpu).unwrap_err(),
        PipelineError::InvalidConditionals { .. }
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn drop_invalid_tokens_as_reference() {
    assert_eq!(drop_invalid_tokens(&[6561, 1, 2, 6562, 3]), vec![1, 2]);
    assert_eq!(drop_invalid_tokens(&[1, 2, 6562]), vec![1, 2]);
    assert_eq!(drop_invalid_tokens(&[1, 2]), vec![1, 2]);
    assert_eq!(drop_invalid_tokens(&[6562, 6561]), Vec::<u32>::new());
}
