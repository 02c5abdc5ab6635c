//! `cargo xtask bench speaker --threads 2`: the VoiceEncoder (`embeds_from_wavs`: trim, mel,
//! LSTM over partials) on 6 s and 40 s of 16 kHz audio and CAMPPlus (`inference`: fbank and
//! network) on 6 s and 10 s, full size with random weights, as JSON records
//! (`CHATTERBOX_BENCH_OUT`, else stdout). `parity/bench/speaker.py` times the reference on the
//! same shapes. Stages ending in `_candle_ops` run the candle tensor-op path on the CPU (what
//! CUDA and Metal run) for comparison with the crate's CPU kernels; with `--features cuda` the
//! same stages also run on the first CUDA device (there `_host` runs the VoiceEncoder's
//! recurrence with the host kernels; by default it is one CUDA kernel a layer).
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use chatterbox_speaker::{CAMPPlus, CAMPPlusConfig, EmbedOptions, VoiceEncConfig, VoiceEncoder};
use chatterbox_testkit::{black_box, noisy_harmonics, time_it, BenchRecord, Timing};
use std::sync::Mutex;

/// Random full-size weights for whatever the model asks for (names decide the distribution:
/// BatchNorm variances positive, norm gains near 1).
struct RandomWeights {
    state: Mutex<u64>,
}

impl RandomWeights {
    fn uniform(&self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        let mut s = self.state.lock().map(|g| *g).unwrap_or(1);
        let out = (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
            })
            .collect();
        if let Ok(mut g) = self.state.lock() {
            *g = s;
        }
        out
    }
}

impl SimpleBackend for RandomWeights {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let n = s.elem_count();
        let fan_in = if s.rank() > 1 { n / s.dims()[0] } else { 1 };
        let data = if name.ends_with("running_var") {
            self.uniform(n, 0.5, 1.5)
        } else if name.ends_with("running_mean") || name.ends_with("bias") {
            self.uniform(n, -0.1, 0.1)
        } else if s.rank() == 1 {
            self.uniform(n, 0.9, 1.1)
        } else {
            let a = (3.0 / fan_in as f32).sqrt();
            self.uniform(n, -a, a)
        };
        Tensor::from_vec(data, s, dev)?.to_dtype(dtype)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("random weights need a shape ({name})")
    }

    fn contains_tensor(&self, _: &str) -> bool {
        true
    }
}

fn random_vb(device: &Device, seed: u64) -> VarBuilder<'static> {
    let backend = RandomWeights {
        state: Mutex::new(seed | 1),
    };
    VarBuilder::from_backend(Box::new(backend), DType::F32, device.clone())
}

fn main() -> anyhow::Result<()> {
    let threads: usize = std::env::var("CHATTERBOX_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut records = Vec::new();
    let mut push = |stage: &str, shape: &str, device: &str, timing: Timing| {
        let r = BenchRecord {
            group: "speaker".into(),
            stage: stage.into(),
            implementation: "rust".into(),
            device: device.into(),
            threads,
            timing,
            shape: shape.into(),
        };
        eprintln!(
            "{stage:<34} {device:<5} {:>9.3} ms (median of {})",
            r.timing.median_ms, r.timing.iters
        );
        records.push(r);
    };

    #[allow(unused_mut)] // pushed to with `--features cuda`
    let mut devices = vec![("cpu", Device::Cpu)];
    #[cfg(feature = "cuda")]
    if let Ok(d) = chatterbox_cuda::open(0) {
        devices.push(("cuda", d));
    }
    let opts = EmbedOptions::default();
    for (dev_name, device) in &devices {
        let ve = VoiceEncoder::new(&VoiceEncConfig::default(), random_vb(device, 1))?;
        let cp = CAMPPlus::new(&CAMPPlusConfig::s3gen(), random_vb(device, 2))?;
        let variants: Vec<(&str, VoiceEncoder, CAMPPlus)> = if device.is_cpu() {
            vec![
                ("", ve.clone(), cp.clone()),
                (
                    "_candle_ops",
                    ve.with_cpu_kernels(false),
                    cp.with_cpu_kernels(false),
                ),
            ]
        } else {
            // the default runs the recurrence on the device; `_host` on the host's threads
            vec![
                ("", ve.clone(), cp.clone()),
                ("_host", ve.with_cpu_kernels(true), cp),
            ]
        };
        for (suffix, ve, cp) in &variants {
            // The candle-op path is much slower on the CPU: fewer iterations.
            let (warm, iters, secs) = if suffix.is_empty() || !device.is_cpu() {
                (2, 10, 2.0)
            } else {
                (1, 3, 0.0)
            };
            for secs_audio in [6.0, 40.0] {
                let x = noisy_harmonics(16_000, secs_audio);
                let stage = format!("ve_embeds_from_wavs_{secs_audio}s{suffix}");
                push(
                    &stage,
                    &format!("{secs_audio} s @ 16 kHz"),
                    dev_name,
                    time_it(warm, iters, secs, || {
                        let e = ve.embeds_from_wavs(&[&x], 16_000, &opts);
                        black_box(e.ok());
                    }),
                );
            }
            for secs_audio in [6.0, 10.0] {
                let x = noisy_harmonics(16_000, secs_audio);
                let stage = format!("campplus_inference_{secs_audio}s{suffix}");
                push(
                    &stage,
                    &format!("{secs_audio} s @ 16 kHz"),
                    dev_name,
                    time_it(warm, iters, secs, || {
                        let e = cp
                            .inference(&x, 16_000)
                            .and_then(|t| Ok(t.to_vec2::<f32>()?));
                        black_box(e.ok());
                    }),
                );
            }
        }
    }

    chatterbox_testkit::emit_records(&records)?;
    Ok(())
}
