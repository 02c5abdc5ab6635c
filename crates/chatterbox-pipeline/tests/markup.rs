//! Pauses and SSML through the models (issue 44) on the tiny English checkpoint, and the
//! sentence and word timings that come with the audio: a pause is exact silence of its length
//! between the fades of the sentences around it, in `generate`, `generate_stream` and `stream`
//! alike, and the timings match the samples each sentence produced.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
mod fuzz_support;

use chatterbox_pipeline::{
    GenerateOptions, Lexicon, PipelineError, SentenceTiming, StreamSchedule,
};
use fuzz_support::{check_sentence_timings, english_model};
use std::sync::Arc;

fn opts(seed: u64) -> GenerateOptions {
    let mut o = GenerateOptions::english()
        .with_seed(seed)
        .with_stream_schedule(StreamSchedule::new(vec![6, 8]));
    o.max_new_tokens = 16;
    o
}

/// The start and length of the longest run of exact zeros.
fn longest_zero_run(wav: &[f32]) -> (usize, usize) {
    let (mut best, mut start, mut run) = ((0, 0), 0, 0);
    for (i, &v) in wav.iter().enumerate() {
        if v == 0.0 {
            if run == 0 {
                start = i;
            }
            run += 1;
            if run > best.1 {
                best = (start, run);
            }
        } else {
            run = 0;
        }
    }
    best
}

/// The timings of sentences `texts` ([`check_sentence_timings`]), every word estimated and
/// never empty.
fn check_timings(captions: &[SentenceTiming], texts: &[&str], total: usize) {
    for w in check_sentence_timings(captions, texts, total) {
        assert!(w.estimated);
        assert!(w.end_sample > w.start_sample);
    }
}

#[test]
fn a_pause_is_exact_silence_between_the_sentences() {
    let (tts, dir) = english_model("markup-pause");
    let o = opts(5);
    // each sentence alone, with the seed its place gives it (seed + index)
    let first = tts.generate("Hello there.", &o).unwrap().samples;
    let second = tts.generate("How are you?", &opts(6)).unwrap().samples;
    let (a, b) = (first.len(), second.len());
    // S3Gen's output starts with 20 ms of zeros (the reference's `trim_fade`): they join the
    // pause's
    let ends_zero = first.iter().rev().take_while(|&&v| v == 0.0).count();
    let starts_zero = second.iter().take_while(|&&v| v == 0.0).count();
    assert!(starts_zero >= 480, "{starts_zero}");
    let run = (a - ends_zero, ends_zero + 12_000 + starts_zero);
    let text = "Hello there. [pause 500ms] How are you?";
    let (audio, report) = tts.generate_with_report(text, &o, &mut |_| {}).unwrap();
    let wav = audio.samples;
    // 500 ms at 24 kHz: 12000 zeros where the first sentence's audio ended; the crossfades
    // fade it out before and the next one in after, so nothing else is lost or added
    assert_eq!(wav.len(), a + 12_000 + b);
    assert_eq!(longest_zero_run(&wav), run);
    assert_eq!(report.sentences, 2);
    check_timings(
        &report.captions,
        &["Hello there.", "How are you?"],
        wav.len(),
    );
    // the sentence timings: from 0 to the middle of the fade into the pause, then from the
    // middle of the fade out of it to the end
    let c = &report.captions;
    assert_eq!((c[0].start_sample, c[0].end_sample), (0, a - 600));
    assert_eq!(
        (c[1].start_sample, c[1].end_sample),
        (a + 12_600, wav.len())
    );

    // generate_stream: the same samples
    let mut streamed = Vec::new();
    let r = tts
        .generate_stream_with_report(text, &o, &mut |_| {}, &mut |s| {
            streamed.extend_from_slice(s);
            Ok(())
        })
        .unwrap();
    assert_eq!(streamed, wav);
    assert_eq!(r.captions, report.captions);

    // stream: the same length, silence and timings, each timing handed out once
    let mut samples = Vec::new();
    let mut handed = Vec::new();
    for chunk in tts.stream(text, &o).unwrap() {
        let chunk = chunk.unwrap();
        assert_eq!(chunk.sample_offset, samples.len());
        samples.extend(chunk.samples);
        handed.extend(chunk.captions);
    }
    assert_eq!(samples.len(), wav.len());
    assert_eq!(longest_zero_run(&samples).1, run.1);
    assert_eq!(handed, report.captions);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ssml_breaks_and_edges() {
    let (tts, dir) = english_model("markup-ssml");
    let o = opts(5);
    let a = tts.generate("Hello there.", &o).unwrap().samples.len();
    // a leading and a trailing pause: exact zeros at both ends, the sentence between them
    let text = r#"<speak><break time="250ms"/><s>Hello there.</s><break time="0.1s"/></speak>"#;
    let (audio, report) = tts.generate_with_report(text, &o, &mut |_| {}).unwrap();
    let wav = audio.samples;
    assert_eq!(wav.len(), 6_000 + a + 2_400);
    assert!(wav[..6_000].iter().all(|&v| v == 0.0));
    assert!(wav[wav.len() - 2_400..].iter().all(|&v| v == 0.0));
    assert_eq!(report.captions.len(), 1);
    let c = &report.captions[0];
    assert_eq!(
        (c.start_sample, c.end_sample),
        (6_000 + 600, 6_000 + a - 600)
    );

    // a pause alone is silence of its length
    let wav = tts.generate("[pause 1s]", &o).unwrap().samples;
    assert_eq!(wav, vec![0.0; 24_000]);

    // plain text: one timing over the whole output
    let (audio, report) = tts
        .generate_with_report("Hello there.", &o, &mut |_| {})
        .unwrap();
    assert_eq!(report.captions.len(), 1);
    assert_eq!(
        (
            report.captions[0].start_sample,
            report.captions[0].end_sample
        ),
        (0, audio.samples.len())
    );

    // bad markup is an error naming it, before any work
    for bad in [
        "Hello [pause 10h] there.",
        "Hello [pause 3601s] there.",
        "<speak><prosody rate=\"slow\">Hi.</prosody></speak>",
        "<speak><p>never closed</speak>",
    ] {
        match tts.generate(bad, &o) {
            Err(PipelineError::Text(e)) => assert!(e.to_string().contains("markup"), "{e}"),
            other => panic!("{bad}: {other:?}"),
        }
        assert!(tts.stream(bad, &o).is_err());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_lexicon_respells_words_but_never_markup() {
    let (tts, dir) = english_model("markup-lexicon");
    let lexicon = Arc::new(Lexicon::parse("gif = jif\npause = paws").unwrap());
    let o = opts(5).with_lexicon(lexicon);
    // the same audio as the respelled text without a lexicon
    let (audio, report) = tts.generate_with_report("A gif.", &o, &mut |_| {}).unwrap();
    assert_eq!(
        audio.samples,
        tts.generate("A jif.", &opts(5)).unwrap().samples
    );
    assert_eq!(report.captions[0].text, "A jif.");
    // the pause tag is markup, not a word: still half a second of silence
    let wav = tts
        .generate("A gif. [pause 500ms] A gif.", &o)
        .unwrap()
        .samples;
    let run = longest_zero_run(&wav).1;
    assert!((12_000..13_000).contains(&run), "{run}");
    // and the stream respells the same
    let streamed: usize = tts
        .stream("A gif.", &o)
        .unwrap()
        .map(|c| c.unwrap().samples.len())
        .sum();
    assert_eq!(streamed, audio.samples.len());
    let _ = std::fs::remove_dir_all(&dir);
}
