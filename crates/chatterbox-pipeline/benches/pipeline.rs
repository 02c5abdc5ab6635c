//! `cargo xtask bench pipeline --threads 2`: the English pipeline (CFG) stage by stage on a
//! full-size random checkpoint, as JSON records (`CHATTERBOX_BENCH_OUT`, else stdout);
//! `parity/bench/pipeline.py` times the reference on the same checkpoint and shapes.
//!
//! Checkpoint: `CHATTERBOX_PIPELINE_CKPT` (a directory written by
//! `parity/.venv/bin/python parity/checkpoints.py --variant english --size full --out DIR`),
//! else `/tmp/chatterbox-bench-english`, written on first use.
//! Stages: `cond_ve`, `cond_s3tok`, `cond_campplus`, `cond_mel` (the parts of
//! `prepare_conditionals` on a 10 s clip), `t3_prefill` (conditioning, prompt and first token),
//! `t3_decode` (the other `CHATTERBOX_PIPELINE_TOKENS - 1` tokens, default 200 in all, stop
//! token disabled), `flow`, `vocoder`, `total` (all of the above) and `rtf` (generation time
//! over audio duration, excluding conditioning; a ratio stored in the `*_ms` fields).
//! `CHATTERBOX_BENCH_DEVICE=cuda` (with `--features cuda`) runs on GPU 0 with bf16 T3 and flow.
use candle_core::{Device, Tensor};
use chatterbox_dsp::features::{S3GenMel, S3GenMelConfig};
use chatterbox_pipeline::{ChatterboxTts, S3GenOptions, SeededDraws, S3GEN_SR, S3_SR};
use chatterbox_speaker::EmbedOptions;
use chatterbox_t3::Sampling;
use chatterbox_testkit::{
    bench_dtype, device_name, env_usize, full_size_checkpoint, speech_like, test_device, BenchRun,
};
use std::path::PathBuf;
use std::time::Instant;

fn ms(t: Instant, dev: &Device) -> anyhow::Result<f64> {
    // orders the clock read after the timed device work
    dev.synchronize()?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

fn main() -> anyhow::Result<()> {
    let dir = match std::env::var_os("CHATTERBOX_PIPELINE_CKPT") {
        Some(d) => PathBuf::from(d),
        None => full_size_checkpoint(
            PathBuf::from("/tmp/chatterbox-bench-english"),
            "english",
            "t3_cfg.safetensors",
        )?,
    };
    let threads = env_usize("CHATTERBOX_BENCH_THREADS", 1);
    let dev = test_device("CHATTERBOX_BENCH_DEVICE")?;
    let (dtype, device) = (bench_dtype(&dev), device_name(&dev));
    let runs = env_usize("CHATTERBOX_PIPELINE_BENCH_RUNS", 1);
    let n_tokens = env_usize("CHATTERBOX_PIPELINE_TOKENS", 200);
    let mut bench = BenchRun::new("pipeline", device, threads, 16);
    let mut tts = ChatterboxTts::from_dir(&dir, &dev, dtype)?;
    let wav_24k = speech_like(S3GEN_SR, 10.0);
    let wav_16k = speech_like(S3_SR, 10.0);
    let mel = S3GenMel::new(S3GenMelConfig::default())?;
    tts.prepare_conditionals_from_clip(
        &chatterbox_pipeline::VoiceClip::from_parts(wav_24k.clone(), wav_16k.clone()),
        0.5,
    )?;
    let conds = tts
        .conditionals()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no voice"))?;
    let text = "The quick brown fox jumps over the lazy dog, and then it runs far away into the \
                green forest where nobody can find it anymore.";
    let ids = tts.text_frontend().text_tokens(text, None)?;
    let t3 = tts.t3();
    let s3 = tts.s3gen();
    let names = [
        "cond_ve",
        "cond_s3tok",
        "cond_campplus",
        "cond_mel",
        "t3_prefill",
        "t3_decode",
        "flow",
        "vocoder",
        "total",
        "rtf",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for run in 0..=runs {
        let mut row = [0.0f64; 10];
        let t = Instant::now();
        tts.voice_encoder()
            .embeds_from_wavs(&[&wav_16k], S3_SR, &EmbedOptions::default())?;
        row[0] = ms(t, &dev)?;
        let t = Instant::now();
        s3.tokenizer().forward(&[&wav_16k], S3_SR, None)?;
        row[1] = ms(t, &dev)?;
        let t = Instant::now();
        s3.speaker_encoder().inference(&wav_16k, S3_SR)?;
        row[2] = ms(t, &dev)?;
        let t = Instant::now();
        mel.compute(&wav_24k)?;
        row[3] = ms(t, &dev)?;

        let t = Instant::now();
        let cond_emb = t3.prepare_conditioning(&conds.t3)?;
        let mut o = chatterbox_t3::GenerateOptions::default();
        o.max_new_tokens = n_tokens;
        o.stop_on_eos = false;
        o.sampling = Sampling::Seeded(0);
        let padded = t3.pad_text_tokens(&ids);
        let mut stream = t3.generate(&cond_emb, &padded, &o)?;
        let mut tokens = vec![stream.next().transpose()?.unwrap_or(0)];
        row[4] = ms(t, &dev)?;
        let t = Instant::now();
        for tok in stream {
            tokens.push(tok?);
        }
        row[5] = ms(t, &dev)?;
        // Random weights draw any id: map into S3Gen's vocabulary so the count stays fixed.
        let tokens: Vec<u32> = tokens.iter().map(|&t| t % 6561).collect();
        let mut draws = SeededDraws::new(0);
        let t = Instant::now();
        let m = s3.flow_inference(&tokens, &conds.gen, &S3GenOptions::default(), &mut draws)?;
        row[6] = ms(t, &dev)?;
        let t = Instant::now();
        let wav: Tensor = s3.hift_inference(&m, &mut draws)?;
        row[7] = ms(t, &dev)?;
        row[8] = row[..8].iter().sum();
        let audio_s = wav.dim(1)? as f64 / f64::from(S3GEN_SR);
        row[9] = (row[4] + row[5] + row[6] + row[7]) / 1e3 / audio_s;
        if run > 0 {
            for (v, x) in times.iter_mut().zip(row) {
                v.push(x);
            }
        }
    }
    let shapes = [
        "10 s clip @ 16 kHz".to_string(),
        "10 s clip @ 16 kHz".into(),
        "10 s clip @ 16 kHz".into(),
        "10 s clip @ 24 kHz".into(),
        format!("{} text tokens, CFG", ids.len() + 2),
        format!("{} tokens", n_tokens - 1),
        format!("{n_tokens} tokens, 10 steps, CFG"),
        format!("{} frames", 2 * n_tokens),
        "sum of the stages".into(),
        "ratio: generation s / audio s".into(),
    ];
    for ((name, mut v), shape) in names.iter().zip(times).zip(shapes) {
        bench.push_times(name, shape, &mut v);
    }
    bench.emit()?;
    Ok(())
}
