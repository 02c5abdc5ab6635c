//! `cargo xtask bench watermark`: Perth's pretrained watermarker (resemble-perth 1.0.1's
//! `perth_net_250000.pth.tar`) embedding and detecting 10 s of speech-like audio at 24 kHz
//! (chatterbox's rate: resampled to 32 kHz and back) and at 32 kHz (the network's rate), as
//! JSON records (`CHATTERBOX_BENCH_OUT`, else stdout). `parity/bench/watermark.py` times the
//! reference on the same clip.
//!
//! The checkpoint is `CHATTERBOX_PERTH_CHECKPOINT`, else the parity venv's copy. Without the
//! crate's `soxr` feature the 24 kHz embedding resamples with rubato (the reference: libsoxr).
//! `CHATTERBOX_BENCH_DEVICE=cuda` (with `--features cuda`) runs the network on GPU 0 (the
//! STFT and resampling stay on the CPU, as in the crate). `CHATTERBOX_BENCH_MIN_SECS` (default 2) and `CHATTERBOX_BENCH_ITERS` (default 3) bound the
//! time per stage.
use anyhow::Context;
use chatterbox_testkit::{
    black_box, device_name, env_f64, env_usize, reference_venv_file, speech_like, test_device,
    time_it, BenchRun,
};
use chatterbox_watermark::{PerthWatermarker, PERTH_CHECKPOINT_IN_WHEEL};
use std::path::PathBuf;

fn checkpoint() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("CHATTERBOX_PERTH_CHECKPOINT") {
        return Ok(PathBuf::from(p));
    }
    reference_venv_file(PERTH_CHECKPOINT_IN_WHEEL).with_context(|| {
        format!("no {PERTH_CHECKPOINT_IN_WHEEL} in parity/.venv: set CHATTERBOX_PERTH_CHECKPOINT")
    })
}

fn main() -> anyhow::Result<()> {
    let threads = env_usize(
        "CHATTERBOX_BENCH_THREADS",
        candle_core::utils::get_num_threads(),
    );
    let min_secs = env_f64("CHATTERBOX_BENCH_MIN_SECS", 2.0);
    let iters = env_usize("CHATTERBOX_BENCH_ITERS", 3);
    let device = test_device("CHATTERBOX_BENCH_DEVICE")?;
    let label = device_name(&device);
    let wm = PerthWatermarker::load(checkpoint()?, &device)?;
    let engine = if cfg!(feature = "soxr") {
        "soxr"
    } else {
        "rubato"
    };
    let mut bench = BenchRun::new("watermark", label, threads, 28);
    for sr in [24_000u32, 32_000] {
        let x = speech_like(sr, 10.0);
        let marked = wm.apply_watermark(&x, sr)?;
        let khz = sr / 1000;
        let mut err = None;
        let embed = time_it(1, iters, min_secs, || {
            match wm.apply_watermark(&x, sr) {
                Ok(y) => {
                    black_box(y);
                }
                Err(e) => err = Some(e),
            };
        });
        let detect = time_it(1, iters, min_secs, || {
            match wm.detect(&marked, sr) {
                Ok(d) => {
                    black_box(d);
                }
                Err(e) => err = Some(e),
            };
        });
        if let Some(e) = err {
            return Err(e.into());
        }
        for (stage, timing) in [("embed", embed), ("detect", detect)] {
            let resampler = match (stage, sr) {
                (_, 32_000) => "no resampling".to_string(),
                ("embed", _) => format!("{engine} to 32 kHz and back"),
                _ => "polyphase to 32 kHz".to_string(),
            };
            let stage = format!("perth_{stage}_{khz}k_10s");
            bench.push_timing(&stage, format!("10 s @ {khz} kHz, {resampler}"), timing);
        }
    }
    bench.emit()?;
    Ok(())
}
