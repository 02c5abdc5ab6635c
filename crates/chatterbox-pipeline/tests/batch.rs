//! `batch` on the tiny english/turbo checkpoints of the parity fixtures: streams of different
//! voices, texts (one and several sentences), seeds and token limits spoken together, joining
//! while others run and through fewer slots than streams; each stream's chunks must be those of
//! the same stream on its own (`stream`): exactly with one chunk per flow call, and within float
//! rounding when the chunks due share padded flow calls (the default).
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
mod fuzz_support;

use chatterbox_pipeline::{
    vocode_batch, Audio, AudioChunk, BatchOptions, BatchOutput, ChatterboxConfig, ChatterboxTts,
    ChatterboxTurboTts, Conditionals, DType, Device, GenerateOptions, Pace, PipelineError,
    S3GenOptions, SeededDraws, SpeechBatch, StreamId, StreamSchedule, StreamingSynth, VocodeJob,
};
use fuzz_support::{checkpoint_dir, fixture_config, ref_clip};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

fn clip(min_samples: usize, gain: f32, rotate: usize) -> Audio {
    let mut long = ref_clip(min_samples).samples;
    let n = long.len();
    long.rotate_left(rotate % n);
    Audio::new(long.iter().map(|v| v * gain).collect(), 24_000)
}

/// A stream of the test: its voice, text and options, and the round it joins at.
struct Job {
    voice: usize,
    text: &'static str,
    opts: GenerateOptions,
    join_at: usize,
}

/// Speaks `jobs` through one batch of `slots` slots; returns each job's chunks.
fn batched(
    batch: &mut chatterbox_pipeline::SpeechBatch<'_>,
    voices: &[Conditionals],
    jobs: &[Job],
) -> Vec<Vec<AudioChunk>> {
    let mut out: Vec<Vec<AudioChunk>> = (0..jobs.len()).map(|_| Vec::new()).collect();
    let mut who = HashMap::new();
    let mut round = 0;
    let mut added = 0;
    while added < jobs.len() || !batch.is_empty() {
        for (k, j) in jobs.iter().enumerate() {
            if j.join_at == round {
                let id = batch.add(&voices[j.voice], j.text, &j.opts).unwrap();
                who.insert(id, k);
                added += 1;
            }
        }
        for (id, o) in batch.step() {
            match o {
                BatchOutput::Chunk(c) => out[who[&id]].push(c),
                BatchOutput::Failed(e) => panic!("stream {id} failed: {e}"),
                _ => unreachable!(),
            }
        }
        round += 1;
        assert!(round < 2000, "the batch does not finish");
    }
    out
}

/// Largest `|a - b|` over the largest `|b|` of the solo audio (the padded flow's float
/// rounding, through HiFT): the pipeline fixtures' waveform tolerance (`wav`, rel 1e-3);
/// measured at most 1.4e-4 on these models.
const SHARED_CALL_TOL: f32 = 1e-3;

/// Asserts `got` is `want` within [`SHARED_CALL_TOL`] of `want`'s peak; returns the largest
/// difference and the peak.
fn assert_close(got: &[f32], want: &[f32], what: &str) -> (f32, f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let peak = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(
        worst <= SHARED_CALL_TOL * peak,
        "{what}: differs from the solo stream by {worst:.2e} (peak {peak:.2e})"
    );
    (worst, peak)
}

fn check(
    solo: impl Fn(&Conditionals, &Job) -> Vec<AudioChunk>,
    voices: &[Conditionals],
    jobs: &[Job],
    got: &[Vec<AudioChunk>],
    exact: bool,
) {
    for (k, (j, chunks)) in jobs.iter().zip(got).enumerate() {
        let want = solo(&voices[j.voice], j);
        assert!(!want.is_empty());
        assert_eq!(chunks.len(), want.len(), "job {k}: chunk count");
        for (a, b) in chunks.iter().zip(&want) {
            if exact {
                assert_eq!(a, b, "job {k}: chunk {}", b.index);
                continue;
            }
            assert_eq!(
                (a.index, a.sentence, a.sample_offset, a.is_last),
                (b.index, b.sentence, b.sample_offset, b.is_last),
                "job {k}: chunk {}",
                b.index
            );
        }
        if !exact {
            let joined = |c: &[AudioChunk]| -> Vec<f32> {
                c.iter().flat_map(|c| c.samples.iter().copied()).collect()
            };
            let (worst, peak) = assert_close(&joined(chunks), &joined(&want), &format!("job {k}"));
            println!("job {k}: max |batched - solo| {worst:.2e} of peak {peak:.2e}");
        }
        assert!(chunks.last().unwrap().is_last, "job {k}");
    }
}

/// The tiny English model from a fresh checkpoint folder `name`, and a voice prepared from
/// each `(gain, rotation)` of the test clip (the last one left prepared on the model).
fn english_model(
    name: &str,
    voices: &[(f32, usize)],
) -> (PathBuf, ChatterboxTts, Vec<Conditionals>) {
    let dir = checkpoint_dir("english", name);
    let mut tts = ChatterboxTts::from_dir(&dir, &Device::Cpu, DType::F32).unwrap();
    let mut prepared = Vec::new();
    for &(gain, rot) in voices {
        tts.prepare_conditionals_from_audio(&clip(0, gain, rot), 0.5)
            .unwrap();
        prepared.push(tts.conditionals().cloned().unwrap());
    }
    (dir, tts, prepared)
}

fn english_jobs() -> Vec<Job> {
    let opts = |seed: u64, max: usize| {
        let mut o = GenerateOptions::english()
            .with_seed(seed)
            .with_stream_schedule(StreamSchedule::new(vec![6, 8]));
        o.max_new_tokens = max;
        o.max_chunk_chars = 14;
        o
    };
    vec![
        Job {
            voice: 0,
            text: "Hello there.",
            opts: opts(11, 30),
            join_at: 0,
        },
        Job {
            voice: 1,
            text: "How are you? I am fine.",
            opts: opts(5, 14),
            join_at: 0,
        },
        Job {
            voice: 0,
            text: "A third one.",
            opts: opts(11, 20),
            join_at: 3,
        },
        Job {
            voice: 1,
            text: "Late.",
            opts: {
                let mut o = opts(2, 9);
                o.cfg_weight = 0.0;
                o.temperature = 1.2;
                o
            },
            join_at: 7,
        },
        // job 0's twin in the other voice: their chunks fall due together, of one length
        Job {
            voice: 1,
            text: "Hello there.",
            opts: opts(12, 30),
            join_at: 0,
        },
    ]
}

#[test]
fn english_streams_in_a_batch_equal_their_solo_streams() {
    let (dir, tts, voices) = english_model("batch-en", &[(1.0, 0), (0.6, 9000)]);
    let jobs = english_jobs();
    let solo = |c: &Conditionals, j: &Job| {
        let mut t = tts.clone();
        t.set_conditionals(c.clone());
        t.stream(j.text, &j.opts)
            .unwrap()
            .map(|c| c.unwrap())
            .collect::<Vec<_>>()
    };
    for (slots, chunks_per_call) in [(4, 1), (4, 16), (2, 2), (1, 16)] {
        let opts = BatchOptions::default()
            .with_slots(slots)
            .with_positions(256)
            .with_bucket(32);
        let mut batch = tts.batch(opts).unwrap();
        batch.set_chunks_per_call(chunks_per_call);
        let got = batched(&mut batch, &voices, &jobs);
        check(solo, &voices, &jobs, &got, chunks_per_call == 1);
        assert_eq!(batch.decoding(), 0);
        let t = batch.timings();
        if slots > 1 && chunks_per_call > 1 {
            assert!(
                t.flow_chunks > t.flow_calls,
                "no flow call was shared: {t:?}"
            );
        }
        assert!(t.flow_calls > 0 && t.vocoder_calls > 0, "{t:?}");
        assert!(
            t.flow > Duration::ZERO && t.vocoder > Duration::ZERO && t.flow + t.vocoder <= t.audio,
            "{t:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// HiFT calls of one shape from different streams (voices, tokens, draws) run as one batch give
/// each call's own output, at a stream's first chunk (no cached source) and its next (cached);
/// calls of different shapes are refused.
#[test]
fn vocoder_calls_of_one_shape_batch_like_their_own_calls() {
    let (dir, tts, voices) = english_model("batch-hift", &[(1.0, 0), (0.6, 9000)]);
    let s3gen = tts.s3gen();
    let hift = s3gen.mel2wav();
    let schedule = StreamSchedule::new(vec![6, 8]);
    let mut synths: Vec<_> = voices
        .iter()
        .enumerate()
        .map(|(i, v)| {
            StreamingSynth::new(
                s3gen,
                &v.gen,
                schedule.clone(),
                S3GenOptions::default().with_n_cfm_timesteps(Some(2)),
                SeededDraws::new(40 + i as u64),
            )
            .unwrap()
        })
        .collect();
    for (chunk, tokens) in [(0, 9), (1, 8)] {
        let mut jobs = Vec::new();
        for (i, synth) in synths.iter_mut().enumerate() {
            let ids: Vec<u32> = (0..tokens)
                .map(|t| (t * 97 + i * 31 + chunk * 7) as u32)
                .collect();
            synth.push(&ids).unwrap();
            let flow = synth.next_flow().unwrap().unwrap();
            let feat = flow.run(s3gen.flow()).unwrap();
            jobs.push(synth.vocode_job(&feat).unwrap().clone());
        }
        assert_eq!(jobs[0].shape(), jobs[1].shape());
        assert_eq!(jobs[0].cache_source.is_some(), chunk > 0);
        let refs: Vec<&VocodeJob> = jobs.iter().collect();
        let together = vocode_batch(hift, &refs).unwrap();
        for (i, (job, (wav, source))) in jobs.iter().zip(&together).enumerate() {
            let (w, src) = job.run(hift).unwrap();
            assert_eq!(wav.dims(), w.dims());
            let err = |a: &candle_core::Tensor, b: &candle_core::Tensor| {
                let d = (a - b).unwrap().abs().unwrap().max_all().unwrap();
                let m = b.abs().unwrap().max_all().unwrap();
                d.to_scalar::<f32>().unwrap() / m.to_scalar::<f32>().unwrap()
            };
            let (ew, es) = (err(wav, &w), err(source, &src));
            println!("chunk {chunk} stream {i}: wav {ew:.2e}, source {es:.2e}");
            assert!(
                ew < 1e-5 && es < 1e-5,
                "chunk {chunk} stream {i}: {ew:.2e} {es:.2e}"
            );
        }
        for (synth, (wav, source)) in synths.iter_mut().zip(together) {
            let c = synth.vocoded(&wav, &source).unwrap();
            assert_eq!(c.index, chunk);
        }
    }
    // the next chunks differ in length: no shared call
    synths[0].push(&[1; 8]).unwrap();
    synths[1].end().unwrap();
    let mut jobs = Vec::new();
    for synth in synths.iter_mut() {
        let feat = synth
            .next_flow()
            .unwrap()
            .unwrap()
            .run(s3gen.flow())
            .unwrap();
        jobs.push(synth.vocode_job(&feat).unwrap().clone());
    }
    assert_ne!(jobs[0].shape(), jobs[1].shape());
    let e = vocode_batch(hift, &[&jobs[0], &jobs[1]]).unwrap_err();
    assert!(e.to_string().contains("cannot share a batch"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `generate_many` speaks every request through one batch and returns each one's joined
/// stream audio in order; a bad request fails alone.
#[test]
fn generate_many_returns_each_requests_stream_audio() {
    let (dir, tts, voices) = english_model("batch-many", &[(1.0, 0)]);
    let voice = voices[0].clone();
    let jobs = english_jobs();
    let mut bad = jobs[0].opts.clone();
    bad.temperature = -1.0;
    let mut requests: Vec<(&Conditionals, &str, &GenerateOptions)> =
        jobs.iter().map(|j| (&voice, j.text, &j.opts)).collect();
    requests.insert(1, (&voice, "Bad options.", &bad));
    let opts = BatchOptions::default()
        .with_slots(2)
        .with_positions(256)
        .with_bucket(32);
    let got = tts.generate_many(&requests, opts).unwrap();
    assert_eq!(got.len(), requests.len());
    assert!(matches!(got[1], Err(PipelineError::InvalidInput { .. })));
    for (k, (r, (_, text, o))) in got.iter().zip(&requests).enumerate() {
        if k == 1 {
            continue;
        }
        let want: Vec<f32> = tts
            .stream(text, o)
            .unwrap()
            .flat_map(|c| c.unwrap().samples)
            .collect();
        assert_close(r.as_ref().unwrap(), &want, &format!("request {k}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn turbo_streams_in_a_batch_equal_their_solo_streams() {
    let dir = checkpoint_dir("turbo", "batch-turbo");
    let cfg: ChatterboxConfig = serde_json::from_value(fixture_config("turbo")).unwrap();
    let mut tts =
        ChatterboxTurboTts::from_dir_with_config(&dir, false, &cfg, &Device::Cpu, DType::F32)
            .unwrap();
    let mut voices = Vec::new();
    for (gain, rot) in [(1.0, 0), (0.5, 20_000)] {
        tts.prepare_conditionals_from_audio(&clip(132_000, gain, rot), 0.0)
            .unwrap();
        voices.push(tts.conditionals().cloned().unwrap());
    }
    let opts = |seed: u64, max: usize| turbo_opts(seed, vec![4, 8], max);
    let jobs = vec![
        Job {
            voice: 0,
            text: "Hello there.",
            opts: opts(3, 20),
            join_at: 0,
        },
        Job {
            voice: 1,
            text: "Another voice speaking.",
            opts: opts(4, 12),
            join_at: 2,
        },
        Job {
            voice: 0,
            text: "Third.",
            opts: {
                let mut o = opts(9, 16);
                o.top_k = 20;
                o.top_p = 0.8;
                o
            },
            join_at: 2,
        },
    ];
    let solo = |c: &Conditionals, j: &Job| turbo_solo(&tts, c, j.text, &j.opts);
    for (slots, chunks_per_call) in [(3, 1), (3, 16), (1, 16)] {
        let opts = BatchOptions::default()
            .with_slots(slots)
            .with_positions(512)
            .with_bucket(32);
        let mut batch = tts.batch(opts).unwrap();
        batch.set_chunks_per_call(chunks_per_call);
        let got = batched(&mut batch, &voices, &jobs);
        check(solo, &voices, &jobs, &got, chunks_per_call == 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_streams_fail_alone_and_cancelled_ones_free_their_slot() {
    let (dir, tts, voices) = english_model("batch-errors", &[(1.0, 0)]);
    let voice = voices[0].clone();
    let opts = BatchOptions::default()
        .with_slots(1)
        .with_positions(128)
        .with_bucket(32);
    let mut batch = tts.batch(opts).unwrap();
    let jobs = english_jobs();
    // bad options are refused when added
    let mut bad = jobs[0].opts.clone();
    bad.temperature = -1.0;
    let e = batch.add(&voice, "Hello.", &bad).unwrap_err();
    assert!(matches!(e, PipelineError::InvalidInput { .. }), "{e}");
    // a stream asking for more tokens than a slot holds fails alone
    let mut long = jobs[0].opts.clone();
    long.max_new_tokens = 500;
    let too_long = batch.add(&voice, "Hello.", &long).unwrap();
    let ok = batch.add(&voice, "Hello.", &jobs[0].opts).unwrap();
    let cancelled = batch.add(&voice, "Hello.", &jobs[0].opts).unwrap();
    let mut failed = Vec::new();
    let mut last = HashMap::new();
    let mut rounds = 0;
    while !batch.is_empty() {
        for (id, o) in batch.step() {
            match o {
                BatchOutput::Failed(e) => failed.push((id, e.to_string())),
                BatchOutput::Chunk(c) => {
                    last.insert(id, c.is_last);
                }
                _ => unreachable!(),
            }
        }
        if rounds == 2 {
            // the one-slot batch serves `ok` now; `cancelled` waits and is dropped
            assert!(batch.cancel(cancelled));
            assert!(!batch.cancel(cancelled));
        }
        rounds += 1;
        assert!(rounds < 500);
    }
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, too_long);
    assert!(
        failed[0].1.contains("batch slot positions"),
        "{}",
        failed[0].1
    );
    assert_eq!(last.get(&ok), Some(&true));
    assert!(!last.contains_key(&cancelled));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tiny Turbo model from a fresh checkpoint folder `name`, and the voice prepared on it
/// from the test clip.
fn turbo_model(name: &str) -> (PathBuf, ChatterboxTurboTts, Conditionals) {
    let dir = checkpoint_dir("turbo", name);
    let cfg: ChatterboxConfig = serde_json::from_value(fixture_config("turbo")).unwrap();
    let mut tts =
        ChatterboxTurboTts::from_dir_with_config(&dir, false, &cfg, &Device::Cpu, DType::F32)
            .unwrap();
    tts.prepare_conditionals_from_audio(&clip(132_000, 1.0, 0), 0.0)
        .unwrap();
    let voice = tts.conditionals().cloned().unwrap();
    (dir, tts, voice)
}

/// Turbo's options with `seed`, chunks of `hops` tokens and at most `max` tokens.
fn turbo_opts(seed: u64, hops: Vec<usize>, max: usize) -> GenerateOptions {
    let mut o = GenerateOptions::turbo()
        .with_seed(seed)
        .with_stream_schedule(StreamSchedule::new(hops));
    o.max_new_tokens = max;
    o
}

/// `text` streamed on its own by `tts` in the voice of `conds`: its chunks.
fn turbo_solo(
    tts: &ChatterboxTurboTts,
    conds: &Conditionals,
    text: &str,
    opts: &GenerateOptions,
) -> Vec<AudioChunk> {
    let mut t = tts.clone();
    t.set_conditionals(conds.clone());
    t.stream(text, opts).unwrap().map(|c| c.unwrap()).collect()
}

/// Runs `batch` to the end: each stream's chunks, in the order the streams were added.
fn chunks_of(batch: &mut SpeechBatch<'_>) -> Vec<Vec<AudioChunk>> {
    let mut chunks: Vec<(StreamId, Vec<AudioChunk>)> = Vec::new();
    while !batch.is_empty() {
        for (id, o) in batch.step() {
            let c = match o {
                BatchOutput::Chunk(c) => c,
                BatchOutput::Failed(e) => panic!("{e}"),
                _ => unreachable!(),
            };
            match chunks.iter_mut().find(|(i, _)| *i == id) {
                Some((_, cs)) => cs.push(c),
                None => chunks.push((id, vec![c])),
            }
        }
    }
    chunks.sort_by_key(|(id, _)| *id);
    chunks.into_iter().map(|(_, cs)| cs).collect()
}

#[test]
fn a_slow_pace_starts_live_streams_on_a_paced_schedule() {
    let (dir, tts, voice) = turbo_model("batch-paced");
    let opts_with = |hops: Vec<usize>| turbo_opts(5, hops, 30);
    let text = "Hello there, a paced stream.";
    // a pace of 16 ms rounds and 50 ms of calls per chunk: the second chunk of 8 tokens
    // (128 + 50 ms) needs a first chunk of 6 (6 x 40 ms x 0.8 = 192 ms), not 4
    let slow = Pace::assumed(
        Duration::from_millis(16),
        Duration::from_millis(40),
        Duration::from_millis(10),
    );
    // a pace that keeps up
    let fast = Pace::assumed(
        Duration::from_micros(1),
        Duration::from_millis(40),
        Duration::from_millis(10),
    );
    // `streams` live streams (`live` false: one kept whole) on `pace`, expecting `round` and
    // `expected` streams: each stream's chunks and the sentences paced
    let run = |streams: usize, live: bool, pace: Pace, round: Option<Duration>, expected: usize| {
        let mut batch = tts
            .batch(
                BatchOptions::default()
                    .with_slots(streams)
                    .with_positions(256)
                    .with_bucket(32),
            )
            .unwrap();
        batch.set_chunks_per_call(1);
        batch.set_paced_schedule(true);
        assert!(batch.paced_schedule());
        batch.set_pace(pace);
        assert_eq!(batch.pace(), pace);
        batch.set_expected_round(round);
        assert_eq!(batch.expected_round(), round);
        batch.set_expected_streams(expected);
        assert_eq!(batch.expected_streams(), expected);
        for _ in 0..streams {
            let id = batch.add(&voice, text, &opts_with(vec![4, 8])).unwrap();
            assert!(batch.set_live(id, live));
        }
        let chunks = chunks_of(&mut batch);
        (chunks, batch.timings().paced_sentences)
    };
    let solo = |hops: Vec<usize>| turbo_solo(&tts, &voice, text, &opts_with(hops));
    let own = solo(vec![4, 8]);
    let paced = solo(vec![6, 8]);
    assert_ne!(paced, own);
    // live: exactly the stream on the paced schedule; kept whole: its own schedule
    assert_eq!(run(1, true, slow, None, 0), (vec![paced.clone()], 1));
    assert_eq!(run(1, false, slow, None, 0), (vec![own.clone()], 0));
    // a pace that keeps up, but a crowd expected to slow the rounds to 16 ms: the same paced
    // schedule; none expected, or a quicker round expected: its own
    let ms = Duration::from_millis;
    assert_eq!(run(1, true, fast, Some(ms(16)), 0), (vec![paced], 1));
    assert_eq!(run(1, true, fast, None, 0), (vec![own.clone()], 0));
    let quick = Some(Duration::from_micros(2));
    assert_eq!(run(1, true, fast, quick, 0), (vec![own], 0));
    // a forecast past what any schedule keeps up with plans on the slowest that one does
    // (28.8 ms: 90 % of the 32 ms usable): chunks of 8, its first as long as the second
    let eights = solo(vec![8, 8]);
    assert_eq!(
        run(1, true, fast, Some(ms(1000)), 0),
        (vec![eights.clone()], 1)
    );
    // and so does a measured round past it, with no forecast
    let slowest = Pace::assumed(ms(1000), ms(40), ms(10));
    assert_eq!(run(1, true, slowest, None, 0), (vec![eights.clone()], 1));
    // two live streams of one chunk per call: a chunk may wait for the other's call (2 x 50
    // ms), so the second chunk of 8 tokens (128 + 100 ms) needs a first of 8 (256 ms usable);
    // one stream with a second expected (a server's queue) is paced as if both were in
    assert_eq!(
        run(2, true, slow, None, 0),
        (vec![eights.clone(), eights.clone()], 2)
    );
    assert_eq!(run(1, true, slow, None, 2), (vec![eights], 1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_chunk_grid_gathers_the_chunks_that_can_wait() {
    let (dir, tts, voice) = turbo_model("batch-grid");
    let voices = vec![voice];
    let opts = |seed: u64, max: usize| turbo_opts(seed, vec![4, 8], max);
    // three streams joining one or two rounds apart: their chunks fall due in different rounds
    let jobs = vec![
        Job {
            voice: 0,
            text: "Hello there.",
            opts: opts(3, 30),
            join_at: 0,
        },
        Job {
            voice: 0,
            text: "Another one speaking.",
            opts: opts(4, 26),
            join_at: 1,
        },
        Job {
            voice: 0,
            text: "Third.",
            opts: opts(9, 28),
            join_at: 3,
        },
    ];
    let ms = Duration::from_millis;
    // on `pace`, with `grid` and streams `live` or kept whole: each job's chunks, the flow
    // calls, and whether every call off the grid ran where the grid allows one
    let run = |grid: Option<usize>, pace: Pace, live: bool| {
        let mut batch = tts
            .batch(
                BatchOptions::default()
                    .with_slots(3)
                    .with_positions(256)
                    .with_bucket(32),
            )
            .unwrap();
        batch.set_chunk_grid(grid);
        assert_eq!(batch.chunk_grid(), grid);
        batch.set_pace(pace);
        let mut out: Vec<Vec<AudioChunk>> = vec![Vec::new(); jobs.len()];
        let mut who = HashMap::new();
        let (mut round, mut added, mut on_grid) = (0, 0, true);
        while added < jobs.len() || !batch.is_empty() {
            for (k, j) in jobs.iter().enumerate() {
                if j.join_at == round {
                    let id = batch.add(&voices[j.voice], j.text, &j.opts).unwrap();
                    assert!(batch.set_live(id, live));
                    who.insert(id, k);
                    added += 1;
                }
            }
            let (before, streams) = (batch.timings(), batch.len());
            for (id, o) in batch.step() {
                match o {
                    BatchOutput::Chunk(c) => out[who[&id]].push(c),
                    BatchOutput::Failed(e) => panic!("stream {id} failed: {e}"),
                    _ => unreachable!(),
                }
            }
            let after = batch.timings();
            if after.flow_calls > before.flow_calls {
                // a grid round, a round that decoded nothing, or a batch of one stream
                on_grid &= after.rounds % 4 == 0 || after.rounds == before.rounds || streams < 2;
            }
            round += 1;
            assert!(round < 500, "the batch does not finish");
        }
        (out, batch.timings().flow_calls, on_grid)
    };
    let solo = |c: &Conditionals, j: &Job| turbo_solo(&tts, c, j.text, &j.opts);
    let fast = Pace::assumed(ms(1), ms(1), ms(1));
    // kept whole, nothing is urgent: the calls run on the grid only, fewer and shared
    let (free, free_calls, _) = run(None, fast, false);
    let (gridded, grid_calls, on_grid) = run(Some(4), fast, false);
    assert!(on_grid, "a call ran off the grid");
    assert!(
        grid_calls < free_calls,
        "{grid_calls} calls on the grid against {free_calls}"
    );
    // each stream's chunks keep their tokens: its audio is its own stream's
    check(solo, &voices, &jobs, &free, false);
    check(solo, &voices, &jobs, &gridded, false);
    // a live stream alone waits for nobody: exactly its own stream, on a grid or not
    let one_slot = || {
        BatchOptions::default()
            .with_slots(1)
            .with_positions(256)
            .with_bucket(32)
    };
    let lone = |grid| {
        let mut batch = tts.batch(one_slot()).unwrap();
        batch.set_chunk_grid(grid);
        batch.set_pace(fast);
        batch.add(&voices[0], jobs[0].text, &jobs[0].opts).unwrap();
        chunks_of(&mut batch)
    };
    let alone = lone(Some(4));
    assert!(alone == lone(None), "a lone stream waited for the grid");
    assert!(alone[0] == solo(&voices[0], &jobs[0]));
    // a grid of one round is none
    let mut batch = tts.batch(one_slot()).unwrap();
    batch.set_chunk_grid(Some(1));
    assert_eq!(batch.chunk_grid(), None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fitted_hops_shrink_to_what_the_listener_has_left() {
    let (dir, tts, voice) = turbo_model("batch-fitted");
    let opts_with = |hops: Vec<usize>| turbo_opts(7, hops, 30);
    let text = "Hello there, a fitted stream.";
    let fast = Pace::assumed(
        Duration::from_micros(1),
        Duration::from_millis(1),
        Duration::from_millis(1),
    );
    // one stream (`live` or kept whole) on schedule [4, 8], fitting `on` with a round budget
    // of `budget`: its chunks and the hops fitted
    let run = |live: bool, on: bool, budget: Option<Duration>| {
        let mut batch = tts
            .batch(
                BatchOptions::default()
                    .with_slots(1)
                    .with_positions(256)
                    .with_bucket(32),
            )
            .unwrap();
        batch.set_chunks_per_call(1);
        batch.set_pace(fast);
        batch.set_hop_fitting(on);
        assert_eq!(batch.hop_fitting(), on);
        batch.set_round_budget(budget);
        assert_eq!(batch.round_budget(), budget);
        let id = batch.add(&voice, text, &opts_with(vec![4, 8])).unwrap();
        assert!(batch.set_live(id, live));
        let chunks = chunks_of(&mut batch);
        (chunks, batch.timings().fitted_hops)
    };
    let solo = |hops: Vec<usize>| turbo_solo(&tts, &voice, text, &opts_with(hops));
    let own = solo(vec![4, 8]);
    let fours = solo(vec![4]);
    assert_ne!(own, fours);
    // rounds of a second: no listener keeps up, every hop after the first is the shortest,
    // exactly the stream on hops of 4
    let (fitted, n) = run(true, true, Some(Duration::from_secs(1)));
    assert_eq!(fitted, vec![fours]);
    assert!(n >= 3, "{n} hops fitted");
    // fitting off, or a stream kept whole: its own schedule
    assert_eq!(
        run(true, false, Some(Duration::from_secs(1))),
        (vec![own.clone()], 0)
    );
    assert_eq!(
        run(false, true, Some(Duration::from_secs(1))),
        (vec![own], 0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
