//! `StreamingSynth` against the reference's own primitives driven through the same chunk schedule
//! (`parity/recorders/flow.py` and `vocoder.py`, cases `stream_cfg` and `stream_meanflow`): the
//! Rust streamer, fed the speech tokens one at a time, must give every chunk's mel (the
//! `flow/stream_*` fixture) and every chunk's final audio (`vocoder/stream_*`) within those
//! fixtures' tolerances. Also reported: how far the streamed waveform is from the non-streamed
//! one of the same tokens and draws, and where that comes from; asserted: no jump at a join above
//! the waveform's own 99.9th-percentile sample-to-sample difference.
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_dsp::features::{S3GenMel, S3GenMelConfig};
use chatterbox_pipeline::{
    Draws, PipelineError, S3Gen, S3GenConfig, S3GenOptions, S3GenRef, SeededDraws, StreamChunk,
    StreamSchedule, StreamingSynth, StreamingVocoder,
};
use chatterbox_s3gen::flow::FlowOptions;
use chatterbox_testkit::{committed_fixtures_root, compare, fixtures_root, Fixture};
use chatterbox_vocoder::{SineDraws, TrimFade};
use std::collections::HashMap;
use std::path::Path;

type R<T> = anyhow::Result<T>;

const CASES: [&str; 2] = ["stream_cfg", "stream_meanflow"];

/// The flow and vocoder halves of a stream case, or `None` when `CHATTERBOX_FIXTURES` points at
/// a recording without them.
fn case(name: &str) -> R<Option<(Fixture, Fixture)>> {
    let root = fixtures_root();
    let flow = root.join("flow").join(format!("{name}.json"));
    let voc = root.join("vocoder").join(format!("{name}.json"));
    if root != committed_fixtures_root() && !(flow.exists() && voc.exists()) {
        return Ok(None);
    }
    Ok(Some((Fixture::load(&flow)?, Fixture::load(&voc)?)))
}

fn tensors(path: &Path) -> R<HashMap<String, Tensor>> {
    Ok(candle_core::safetensors::load(path, &Device::Cpu)?)
}

fn get(t: &HashMap<String, Tensor>, name: &str) -> R<Tensor> {
    let x = t
        .get(name)
        .ok_or_else(|| anyhow::anyhow!("fixture has no {name}"))?;
    Ok(if x.dtype().is_float() {
        x.to_dtype(DType::F32)?
    } else {
        x.clone()
    })
}

/// `prefix` + every weight of the fixture `<dir>/<case>.safetensors` (not its `in.`/`out.`).
fn weights_of(fx: &Fixture, prefix: &str, out: &mut HashMap<String, Tensor>) -> R<()> {
    let case: String = fx.config("weights_case")?;
    let path = fx
        .safetensors_path()
        .with_file_name(format!("{case}.safetensors"));
    for (k, v) in tensors(&path)? {
        if !k.starts_with("in.") && !k.starts_with("out.") {
            out.insert(format!("{prefix}{k}"), v);
        }
    }
    Ok(())
}

/// A tiny S3Gen: the stream cases' flow and HiFT, plus the pipeline `english` case's tokenizer
/// and speaker encoder (S3Gen loads them; streaming does not use them).
fn s3gen(flow: &Fixture, voc: &Fixture) -> R<S3Gen> {
    let mut w = HashMap::new();
    weights_of(flow, "flow.", &mut w)?;
    weights_of(voc, "mel2wav.", &mut w)?;
    let english = Fixture::load(
        &committed_fixtures_root()
            .join("pipeline")
            .join("english.json"),
    )?;
    for (k, v) in tensors(english.safetensors_path())? {
        if let Some(k) = k.strip_prefix("s3gen.") {
            if k.starts_with("tokenizer.") || k.starts_with("speaker_encoder.") {
                w.insert(k.to_string(), v);
            }
        }
    }
    let s3: serde_json::Value = english.config::<serde_json::Value>("chatterbox")?["s3gen"].clone();
    let mut flow_cfg: serde_json::Value = flow.config("flow")?;
    for part in ["encoder", "decoder", "cfm"] {
        flow_cfg[part] = flow.config(part)?;
    }
    let mut hift: serde_json::Value = voc.config("hift")?;
    hift["f0_predictor"] = voc.config("f0_predictor")?;
    let cfg: S3GenConfig = serde_json::from_value(serde_json::json!({
        "tokenizer": s3["tokenizer"],
        "speaker_encoder": s3["speaker_encoder"],
        "flow": flow_cfg,
        "mel2wav": hift,
    }))?;
    let vb = VarBuilder::from_tensors(w, DType::F32, &Device::Cpu);
    Ok(S3Gen::new(&cfg, vb, DType::F32)?)
}

fn voice(t: &HashMap<String, Tensor>) -> R<S3GenRef> {
    Ok(S3GenRef::new(
        get(t, "in.prompt_token")?,
        get(t, "in.prompt_feat")?,
        get(t, "in.embedding")?,
        &Device::Cpu,
    )?)
}

fn tile(block: &Tensor, samples: usize) -> candle_core::Result<Tensor> {
    let reps = samples.div_ceil(block.dim(2)?);
    block
        .repeat((1, 1, reps))?
        .narrow(2, 0, samples)?
        .contiguous()
}

fn draw_err(msg: String) -> PipelineError {
    PipelineError::Candle(candle_core::Error::Msg(msg))
}

/// The recorded draws: CFM noise by frame position, and per HiFT call its phases and tiled noise.
struct RecordedDraws {
    noise: Tensor,
    used: usize,
    phases: Vec<Tensor>,
    blocks: Vec<Tensor>,
    calls: usize,
}

impl RecordedDraws {
    fn new(flow: &HashMap<String, Tensor>, voc: &HashMap<String, Tensor>) -> R<Self> {
        let (mut phases, mut blocks) = (Vec::new(), Vec::new());
        while let (Ok(p), Ok(b)) = (
            get(voc, &format!("in.phase_{}", phases.len())),
            get(voc, &format!("in.noise_block_{}", blocks.len())),
        ) {
            phases.push(p);
            blocks.push(b);
        }
        Ok(Self {
            noise: get(flow, "in.noise")?,
            used: 0,
            phases,
            blocks,
            calls: 0,
        })
    }
}

impl Draws for RecordedDraws {
    fn cfm_noise(
        &mut self,
        shape: (usize, usize, usize),
        _: &Device,
    ) -> chatterbox_pipeline::Result<Tensor> {
        let (b, c, t) = self.noise.dims3()?;
        if (shape.0, shape.1) != (b, c) || self.used + shape.2 > t {
            return Err(draw_err(format!(
                "asked for noise {shape:?} after {} of {t} recorded frames",
                self.used
            )));
        }
        let n = self.noise.narrow(2, self.used, shape.2)?;
        self.used += shape.2;
        Ok(n)
    }

    fn noised_mels(
        &mut self,
        _: (usize, usize, usize),
        _: &Device,
    ) -> chatterbox_pipeline::Result<Tensor> {
        Err(draw_err("streaming draws no noised_mels".into()))
    }

    fn sine(
        &mut self,
        _batch: usize,
        _harmonics: usize,
        samples: usize,
        _: &Device,
    ) -> chatterbox_pipeline::Result<SineDraws> {
        let k = self.calls;
        let (p, b) = self
            .phases
            .get(k)
            .zip(self.blocks.get(k))
            .ok_or_else(|| draw_err(format!("no recorded draws for HiFT call {k}")))?;
        self.calls += 1;
        Ok(SineDraws::new(p.clone(), tile(b, samples)?))
    }
}

/// Runs the streamer on `tokens`, pushed `step` at a time.
fn stream(
    s3: &S3Gen,
    voice: &S3GenRef,
    schedule: &StreamSchedule,
    steps: usize,
    draws: &mut dyn Draws,
    tokens: &[u32],
    step: usize,
) -> R<Vec<StreamChunk>> {
    let mut opts = S3GenOptions::default();
    opts.n_cfm_timesteps = Some(steps);
    let mut st = StreamingSynth::new(s3, voice, schedule.clone(), opts, draws)?;
    let mut chunks = Vec::new();
    for t in tokens.chunks(step) {
        chunks.extend(st.push_chunks(t)?);
    }
    chunks.push(st.finish_chunk()?);
    Ok(chunks)
}

fn flat(t: &Tensor) -> R<Vec<f32>> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

/// (max |a - b|, that over max |b|, SNR of a against b in dB).
fn diff(a: &[f32], b: &[f32]) -> (f64, f64, f64) {
    let (mut m, mut peak, mut sig, mut err) = (0f64, 0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let d = f64::from(x) - f64::from(y);
        m = m.max(d.abs());
        peak = peak.max(f64::from(y).abs());
        sig += f64::from(y).powi(2);
        err += d * d;
    }
    (m, m / peak, 10.0 * (sig / err).log10())
}

/// The case's schedule from its recorded chunks.
fn schedule(flow: &Fixture, voc: &Fixture) -> R<StreamSchedule> {
    let hops: Vec<usize> = flow.config("hops")?;
    Ok(StreamSchedule::new(hops).with_overlap_frames(voc.config("mel_cache_frames")?))
}

#[test]
fn streamed_chunks_match_the_reference() -> R<()> {
    let mut failures = Vec::new();
    for name in CASES {
        let Some((ffx, vfx)) = case(name)? else {
            continue;
        };
        let (ft, vt) = (
            tensors(ffx.safetensors_path())?,
            tensors(vfx.safetensors_path())?,
        );
        let s3 = s3gen(&ffx, &vfx)?;
        let voice = voice(&ft)?;
        let steps: usize = ffx.config("n_timesteps")?;
        let sched = schedule(&ffx, &vfx)?;
        let tokens: Vec<u32> = flat(&get(&ft, "in.token")?.to_dtype(DType::F32)?)?
            .into_iter()
            .map(|t| t as u32)
            .collect();
        let recorded: Vec<serde_json::Value> = ffx.config("chunks")?;

        // T3's pace: one token at a time.
        let mut draws = RecordedDraws::new(&ft, &vt)?;
        let chunks = stream(&s3, &voice, &sched, steps, &mut draws, &tokens, 1)?;
        assert_eq!(chunks.len(), recorded.len(), "{name}: chunk count");
        let mut offset = 0;
        for (k, c) in chunks.iter().enumerate() {
            assert_eq!((c.index, c.sample_offset), (k, offset), "{name} chunk {k}");
            assert_eq!(c.is_last, k + 1 == chunks.len(), "{name} chunk {k}");
            offset += c.audio.len();
            for (fx, out, data, shape) in [
                (
                    &ffx,
                    format!("mel_{k}"),
                    flat(&c.mel)?,
                    c.mel.dims().to_vec(),
                ),
                (
                    &vfx,
                    format!("audio_{k}"),
                    c.audio.clone(),
                    vec![1, c.audio.len()],
                ),
            ] {
                let expected = fx.f32(&format!("out.{out}"))?;
                let tol = fx.meta.tolerances[&out];
                let a: Vec<f64> = data.iter().map(|&x| f64::from(x)).collect();
                let e: Vec<f64> = expected.data.iter().map(|&x| f64::from(x)).collect();
                let check = compare(&out, &shape, &a, &expected.shape, &e, tol);
                println!(
                    "{name}/{out}: max abs {:.2e}, max rel {:.2e} ({}) {}",
                    check.max_abs,
                    check.max_rel,
                    check.tolerance,
                    if check.passed { "PASS" } else { "FAIL" }
                );
                if !check.passed {
                    failures.push(format!("{name}/{out}: {check:?}"));
                }
            }
        }
        let streamed: Vec<f32> = chunks.iter().flat_map(|c| c.audio.clone()).collect();

        // However the tokens arrive, the same chunks run.
        let mut draws = RecordedDraws::new(&ft, &vt)?;
        let at_once = stream(
            &s3,
            &voice,
            &sched,
            steps,
            &mut draws,
            &tokens,
            tokens.len(),
        )?;
        let at_once: Vec<f32> = at_once.into_iter().flat_map(|c| c.audio).collect();
        assert_eq!(
            at_once, streamed,
            "{name}: the result depends on how tokens arrive"
        );

        report_and_check_joins(
            name, &s3, &voice, &ft, &vt, &chunks, &streamed, steps, &sched,
        )?;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// The non-streamed waveform of the same tokens with the same draws (per-position CFM noise; the
/// first HiFT call's phases and noise), the streamed one's distance from it split into its flow
/// and vocoder parts, and the join check.
#[allow(clippy::too_many_arguments)]
fn report_and_check_joins(
    name: &str,
    s3: &S3Gen,
    voice: &S3GenRef,
    ft: &HashMap<String, Tensor>,
    vt: &HashMap<String, Tensor>,
    chunks: &[StreamChunk],
    streamed: &[f32],
    steps: usize,
    sched: &StreamSchedule,
) -> R<()> {
    let dev = Device::Cpu;
    let token = get(ft, "in.token")?;
    let noise = get(ft, "in.noise")?;
    let flow = s3.flow();
    let mel_full = flow.inference(
        &token,
        &voice.flow_prompt(),
        &noise,
        None,
        &FlowOptions::default().with_n_timesteps(steps),
    )?;
    let frames = mel_full.dim(2)?;
    let hift = s3.mel2wav();
    let spf = hift.config().samples_per_frame();
    let fade = TrimFade::new(hift.config().sampling_rate, &dev)?;
    // The non-streamed waveform with the first (then the second) HiFT call's draws.
    let vocode = |k: usize| -> R<Vec<f32>> {
        let draws = SineDraws::new(
            get(vt, &format!("in.phase_{k}"))?,
            tile(&get(vt, &format!("in.noise_block_{k}"))?, frames * spf)?,
        );
        let (wav, _) = hift.inference_with_draws(&mel_full, &draws, None)?;
        flat(&fade.forward(&wav)?)
    };
    let full = vocode(0)?;
    let other_draws = vocode(1)?;
    assert_eq!(full.len(), streamed.len(), "{name}: streamed length");

    // Flow part: the mel of each chunk against the same frames of the non-streamed mel.
    let peak = mel_full.abs()?.max_all()?.to_scalar::<f32>()?;
    let mut start = 0;
    let mut mel_parts = Vec::new();
    for c in chunks {
        let n = c.mel.dim(2)?;
        let d = (&c.mel - mel_full.narrow(2, start, n)?)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        mel_parts.push(format!("{:.2e}", d / peak));
        start += n;
    }
    // Vocoder part: the streamed HiFT over the non-streamed mel, split the same way.
    let mut voc = StreamingVocoder::new(hift, sched.overlap_frames)?;
    let mut rd = RecordedDraws::new(ft, vt)?;
    let mut voc_only = Vec::new();
    let mut start = 0;
    for c in chunks {
        let n = c.mel.dim(2)?;
        voc_only.extend(voc.push(&mel_full.narrow(2, start, n)?, c.is_last, &mut rd)?);
        start += n;
    }
    let (a, r, snr) = diff(streamed, &full);
    let (va, vr, vsnr) = diff(&voc_only, &full);
    let (_, dr, dsnr) = diff(&other_draws, &full);
    let spec = S3GenMel::new(S3GenMelConfig::default())?;
    let log_mel = |w: &[f32]| -> R<Vec<f32>> { Ok(spec.compute(w)?.into_vec()) };
    let full_mel = log_mel(&full)?;
    let mel_dist = |w: &[f32]| -> R<f64> {
        let m = log_mel(w)?;
        let sum: f64 = m
            .iter()
            .zip(&full_mel)
            .map(|(a, b)| f64::from((a - b).abs()))
            .sum();
        Ok(sum / m.len() as f64)
    };
    println!(
        "{name}: streamed vs non-streamed waveform: max abs {a:.3e} ({r:.2e} of peak), SNR {snr:.1} dB, \
         mean |log-mel difference| {:.3}\n  flow: new-frame mel per chunk vs non-streamed, max of peak \
         [{}]\n  vocoder alone (non-streamed mel through the streamed HiFT): max abs {va:.3e} \
         ({vr:.2e} of peak), SNR {vsnr:.1} dB, mean |log-mel difference| {:.3}\n  for scale, \
         non-streamed with another HiFT draw: {dr:.2e} of peak, SNR {dsnr:.1} dB, mean |log-mel \
         difference| {:.3}",
        mel_dist(streamed)?,
        mel_parts.join(", "),
        mel_dist(&voc_only)?,
        mel_dist(&other_draws)?,
    );

    // Joins: where a chunk's audio starts and where its crossfade (and the cached source) ends.
    let d: Vec<f32> = streamed.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    let mut sorted = d.clone();
    sorted.sort_by(f32::total_cmp);
    let p999 = sorted[((sorted.len() - 1) as f64 * 0.999).round() as usize];
    let tail = sched.overlap_frames * spf;
    for c in &chunks[1..] {
        for j in [c.sample_offset, c.sample_offset + tail] {
            if j < streamed.len() {
                let jump = d[j - 1];
                println!(
                    "{name}: join at sample {j}: |step| {jump:.3e} (99.9th percentile {p999:.3e})"
                );
                assert!(
                    jump <= p999,
                    "{name}: jump {jump:.3e} at sample {j} > p99.9 {p999:.3e}"
                );
            }
        }
    }
    Ok(())
}

/// A seeded stream is reproducible, and the noise of a frame does not depend on how many chunks
/// reached it.
#[test]
fn seeded_stream_is_reproducible() -> R<()> {
    let Some((ffx, vfx)) = case("stream_meanflow")? else {
        return Ok(());
    };
    let ft = tensors(ffx.safetensors_path())?;
    let s3 = s3gen(&ffx, &vfx)?;
    let voice = voice(&ft)?;
    let tokens: Vec<u32> = (0..24).map(|i| (i * 271 + 5) % 6561).collect();
    let sched = StreamSchedule::new(vec![10, 6]);
    let run = |seed| -> R<Vec<f32>> {
        let mut d = SeededDraws::new(seed);
        let c = stream(&s3, &voice, &sched, 2, &mut d, &tokens, 5)?;
        Ok(c.into_iter().flat_map(|c| c.audio).collect())
    };
    let a = run(7)?;
    assert_eq!(a.len(), tokens.len() * 960);
    assert_eq!(a, run(7)?, "same seed, different audio");
    assert_ne!(a, run(8)?, "the seed is not used");
    Ok(())
}

#[test]
fn misuse_is_a_typed_error() -> R<()> {
    let Some((ffx, vfx)) = case("stream_cfg")? else {
        return Ok(());
    };
    let ft = tensors(ffx.safetensors_path())?;
    let s3 = s3gen(&ffx, &vfx)?;
    let voice = voice(&ft)?;
    let mut d = SeededDraws::new(0);
    let invalid = |r: chatterbox_pipeline::Result<StreamingSynth<&mut SeededDraws>>| match r {
        Err(PipelineError::InvalidInput { what, .. }) => assert_eq!(what, "stream schedule"),
        Err(other) => panic!("expected InvalidInput, got {other:?}"),
        Ok(_) => panic!("expected InvalidInput, got a stream"),
    };
    let opts = S3GenOptions::default();
    invalid(StreamingSynth::new(
        &s3,
        &voice,
        StreamSchedule::new(vec![]),
        opts.clone(),
        &mut d,
    ));
    // 3 tokens make 6 mel frames: fewer than the 8 re-synthesised at a join
    invalid(StreamingSynth::new(
        &s3,
        &voice,
        StreamSchedule::new(vec![3]),
        opts.clone(),
        &mut d,
    ));
    let mut st = StreamingSynth::new(&s3, &voice, StreamSchedule::new(vec![4]), opts, &mut d)?;
    assert!(
        matches!(st.finish(), Err(PipelineError::InvalidInput { .. })),
        "no tokens"
    );
    let special = st.push_tokens(&[1, 2, 6562]);
    assert!(
        matches!(
            special,
            Err(PipelineError::InvalidInput {
                what: "speech tokens",
                ..
            })
        ),
        "{special:?}"
    );
    assert!(
        st.tokens().is_empty(),
        "a rejected push must not keep its tokens"
    );
    let audio = st.push_tokens(&[1, 2, 3, 4, 5, 6, 7])?;
    assert_eq!(
        audio.len(),
        0,
        "the first chunk holds its whole waveform back (8 frames)"
    );
    st.finish()?;
    assert!(st.push_tokens(&[1]).is_err(), "push after finish");
    Ok(())
}
