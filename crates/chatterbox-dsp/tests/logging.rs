//! Rejecting a file logs nothing at error level: symphonia logs through `log`, and a CLI that
//! shows `log` records would print them ahead of our own error (issue #26: the stray
//! `ERROR probe reached EOF` line). This binary installs a logger that keeps every record.
mod common;

use chatterbox_dsp::audio;
use log::{Level, LevelFilter, Log, Metadata, Record};
use std::sync::Mutex;

struct Recorder(Mutex<Vec<(Level, String)>>);

impl Log for Recorder {
    fn enabled(&self, _: &Metadata) -> bool {
        true
    }
    fn log(&self, record: &Record) {
        let line = format!("{}: {}", record.target(), record.args());
        if let Ok(mut records) = self.0.lock() {
            records.push((record.level(), line));
        }
    }
    fn flush(&self) {}
}

static RECORDER: Recorder = Recorder(Mutex::new(Vec::new()));

/// One test, so that no other test's records mix in.
#[test]
fn garbage_and_truncated_files_log_no_errors() {
    log::set_logger(&RECORDER).unwrap();
    log::set_max_level(LevelFilter::Trace);

    let mut inputs: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), Vec::new()),
        (
            "text".into(),
            b"definitely not audio at all, just text".to_vec(),
        ),
        ("zeros".into(), vec![0; 70_000]),
        (
            "ID3 tag only".into(),
            b"ID3\x04\0\0\0\0\0\x05hello".to_vec(),
        ),
        (
            "RIFF, not WAVE".into(),
            b"RIFF\x10\0\0\0AVI LIST\0\0\0\0".to_vec(),
        ),
    ];
    for name in [
        "aac_mono_24k.m4a",
        "aac_mono_24k.aac",
        "alac_stereo_44k.m4a",
        "flac_mono_24k.flac",
        "mp3_mono_24k.mp3",
        "vorbis_mono_24k.ogg",
        "opus_mono_48k.ogg",
    ] {
        let bytes = common::fixture(name);
        for cut in [
            0,
            1,
            3,
            4,
            8,
            11,
            12,
            40,
            100,
            bytes.len() / 2,
            bytes.len() - 1,
        ] {
            inputs.push((format!("{name}[..{cut}]"), bytes[..cut].to_vec()));
        }
        inputs.push((name.to_string(), bytes));
    }
    for (name, bytes) in inputs {
        let result = audio::decode(bytes, None);
        let records = std::mem::take(&mut *RECORDER.0.lock().unwrap());
        let errors: Vec<_> = records.iter().filter(|(l, _)| *l == Level::Error).collect();
        assert!(errors.is_empty(), "{name} ({result:?}) logged {errors:?}");
    }
}
