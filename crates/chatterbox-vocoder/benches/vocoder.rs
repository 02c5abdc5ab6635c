//! `cargo xtask bench vocoder`: S3Gen's full-size HiFT (random weights) from 200 and 1000 mel
//! frames (4 s and 20 s of 24 kHz audio), as JSON records (`CHATTERBOX_BENCH_OUT`, else stdout).
//! `parity/bench/vocoder.py` times the reference on the same shapes.
//!
//! `CHATTERBOX_BENCH_DEVICE=cuda` (or `metal`) runs on the GPU (build with `--features cuda`);
//! `CHATTERBOX_BENCH_STAGES=decode` also times `decode` and the F0 + source part alone, and
//! `CHATTERBOX_BENCH_STAGES=ups` HiFT's three transposed convolutions as candle runs them with
//! torch's padding (`convtr_padded`: candle's direct kernel) and as this crate runs them
//! (`convtr_unpadded`: unpadded matmul + col2im, then cropped);
//! `CHATTERBOX_BENCH_FRAMES=200` runs one size only; `CHATTERBOX_BENCH_MIN_SECS` (default 2)
//! and `CHATTERBOX_BENCH_ITERS` (default 3) bound the time per stage.
use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use chatterbox_testkit::{
    black_box, device_name, env_f64, env_usize, test_device, time_it, BenchRun,
};
use chatterbox_vocoder::{HiFTConfig, HiFTGenerator, SineDraws};
use rand::SeedableRng;

fn device() -> anyhow::Result<(Device, &'static str)> {
    let dev = test_device("CHATTERBOX_BENCH_DEVICE")?;
    let name = device_name(&dev);
    Ok((dev, name))
}

/// A speech-like log mel: a smooth spectral tilt with moving formant bumps, around -6..0.
fn mel(frames: usize, device: &Device) -> anyhow::Result<Tensor> {
    let mut v = Vec::with_capacity(80 * frames);
    for b in 0..80 {
        for t in 0..frames {
            let (bf, tf) = (b as f32, t as f32);
            let formant = 20.0 + 10.0 * (tf * 0.05).sin();
            v.push(
                -1.0 - bf * 0.05
                    + 2.0 * (-((bf - formant) / 6.0).powi(2)).exp()
                    + 0.3 * (tf * 0.31 + bf).sin(),
            );
        }
    }
    Ok(Tensor::from_vec(v, (1, 80, frames), device)?)
}

fn main() -> anyhow::Result<()> {
    let (dev, dev_name) = device()?;
    let threads = env_usize(
        "CHATTERBOX_BENCH_THREADS",
        candle_core::utils::get_num_threads(),
    );
    let stages = std::env::var("CHATTERBOX_BENCH_STAGES").unwrap_or_default();
    let only_frames: Option<usize> = std::env::var("CHATTERBOX_BENCH_FRAMES")
        .ok()
        .and_then(|s| s.parse().ok());
    let min_secs = env_f64("CHATTERBOX_BENCH_MIN_SECS", 2.0);
    let iters = env_usize("CHATTERBOX_BENCH_ITERS", 3);
    let varmap = VarMap::new();
    let hift = HiFTGenerator::new(
        &HiFTConfig::s3gen(),
        VarBuilder::from_varmap(&varmap, DType::F32, &dev),
    )?;
    let sync = |t: &Tensor| -> anyhow::Result<()> {
        // orders the clock read after the timed device work
        dev.synchronize()?;
        black_box(t);
        Ok(())
    };
    let mut bench = BenchRun::new("vocoder", dev_name, threads, 34);
    for (frames, secs) in [(200usize, 4usize), (1000, 20)] {
        if only_frames.is_some_and(|f| f != frames) {
            continue;
        }
        let mel = mel(frames, &dev)?;
        let shape = format!("{frames} mel frames -> {secs} s @ 24 kHz");
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let mut err = None;
        let timing = time_it(1, iters, min_secs, || {
            let mut run = || -> anyhow::Result<()> {
                let (wav, _) = if dev.is_cpu() {
                    hift.inference(&mel, None, &mut rng)?
                } else {
                    // Draw on the device: no 17 MB host-to-device copy of the noise.
                    let draws = SineDraws::sample_on_device(1, 9, frames * 480, &dev)?;
                    hift.inference_with_draws(&mel, &draws, None)?
                };
                sync(&wav)
            };
            if let Err(e) = run() {
                err = Some(e);
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        bench.push_timing(&format!("hift_inference_{secs}s"), &shape, timing);
        if stages.contains("decode") {
            let draws = SineDraws::sample_on_device(1, 9, frames * 480, &dev)?;
            let source = hift.inference_with_draws(&mel, &draws, None)?.1;
            let timing = time_it(1, iters, min_secs, || {
                if let Ok(wav) = hift.decode(&mel, &source) {
                    let _ = sync(&wav);
                }
            });
            bench.push_timing(&format!("hift_decode_{secs}s"), &shape, timing);
            let timing = time_it(1, iters, min_secs, || {
                if let Ok(s) = hift.f0(&mel).and_then(|f0| hift.source(&f0, &draws, None)) {
                    let _ = sync(&s);
                }
            });
            bench.push_timing(&format!("hift_f0_source_{secs}s"), &shape, timing);
        }
        if stages.contains("ups") {
            // (c_in, c_out, kernel, stride, input length) of ups.0..2 for this many frames.
            let ups = [
                (512, 256, 16, 8, frames),
                (256, 128, 11, 5, 8 * frames),
                (128, 64, 7, 3, 40 * frames),
            ];
            let inputs = ups
                .iter()
                .map(|&(ci, co, k, _, l)| {
                    Ok((
                        Tensor::randn(0f32, 1.0, (1, ci, l), &dev)?,
                        Tensor::randn(0f32, 0.05, (ci, co, k), &dev)?,
                    ))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            for padded in [true, false] {
                let timing = time_it(1, iters, min_secs, || {
                    for ((x, w), &(_, _, k, s, _)) in inputs.iter().zip(&ups) {
                        let p = (k - s) / 2;
                        let y = if padded {
                            x.conv_transpose1d(w, p, 0, s, 1, 1)
                        } else {
                            x.conv_transpose1d(w, 0, 0, s, 1, 1).and_then(|y| {
                                let n = y.dim(2)? - 2 * p;
                                y.narrow(2, p, n)?.contiguous()
                            })
                        };
                        if let Ok(y) = y {
                            let _ = sync(&y);
                        }
                    }
                });
                let name = if padded {
                    "convtr_padded"
                } else {
                    "convtr_unpadded"
                };
                bench.push_timing(&format!("{name}_{secs}s"), &shape, timing);
            }
        }
    }
    bench.emit()?;
    Ok(())
}
