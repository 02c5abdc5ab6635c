//! The tests' checkpoint directories, clips and runs of the `chatterbox` binary.
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub type R<T> = anyhow::Result<T>;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../parity/fixtures")
}

pub fn tensors(case: &str) -> R<HashMap<String, Tensor>> {
    let path = fixtures()
        .join("pipeline")
        .join(format!("{case}.safetensors"));
    Ok(candle_core::safetensors::load(&path, &Device::Cpu)?)
}

pub fn samples(t: &HashMap<String, Tensor>, name: &str) -> R<Vec<f32>> {
    let v = t
        .get(name)
        .ok_or_else(|| anyhow::anyhow!("fixture lacks {name}"))?;
    Ok(v.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// The tensors under `prefix` (prefix removed) saved to `path`.
pub fn write_part(t: &HashMap<String, Tensor>, prefix: &str, path: &Path) -> R<()> {
    let part: HashMap<String, Tensor> = t
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
        .collect();
    anyhow::ensure!(!part.is_empty(), "no tensor under {prefix}");
    Ok(candle_core::safetensors::save(&part, path)?)
}

pub fn write_wav(path: &Path, samples: Vec<f32>, sample_rate: u32) -> R<()> {
    let audio = chatterbox_dsp::Audio::new(samples, sample_rate);
    Ok(chatterbox_dsp::audio::write_wav(
        path,
        &audio,
        chatterbox_dsp::WavFormat::Float32,
    )?)
}

/// The english case's tiny checkpoint in the hub layout, its reference clip and the vc case's
/// source clip; the turbo case's checkpoint beside it.
pub struct Setup {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub turbo_dir: PathBuf,
    pub ref_wav: PathBuf,
    pub source_wav: PathBuf,
    pub vc_len: usize,
}

pub fn setup() -> R<Setup> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("ckpt");
    std::fs::create_dir(&dir)?;
    let t = tensors("english")?;
    write_part(&t, "t3.", &dir.join("t3_cfg.safetensors"))?;
    write_part(&t, "ve.", &dir.join("ve.safetensors"))?;
    write_part(&t, "s3gen.", &dir.join("s3gen.safetensors"))?;
    std::fs::copy(
        fixtures().join("text/assets/en/tokenizer.json"),
        dir.join("tokenizer.json"),
    )?;
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        fixtures().join("pipeline/english.json"),
    )?)?;
    std::fs::write(
        dir.join(chatterbox_pipeline::CONFIG_FILE),
        serde_json::to_string(&fx["config"]["chatterbox"])?,
    )?;
    let ref_wav = tmp.path().join("ref.wav");
    write_wav(&ref_wav, samples(&t, "in.ref_24k")?, 24_000)?;
    let vc = tensors("vc")?;
    let source_wav = tmp.path().join("source.wav");
    write_wav(&source_wav, samples(&vc, "in.source_16k")?, 16_000)?;
    let vc_len = samples(&vc, "out.wav")?.len();

    // Turbo: its T3 and VoiceEncoder, the english S3Gen plus the meanflow-only tensors.
    let turbo_dir = tmp.path().join("turbo");
    std::fs::create_dir(&turbo_dir)?;
    let tt = tensors("turbo")?;
    write_part(&tt, "t3.", &turbo_dir.join("t3_turbo_v1.safetensors"))?;
    write_part(&tt, "ve.", &turbo_dir.join("ve.safetensors"))?;
    let s3: HashMap<String, Tensor> = t
        .iter()
        .chain(tt.iter())
        .filter(|(k, _)| k.starts_with("s3gen."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    write_part(&s3, "s3gen.", &turbo_dir.join("s3gen_meanflow.safetensors"))?;
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(
            fixtures().join("text/assets/turbo").join(f),
            turbo_dir.join(f),
        )?;
    }
    let tfx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        fixtures().join("pipeline/turbo.json"),
    )?)?;
    std::fs::write(
        turbo_dir.join(chatterbox_pipeline::CONFIG_FILE),
        serde_json::to_string(&tfx["config"]["chatterbox"])?,
    )?;
    Ok(Setup {
        _tmp: tmp,
        dir,
        turbo_dir,
        ref_wav,
        source_wav,
        vc_len,
    })
}

pub fn chatterbox(args: &[&str]) -> R<Output> {
    Ok(Command::new(env!("CARGO_BIN_EXE_chatterbox"))
        .env("CHATTERBOX_NO_WATERMARK", "1")
        .args(args)
        .env_remove("CHATTERBOX_MODEL_DIR")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()?)
}

pub fn ok(o: &Output) -> R<()> {
    anyhow::ensure!(
        o.status.success(),
        "chatterbox failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(())
}

pub fn read(path: &Path) -> R<Vec<f32>> {
    let a = chatterbox_dsp::audio::load(path)?;
    anyhow::ensure!(a.sample_rate == 24_000, "sample rate {}", a.sample_rate);
    anyhow::ensure!(!a.samples.is_empty(), "{} is empty", path.display());
    anyhow::ensure!(
        a.samples.iter().all(|v| v.is_finite()),
        "non-finite samples"
    );
    anyhow::ensure!(a.samples.iter().any(|&v| v != 0.0), "all zero");
    Ok(a.samples)
}

/// `speak TEXT` with the tiny English checkpoint and the voice clip `voice`, on the CPU,
/// drawing at most `max_tokens` speech tokens: the start of most tests' command lines.
pub fn speak_args<'a>(
    s: &'a Setup,
    text: &'a str,
    voice: &'a Path,
    max_tokens: &'a str,
) -> Vec<&'a str> {
    let dir = p(&s.dir);
    let device = ["--device", "cpu", "--max-new-tokens", max_tokens];
    [
        &["speak", text, "--model-dir", dir, "--voice", p(voice)][..],
        &device,
    ]
    .concat()
}

pub fn p(path: &Path) -> &str {
    path.to_str().unwrap_or_default()
}

/// `chatterbox vc SOURCE --target TARGET` on the tiny checkpoint, writing `out`, with `extra`.
pub fn vc(s: &Setup, source: &Path, target: &Path, out: &Path, extra: &[&str]) -> R<Output> {
    let mut args = vec![
        "vc",
        p(source),
        "--target",
        p(target),
        "--model-dir",
        p(&s.dir),
        "--device",
        "cpu",
        "-o",
        p(out),
    ];
    args.extend_from_slice(extra);
    chatterbox(&args)
}

/// The `NAME.partial-*.wav` files in `dir`.
pub fn partial_files(dir: &Path, stem: &str) -> R<Vec<PathBuf>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.starts_with(&format!("{stem}.partial-"))) {
            v.push(path);
        }
    }
    Ok(v)
}

/// `(samples, data bytes)`: the header's count and the bytes after the header, which agree
/// in a valid file.
pub fn wav_counts(path: &Path) -> R<(u32, u64)> {
    let r = hound::WavReader::open(path)?;
    let samples = r.len();
    let bytes = std::fs::metadata(path)?.len();
    let data = u64::from(samples) * u64::from(r.spec().bits_per_sample / 8);
    anyhow::ensure!(bytes >= data, "{bytes} bytes hold less than {data} of data");
    anyhow::ensure!(bytes - data <= 80, "{} bytes beyond the data", bytes - data);
    Ok((samples, bytes))
}
