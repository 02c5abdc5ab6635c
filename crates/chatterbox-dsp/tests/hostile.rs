//! Decoding hostile bytes (absurd header fields, files cut at every length) gives a typed error
//! or valid audio, quickly, and never panics.
mod common;

use chatterbox_dsp::{audio, Audio, DspError};
use std::sync::mpsc;
use std::time::Duration;

/// Far above any of these inputs' decode time (milliseconds), far below a test-runner timeout.
const HANG_LIMIT: Duration = Duration::from_secs(20);

/// `decode` on its own thread, so that a panic or a hang is reported with the input's name.
fn decode_checked(bytes: Vec<u8>) -> Result<Result<Audio, DspError>, &'static str> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(audio::decode(bytes, None));
    });
    rx.recv_timeout(HANG_LIMIT).map_err(|e| match e {
        mpsc::RecvTimeoutError::Timeout => "no result in time (hang)",
        mpsc::RecvTimeoutError::Disconnected => "decode panicked",
    })
}

#[test]
fn absurd_header_fields_are_errors_or_audio() {
    let mut failures = Vec::new();
    for (name, bytes) in common::hostile_inputs() {
        match decode_checked(bytes) {
            Ok(result) => {
                if let Err(why) = common::audio_or_file_error(result) {
                    failures.push(format!("{name}: {why}"));
                }
            }
            Err(why) => failures.push(format!("{name}: {why}")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every prefix of every valid file (a download cut short, a partial copy).
#[test]
fn files_cut_at_every_length_are_errors_or_audio() {
    for (name, bytes) in common::valid_files() {
        let full = audio::decode(bytes.clone(), None).unwrap();
        for cut in 0..bytes.len() {
            let name = format!("{name}[..{cut}]");
            let result = audio::decode(bytes[..cut].to_vec(), None);
            if let Ok(a) = &result {
                assert_eq!(a.sample_rate, full.sample_rate, "{name}");
                assert!(a.samples.len() <= full.samples.len(), "{name}");
            }
            if let Err(why) = common::audio_or_file_error(result) {
                panic!("{name}: {why}");
            }
        }
    }
}
