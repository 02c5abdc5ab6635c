//! The e2e tests' checkpoint directories and clips (the english checkpoint, the clips and the
//! runs of the binary through tests/common), and what they check in the files written.
pub use crate::common::{chatterbox, command, ok, p, read, write_wav, R};
use crate::common::{
    fixtures, samples, tensors, write_config, write_english_checkpoint, write_part,
};
use candle_core::Tensor;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;

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
    let t = tensors("english")?;
    write_english_checkpoint(&t, &dir)?;
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
    write_config("turbo", &turbo_dir)?;
    Ok(Setup {
        _tmp: tmp,
        dir,
        turbo_dir,
        ref_wav,
        source_wav,
        vc_len,
    })
}

/// `speak TEXT` with the tiny English checkpoint and the voice clip `voice`, on the CPU,
/// drawing at most `max_tokens` speech tokens: the start of most tests' command lines.
pub fn speak_args<'a>(
    s: &'a Setup,
    text: &'a str,
    voice: &'a Path,
    max_tokens: &'a str,
) -> Vec<&'a str> {
    crate::common::speak_args(&s.dir, text, voice, max_tokens)
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
