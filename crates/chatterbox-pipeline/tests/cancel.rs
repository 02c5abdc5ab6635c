//! `GenerateOptions::cancel` stops a generation: at once when set before, and within a step
//! when another thread sets it while T3 draws (the tiny English model of the parity fixtures
//! never draws its stop token, so without the flag it would draw every one of its tokens).
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test
mod fuzz_support;

use chatterbox_pipeline::{
    Cancel, ChatterboxConfig, ChatterboxTts, DType, Device, GenerateOptions, PipelineError,
    Progress,
};
use fuzz_support::{checkpoint_dir, fixture_config, ref_clip};

fn english() -> ChatterboxTts {
    let dir = checkpoint_dir("english", "cancel-english");
    let cfg: ChatterboxConfig = serde_json::from_value(fixture_config("english")).unwrap();
    let mut tts =
        ChatterboxTts::from_dir_with_config(&dir, &cfg, &Device::Cpu, DType::F32).unwrap();
    tts.prepare_conditionals_from_audio(&ref_clip(0), 0.5)
        .unwrap();
    tts
}

#[test]
fn a_cancelled_generation_stops_within_a_token() {
    let tts = english();
    let cancel = Cancel::new();
    let mut opts = GenerateOptions::english()
        .with_seed(3)
        .with_cancel(cancel.clone());
    opts.max_new_tokens = 200;

    // set before: nothing is drawn
    cancel.cancel();
    let mut tokens = 0;
    let r = tts.generate_with_progress("Hello there.", &opts, &mut |p| {
        if let Progress::Tokens { .. } = p {
            tokens += 1;
        }
    });
    assert!(matches!(r, Err(PipelineError::Cancelled)), "{r:?}");
    assert_eq!(tokens, 0);

    // set while T3 draws (here by the progress callback at the 5th token, as another thread
    // would): the 5th token is the last
    let cancel = Cancel::new();
    opts.cancel = Some(cancel.clone());
    let mut drawn = 0;
    let r = tts.generate_with_progress("Hello there.", &opts, &mut |p| {
        if let Progress::Tokens { generated, .. } = p {
            drawn = *generated;
            if *generated == 5 {
                cancel.cancel();
            }
        }
    });
    assert!(matches!(r, Err(PipelineError::Cancelled)), "{r:?}");
    assert_eq!(drawn, 5);

    // and from another thread, during a generation that would draw 200 tokens
    let cancel = Cancel::new();
    opts.cancel = Some(cancel.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    let other = cancel.clone();
    std::thread::scope(|s| {
        s.spawn(move || {
            rx.recv().unwrap();
            other.cancel();
        });
        let mut drawn = 0;
        let r = tts.generate_with_progress("Hello there.", &opts, &mut |p| {
            if let Progress::Tokens { generated, .. } = p {
                drawn = *generated;
                if *generated == 3 {
                    tx.send(()).unwrap();
                }
            }
        });
        assert!(matches!(r, Err(PipelineError::Cancelled)), "{r:?}");
        assert!(drawn < 200, "{drawn}");
    });

    // the flag does not change what a generation that is not cancelled produces
    let mut plain = GenerateOptions::english().with_seed(3);
    plain.max_new_tokens = 12;
    let mut with_flag = plain.clone().with_cancel(Cancel::new());
    with_flag.max_new_tokens = 12;
    let a = tts.generate("Hello there.", &plain).unwrap();
    let b = tts.generate("Hello there.", &with_flag).unwrap();
    assert_eq!(a.samples, b.samples);
    assert!(!a.samples.is_empty());
}
