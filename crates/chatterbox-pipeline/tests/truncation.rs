//! Speech cut at `max_new_tokens` is reported, by every way of speaking: a stream's chunks
//! (`AudioChunk::truncated`, `SpeechStream::truncations`), a batch's chunks, `generate`'s and
//! `generate_stream`'s reports and `synthesize`'s `ChunkOutput::truncated`, each checked against
//! the tokens T3 drew. The tiny English model of the parity fixtures has random weights and
//! practically never draws its stop token, so a small cap cuts every sentence; a Turbo model
//! whose speech head favours the stop token overwhelmingly stops at its second token (Turbo
//! never stops on its first), so nothing is cut unless the cap is 1, and a stop token drawn as
//! the cap's last token is no cut.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
mod fuzz_support;

use chatterbox_pipeline::{
    AudioChunk, BatchOptions, BatchOutput, ChatterboxConfig, ChatterboxTts, ChatterboxTurboTts,
    Conditionals, DType, Device, GenerateOptions, Sampling, SeededDraws, Truncation, SPEECH_EOS,
};
use fuzz_support::{checkpoint_dir, fixture_config, ref_clip};
use std::collections::HashMap;

const TEXT: &str = "Hello there. This is a test!";

fn english() -> (ChatterboxTts, std::path::PathBuf) {
    let dir = checkpoint_dir("english", "truncation-english");
    let cfg: ChatterboxConfig = serde_json::from_value(fixture_config("english")).unwrap();
    let mut tts =
        ChatterboxTts::from_dir_with_config(&dir, &cfg, &Device::Cpu, DType::F32).unwrap();
    tts.prepare_conditionals_from_audio(&ref_clip(0), 0.5)
        .unwrap();
    (tts, dir)
}

/// Two sentences, `cap` tokens each at most.
fn options(cap: usize, seed: u64) -> GenerateOptions {
    let mut o = GenerateOptions::english().with_seed(seed);
    o.max_new_tokens = cap;
    o.max_chunk_chars = 15;
    o
}

/// The truncations a stream's chunks report, in order, each chunk's checked against it.
fn reported(chunks: &[AudioChunk]) -> Vec<Truncation> {
    let mut all = Vec::new();
    for c in chunks {
        for t in &c.truncated {
            // reported with the chunk that ends the sentence's audio, or a later one
            assert!(t.sentence <= c.sentence, "{t:?} in chunk {}", c.index);
            all.push(t.clone());
        }
    }
    all
}

#[test]
fn every_way_of_speaking_reports_the_sentences_cut_at_the_cap() {
    let (tts, dir) = english();
    let cap = 8;
    let o = options(cap, 7);
    let stream = tts.stream(TEXT, &o).unwrap();
    assert_eq!(stream.sentences(), 2);
    let mut stream = stream;
    let chunks: Vec<AudioChunk> = stream.by_ref().map(Result::unwrap).collect();
    let cuts = reported(&chunks);
    assert_eq!(stream.truncations(), cuts.as_slice());

    // the oracle: each sentence spoken alone (its seed, as a stream seeds it) says what T3
    // drew; it is cut when it drew the cap without its stop token
    let texts = ["Hello there.", "This is a test!"];
    let mut want = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let seed = 7u64.wrapping_add(i as u64);
        let out = tts
            .synthesize(
                text,
                &o,
                Sampling::Seeded(seed),
                &mut SeededDraws::new(seed),
            )
            .unwrap();
        let cut = out.raw_tokens.len() == cap && out.raw_tokens.last() != Some(&SPEECH_EOS);
        assert_eq!(out.truncated, cut, "sentence {i}");
        if cut {
            want.push((i, text.to_string(), cap));
        }
    }
    // random weights: the stop token is one of 8194, so both sentences are cut
    assert_eq!(want.len(), 2, "the tiny model drew its stop token");
    let got: Vec<(usize, String, usize)> = cuts
        .iter()
        .map(|t| (t.sentence, t.text.clone(), t.tokens))
        .collect();
    assert_eq!(got, want);

    // generate and generate_stream report the same
    let (audio, report) = tts.generate_with_report(TEXT, &o, &mut |_| {}).unwrap();
    assert!(!audio.samples.is_empty());
    assert_eq!(report.sentences, 2);
    assert!(report.is_truncated());
    assert_eq!(report.truncated, cuts);
    let mut pieces = 0;
    let report = tts
        .generate_stream_with_report(TEXT, &o, &mut |_| {}, &mut |_| {
            pieces += 1;
            Ok(())
        })
        .unwrap();
    assert!(pieces > 0);
    assert_eq!(report.truncated, cuts);

    // a batch's chunks, for two streams of other seeds at once
    let voice = tts.conditionals().unwrap().clone();
    let opts = BatchOptions::default()
        .with_slots(2)
        .with_positions(256)
        .with_bucket(32);
    let mut batch = tts.batch(opts).unwrap();
    let seeds = [11u64, 12];
    let ids: Vec<u64> = seeds
        .iter()
        .map(|&s| batch.add(&voice, TEXT, &options(cap, s)).unwrap())
        .collect();
    let mut by_id: HashMap<u64, Vec<AudioChunk>> = HashMap::new();
    while !batch.is_empty() {
        for (id, out) in batch.step() {
            match out {
                BatchOutput::Chunk(c) => by_id.entry(id).or_default().push(c),
                BatchOutput::Failed(e) => panic!("stream {id} failed: {e}"),
                _ => {}
            }
        }
    }
    drop(batch);
    for (id, seed) in ids.iter().zip(seeds) {
        let solo: Vec<AudioChunk> = tts
            .stream(TEXT, &options(cap, seed))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let batched = reported(&by_id[id]);
        assert_eq!(batched, reported(&solo), "seed {seed}");
        assert_eq!(batched.len(), 2, "seed {seed}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Turbo fixture, its speech head's stop-token bias raised to dwarf every other logit when
/// `stops`.
fn turbo(stops: bool) -> (ChatterboxTurboTts, std::path::PathBuf) {
    let dir = checkpoint_dir("turbo", "truncation-turbo");
    let cfg: ChatterboxConfig = serde_json::from_value(fixture_config("turbo")).unwrap();
    if stops {
        let stop = cfg.t3.stop_speech_token as usize;
        let path = dir.join("t3_turbo_v1.safetensors");
        let mut t3 = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
        let bias = &t3["speech_head.bias"];
        let mut b = bias.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap();
        b[stop] = 1000.0;
        let n = b.len();
        let bias = candle_core::Tensor::from_vec(b, n, &Device::Cpu)
            .unwrap()
            .to_dtype(bias.dtype())
            .unwrap();
        t3.insert("speech_head.bias".into(), bias);
        candle_core::safetensors::save(&t3, &path).unwrap();
    }
    let mut tts =
        ChatterboxTurboTts::from_dir_with_config(&dir, false, &cfg, &Device::Cpu, DType::F32)
            .unwrap();
    tts.prepare_conditionals_from_audio(&ref_clip(132_000), 0.0)
        .unwrap();
    (tts, dir)
}

/// The sentences `tts` reports cut for `text` with `o`, by `synthesize`, `stream`,
/// `generate_with_report` and a batch, which must agree.
fn turbo_cuts(tts: &ChatterboxTurboTts, text: &str, o: &GenerateOptions) -> Vec<Truncation> {
    let seed = o.seed.unwrap();
    let out = tts
        .synthesize(text, o, Sampling::Seeded(seed), &mut SeededDraws::new(seed))
        .unwrap();
    let mut stream = tts.stream(text, o).unwrap();
    let chunks: Vec<AudioChunk> = stream.by_ref().map(Result::unwrap).collect();
    assert!(!chunks.is_empty());
    let cuts = reported(&chunks);
    assert_eq!(stream.truncations(), cuts.as_slice());
    assert_eq!(out.truncated, !cuts.is_empty());
    let (_, report) = tts.generate_with_report(text, o, &mut |_| {}).unwrap();
    assert_eq!(report.truncated, cuts);
    // batched: the decoder's end of the request says the same
    let voice: Conditionals = tts.conditionals().unwrap().clone();
    let mut batch = tts
        .batch(BatchOptions::default().with_slots(1).with_positions(256))
        .unwrap();
    batch.add(&voice, text, o).unwrap();
    let mut chunks = Vec::new();
    while !batch.is_empty() {
        for (_, out) in batch.step() {
            match out {
                BatchOutput::Chunk(c) => chunks.push(c),
                BatchOutput::Failed(e) => panic!("{e}"),
                _ => {}
            }
        }
    }
    assert_eq!(reported(&chunks), cuts);
    cuts
}

#[test]
fn speech_that_ends_on_the_stop_token_is_not_reported() {
    let opts = |cap: usize| {
        let mut o = GenerateOptions::turbo().with_seed(3);
        o.max_new_tokens = cap;
        o
    };
    // Turbo draws its first token unchecked, then stops on the stop token it draws next: with
    // a cap of 1 that is the last token allowed, and still no cut
    let (stops, dir) = turbo(true);
    for cap in [1, 8] {
        assert_eq!(
            turbo_cuts(&stops, "Hello there.", &opts(cap)),
            [],
            "cap {cap}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    // the random Turbo model never stops: cut, after max_new_tokens + 1 tokens
    let (random, dir) = turbo(false);
    let cuts = turbo_cuts(&random, "Hello there.", &opts(3));
    let got: Vec<(usize, &str, usize)> = cuts
        .iter()
        .map(|t| (t.sentence, t.text.as_str(), t.tokens))
        .collect();
    assert_eq!(got, [(0, "Hello there.", 4)]);
    let _ = std::fs::remove_dir_all(&dir);
}
