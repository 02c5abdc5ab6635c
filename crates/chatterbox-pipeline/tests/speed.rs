//! `GenerateOptions::speed` (issue 44) through the models on the tiny English checkpoint: the
//! output is the speed-1 output time-stretched (exactly `round(len / speed)` samples), the
//! same in `generate`, `generate_stream`, `stream` and a batch, with every caption time
//! divided by the speed; speed 1 runs no stretcher; speeds outside 0.25..=4 are errors.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
mod fuzz_support;

use chatterbox_dsp::stretch::{stretched_len, time_stretch};
use chatterbox_pipeline::{
    BatchOptions, ChatterboxTts, Conditionals, GenerateOptions, PipelineError, SentenceTiming,
    StreamSchedule,
};
use fuzz_support::english_model;

const TEXT: &str = "Hello there. [pause 200ms] How are you?";

/// The test's options at the default speed.
fn plain() -> GenerateOptions {
    let mut o = GenerateOptions::english()
        .with_seed(3)
        .with_stream_schedule(StreamSchedule::new(vec![6, 8]));
    o.max_new_tokens = 16;
    o
}

fn opts(speed: f32) -> GenerateOptions {
    plain().with_speed(speed)
}

/// Every position of `slow`'s timings divided by `speed` (rounded), words included.
fn assert_scaled(fast: &[SentenceTiming], slow: &[SentenceTiming], speed: f32) {
    assert_eq!(fast.len(), slow.len());
    for (f, s) in fast.iter().zip(slow) {
        assert_eq!(f.text, s.text);
        assert_eq!(f.start_sample, stretched_len(s.start_sample, speed));
        assert_eq!(f.end_sample, stretched_len(s.end_sample, speed));
        assert_eq!(f.words.len(), s.words.len());
        for (fw, sw) in f.words.iter().zip(&s.words) {
            assert_eq!(fw.start_sample, stretched_len(sw.start_sample, speed));
            assert_eq!(fw.end_sample, stretched_len(sw.end_sample, speed));
        }
    }
}

/// A stream's samples joined, and the captions it handed out.
fn collect(tts: &ChatterboxTts, o: &GenerateOptions) -> (Vec<f32>, Vec<SentenceTiming>) {
    let (mut samples, mut captions) = (Vec::new(), Vec::new());
    for chunk in tts.stream(TEXT, o).unwrap() {
        let chunk = chunk.unwrap();
        assert_eq!(chunk.sample_offset, samples.len());
        samples.extend(chunk.samples);
        captions.extend(chunk.captions);
    }
    (samples, captions)
}

#[test]
fn generate_at_a_speed_is_the_speed_one_output_stretched() {
    let (tts, dir) = english_model("speed-generate");
    let (one, one_report) = tts
        .generate_with_report(TEXT, &opts(1.0), &mut |_| {})
        .unwrap();
    let one = one.samples;
    assert_eq!(one_report.captions.len(), 2);
    // 1.0 is the default: the exact path, no stretcher
    assert_eq!(plain().speed, 1.0);
    assert_eq!(tts.generate(TEXT, &plain()).unwrap().samples, one);
    for speed in [0.5, 2.0, 4.0] {
        let o = opts(speed);
        let (audio, report) = tts.generate_with_report(TEXT, &o, &mut |_| {}).unwrap();
        let wav = audio.samples;
        // length ~ 1/speed (exactly round(len / speed)), and the very samples of the stretch
        assert_eq!(wav.len(), stretched_len(one.len(), speed), "speed {speed}");
        assert_eq!(wav, time_stretch(&one, 24_000, speed).unwrap());
        assert_scaled(&report.captions, &one_report.captions, speed);
        assert_eq!(report.captions[1].end_sample, wav.len());

        // generate_stream: the same samples and captions
        let mut streamed = Vec::new();
        let r = tts
            .generate_stream_with_report(TEXT, &o, &mut |_| {}, &mut |s| {
                streamed.extend_from_slice(s);
                Ok(())
            })
            .unwrap();
        assert_eq!(streamed, wav, "speed {speed}");
        assert_eq!(r.captions, report.captions);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stream_at_a_speed_is_its_speed_one_stream_stretched() {
    let (tts, dir) = english_model("speed-stream");
    let (one, one_captions) = collect(&tts, &opts(1.0));
    for speed in [0.75, 2.5] {
        let (samples, captions) = collect(&tts, &opts(speed));
        assert_eq!(samples, time_stretch(&one, 24_000, speed).unwrap());
        assert_scaled(&captions, &one_captions, speed);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_batch_stretches_each_request_at_its_own_speed() {
    let (tts, dir) = english_model("speed-batch");
    let voice: Conditionals = tts.conditionals().unwrap().clone();
    let (fast, slow) = (opts(2.0), opts(0.5));
    let requests: Vec<(&Conditionals, &str, &GenerateOptions)> =
        vec![(&voice, TEXT, &fast), (&voice, TEXT, &slow)];
    let batch = BatchOptions::default()
        .with_slots(2)
        .with_positions(256)
        .with_bucket(32);
    let got = tts.generate_many(&requests, batch).unwrap();
    for (r, o) in got.iter().zip([&fast, &slow]) {
        let want = collect(&tts, o).0;
        let r = r.as_ref().unwrap();
        assert_eq!(r.len(), want.len(), "speed {}", o.speed);
        let diff = r
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-3, "speed {}: {diff}", o.speed);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn speeds_outside_the_range_are_errors() {
    let (tts, dir) = english_model("speed-bad");
    for speed in [0.2, 4.5, 0.0, -1.0, f32::NAN, f32::INFINITY] {
        let o = opts(speed);
        let e = tts.generate("Hi.", &o).unwrap_err();
        assert!(matches!(e, PipelineError::InvalidInput { .. }), "{e}");
        assert!(e.to_string().contains("speed"), "{e}");
        assert!(e.to_string().contains("0.25 to 4"), "{e}");
        assert!(tts.stream("Hi.", &o).is_err());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
