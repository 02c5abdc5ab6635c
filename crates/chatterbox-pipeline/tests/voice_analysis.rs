//! The models' `conditionals_from_audio` (`&self`): a clip's voice, analysed exactly as
//! `prepare_conditionals_from_audio` analyses it, without touching the model's current voice,
//! and usable while a stream or a batch borrows the model (the server analyses voice uploads
//! between batch rounds that way). On the tiny English and Turbo checkpoints of the parity
//! fixtures.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
mod fuzz_support;

use chatterbox_pipeline::{
    Audio, BatchOptions, BatchOutput, ChatterboxConfig, ChatterboxTts, ChatterboxTurboTts,
    Conditionals, DType, Device, GenerateOptions, PipelineError, StreamSchedule,
};
use fuzz_support::{checkpoint_dir, fixture_config, ref_samples};

/// Every tensor of a voice, flattened to f32 (prompt tokens included), and its exaggeration.
fn values(c: &Conditionals) -> (Vec<Vec<f32>>, f32) {
    let flat = |t: &candle_core::Tensor| {
        t.to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let mut v = vec![
        flat(&c.t3.speaker_emb),
        flat(&c.gen.prompt_token),
        flat(&c.gen.prompt_feat),
        flat(&c.gen.embedding),
    ];
    if let Some(t) = &c.t3.cond_prompt_speech_tokens {
        v.push(flat(t));
    }
    (v, c.t3.emotion_adv)
}

fn options(seed: u64) -> GenerateOptions {
    let mut o = GenerateOptions::english()
        .with_seed(seed)
        .with_stream_schedule(StreamSchedule::new(vec![4, 8]));
    o.max_new_tokens = 12;
    o
}

#[test]
fn a_clips_voice_is_analysed_without_changing_the_models_voice() {
    let dir = checkpoint_dir("english", "voice-analysis");
    let cfg: ChatterboxConfig = serde_json::from_value(fixture_config("english")).unwrap();
    let mut tts =
        ChatterboxTts::from_dir_with_config(&dir, &cfg, &Device::Cpu, DType::F32).unwrap();
    let first = Audio::new(ref_samples(), 24_000);
    // another voice: the same samples taken for 16 kHz ones (resampled, other pitch)
    let second = Audio::new(ref_samples(), 16_000);
    tts.prepare_conditionals_from_audio(&first, 0.5).unwrap();
    let current = values(tts.conditionals().unwrap());

    // analysed while a stream of the current voice is under way, which goes on unchanged
    let o = options(4);
    let alone: Vec<f32> = tts
        .stream("Hello there.", &o)
        .unwrap()
        .flat_map(|c| c.unwrap().samples)
        .collect();
    let mut stream = tts.stream("Hello there.", &o).unwrap();
    let mut during: Vec<f32> = stream.next().unwrap().unwrap().samples;
    let analysed = tts.conditionals_from_audio(&second, 0.7).unwrap();
    during.extend(stream.flat_map(|c| c.unwrap().samples));
    assert_eq!(during, alone);
    assert_eq!(values(tts.conditionals().unwrap()), current);
    assert_ne!(
        values(&analysed).0,
        current.0,
        "the second clip is another voice"
    );

    // exactly what making it the model's voice gives
    let mut other = tts.clone();
    other.prepare_conditionals_from_audio(&second, 0.7).unwrap();
    assert_eq!(values(&analysed), values(other.conditionals().unwrap()));
    assert_eq!(values(&analysed).1, 0.7);

    // and while a batch borrows the model: the analysed voice speaks in the batch as it does
    // as the model's own voice
    let mut batch = tts
        .batch(
            BatchOptions::default()
                .with_slots(2)
                .with_positions(256)
                .with_bucket(32),
        )
        .unwrap();
    let id = batch.add(&analysed, "Hello there.", &o).unwrap();
    let again = tts.conditionals_from_audio(&second, 0.7).unwrap();
    assert_eq!(values(&again), values(&analysed));
    let mut batched = Vec::new();
    while !batch.is_empty() {
        for (i, out) in batch.step() {
            match out {
                BatchOutput::Chunk(c) if i == id => batched.extend(c.samples),
                BatchOutput::Failed(e) => panic!("{e}"),
                _ => {}
            }
        }
    }
    drop(batch);
    tts.set_conditionals(analysed);
    let solo: Vec<f32> = tts
        .stream("Hello there.", &o)
        .unwrap()
        .flat_map(|c| c.unwrap().samples)
        .collect();
    assert_eq!(batched, solo);

    // the clip rules are the same: a silent clip is refused
    let silent = Audio::new(vec![0.0; 48_000], 24_000);
    assert!(tts.conditionals_from_audio(&silent, 0.5).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn turbo_analyses_with_its_own_rules() {
    let dir = checkpoint_dir("turbo", "voice-analysis-turbo");
    let cfg: ChatterboxConfig = serde_json::from_value(fixture_config("turbo")).unwrap();
    let tts = ChatterboxTurboTts::from_dir_with_config(&dir, false, &cfg, &Device::Cpu, DType::F32)
        .unwrap();
    // 5 s at most is too short for Turbo, without a voice set or changed
    let short = Audio::new(ref_samples(), 24_000);
    assert!(matches!(
        tts.conditionals_from_audio(&short, 0.0),
        Err(PipelineError::ReferenceTooShort { .. })
    ));
    let mut long = ref_samples();
    while long.len() <= 132_000 {
        long.extend_from_slice(&ref_samples());
    }
    let long = Audio::new(long, 24_000);
    let analysed = tts.conditionals_from_audio(&long, 0.0).unwrap();
    assert!(tts.conditionals().is_none(), "the model got a voice");
    let mut set = tts.clone();
    set.prepare_conditionals_from_audio(&long, 0.0).unwrap();
    assert_eq!(values(&analysed), values(set.conditionals().unwrap()));
    let _ = std::fs::remove_dir_all(&dir);
}
