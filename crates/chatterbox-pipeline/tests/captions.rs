//! Word timings from T3's alignment heads (issue 44, `GenerateOptions::word_alignment`) on the
//! tiny English checkpoint (random weights: the mechanism, not the quality). The speech is the
//! same with and without it (tokens and samples); every word of every sentence comes once, in
//! order, the words meeting and covering the sentence's exact span inside the audio; the
//! measured words start on a speech token's place; `generate`, `generate_stream` and `stream`
//! give the same timings; without the option every word is estimated and T3 records nothing.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
mod fuzz_support;

use chatterbox_pipeline::{GenerateOptions, Sampling, SeededDraws, SentenceTiming, StreamSchedule};
use fuzz_support::{check_sentence_timings, english_model};

const TEXT: &str = "Hello there, my friend. How are you today? [pause 200ms] Fine, thanks.";
const SENTENCES: [&str; 3] = [
    "Hello there, my friend.",
    "How are you today?",
    "Fine, thanks.",
];

fn opts(seed: u64) -> GenerateOptions {
    let mut o = GenerateOptions::english()
        .with_seed(seed)
        .with_stream_schedule(StreamSchedule::new(vec![6, 8]));
    o.max_new_tokens = 48;
    // one text chunk per sentence
    o.max_chunk_chars = 24;
    o
}

/// The timings of [`SENTENCES`] ([`check_sentence_timings`]); returns the number of measured
/// words.
fn check_words(captions: &[SentenceTiming], total: usize) -> usize {
    check_sentence_timings(captions, &SENTENCES, total)
        .iter()
        .filter(|w| !w.estimated)
        .count()
}

#[test]
fn word_alignment_keeps_the_speech_and_times_the_words() {
    let (tts, dir) = english_model("captions-aligned");
    for seed in [5u64, 9] {
        let plain = opts(seed);
        let aligned = opts(seed).with_word_alignment(true);
        let (a, ra) = tts.generate_with_report(TEXT, &plain, &mut |_| {}).unwrap();
        let (b, rb) = tts
            .generate_with_report(TEXT, &aligned, &mut |_| {})
            .unwrap();
        // the same speech: T3's tokens (hence every sample) do not change
        assert_eq!(a.samples, b.samples, "seed {seed}");
        assert_eq!(ra.truncated, rb.truncated);
        // the same sentence timings; words estimated without the option
        for (x, y) in ra.captions.iter().zip(&rb.captions) {
            assert_eq!(
                (x.start_sample, x.end_sample, &x.text),
                (y.start_sample, y.end_sample, &y.text)
            );
            assert!(x.words.iter().all(|w| w.estimated));
        }
        assert_eq!(check_words(&ra.captions, a.samples.len()), 0);
        let measured = check_words(&rb.captions, b.samples.len());
        assert!(measured > 0, "seed {seed}: the alignment reached no word");

        // generate_stream: the same timings
        let r = tts
            .generate_stream_with_report(TEXT, &aligned, &mut |_| {}, &mut |_| Ok(()))
            .unwrap();
        assert_eq!(r.captions, rb.captions);
        // stream: the same samples and timings (each sentence handed out once)
        let mut samples = 0;
        let mut handed = Vec::new();
        for chunk in tts.stream(TEXT, &aligned).unwrap() {
            let chunk = chunk.unwrap();
            samples += chunk.samples.len();
            handed.extend(chunk.captions);
        }
        assert_eq!(samples, b.samples.len());
        assert_eq!(handed, rb.captions, "seed {seed}: stream timings");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn measured_words_start_on_a_speech_token() {
    let (tts, dir) = english_model("captions-tokens");
    let text = SENTENCES[0];
    let o = opts(3).with_word_alignment(true);
    let plain = tts
        .synthesize(
            text,
            &opts(3),
            Sampling::Seeded(3),
            &mut SeededDraws::new(3),
        )
        .unwrap();
    assert!(plain.text_positions.is_none());
    let out = tts
        .synthesize(text, &o, Sampling::Seeded(3), &mut SeededDraws::new(3))
        .unwrap();
    assert_eq!(out.raw_tokens, plain.raw_tokens);
    assert_eq!(out.wav, plain.wav);
    let positions = out.text_positions.clone().unwrap();
    // one position per token S3Gen synthesised, inside T3's text span ([START] text [STOP])
    assert_eq!(positions.len(), out.speech_tokens.len());
    let span = tts.text_frontend().text_tokens(text, None).unwrap().len() + 2;
    assert!(positions.iter().all(|&p| p < span), "{positions:?}");

    // the whole output of one sentence: its span is [0, len); each measured word starts at
    // the place of a speech token (token k at len * k / n)
    let (audio, report) = tts.generate_with_report(text, &o, &mut |_| {}).unwrap();
    let len = audio.samples.len();
    let c = &report.captions[0];
    assert_eq!((c.start_sample, c.end_sample), (0, len));
    let n = positions.len();
    let grid: Vec<usize> = (0..n).map(|k| len * k / n).collect();
    let mut measured = 0;
    for w in c.words.iter().filter(|w| !w.estimated) {
        assert!(
            grid.contains(&w.start_sample),
            "{}: {}",
            w.text,
            w.start_sample
        );
        measured += 1;
    }
    assert!(measured > 0);
    let _ = std::fs::remove_dir_all(&dir);
}
