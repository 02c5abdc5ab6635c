//! The Rust half of the real-weight check (`parity/watermark_real.py` drives it; not in CI: it
//! needs the pretrained checkpoint from the resemble-perth wheel).
//!
//! ```sh
//! real_weights embed DIR [CHECKPOINT]   # DIR/orig/NAME__SR.npy -> DIR/rust_wm_ENGINE/NAME__SR.npy
//! real_weights detect DIR [CHECKPOINT]  # DIR/detect/NAME__SR.npy -> DIR/rust_detect.json
//! ```
//!
//! ENGINE is `soxr` with the crate's `soxr` feature (libsoxr, as the reference resamples) and
//! `rubato` without it. CHECKPOINT defaults to the parity venv's copy of
//! `perth_net_250000.pth.tar`.
use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use chatterbox_testkit::reference_venv_file;
use chatterbox_watermark::{PerthWatermarker, PERTH_CHECKPOINT_IN_WHEEL};
use std::path::{Path, PathBuf};

const ENGINE: &str = if cfg!(feature = "soxr") {
    "soxr"
} else {
    "rubato"
};

fn default_checkpoint() -> Result<PathBuf> {
    reference_venv_file(PERTH_CHECKPOINT_IN_WHEEL)
        .with_context(|| format!("no {PERTH_CHECKPOINT_IN_WHEEL} in parity/.venv"))
}

/// `NAME__SR.npy` files of `dir`, sorted, with their rates.
fn clips(dir: &Path) -> Result<Vec<(PathBuf, String, u32)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let p = entry?.path();
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()).map(str::to_string) else {
            continue;
        };
        if p.extension().is_none_or(|e| e != "npy") {
            continue;
        }
        let Some((_, sr)) = stem.rsplit_once("__") else {
            bail!("{}: expected NAME__RATE.npy", p.display())
        };
        out.push((p.clone(), stem.clone(), sr.parse()?));
    }
    out.sort();
    Ok(out)
}

fn read(p: &Path) -> Result<Vec<f32>> {
    Ok(Tensor::read_npy(p)?.flatten_all()?.to_vec1::<f32>()?)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, dir) = match (args.first(), args.get(1)) {
        (Some(c), Some(d)) => (c.as_str(), PathBuf::from(d)),
        _ => bail!("usage: real_weights embed|detect DIR [CHECKPOINT]"),
    };
    let ckpt = match args.get(2) {
        Some(p) => PathBuf::from(p),
        None => default_checkpoint()?,
    };
    let wm = PerthWatermarker::load(&ckpt, &Device::Cpu)?;
    match cmd {
        "embed" => {
            let out = dir.join(format!("rust_wm_{ENGINE}"));
            std::fs::create_dir_all(&out)?;
            for (path, stem, sr) in clips(&dir.join("orig"))? {
                let x = read(&path)?;
                let t = std::time::Instant::now();
                let y = wm.apply_watermark(&x, sr)?;
                eprintln!(
                    "embed {stem} ({ENGINE}): {:.2} s of audio in {:.3} s",
                    x.len() as f64 / f64::from(sr),
                    t.elapsed().as_secs_f64()
                );
                let n = y.len();
                Tensor::from_vec(y, n, &Device::Cpu)?.write_npy(out.join(format!("{stem}.npy")))?;
            }
        }
        "detect" => {
            let mut results = serde_json::Map::new();
            for (path, stem, sr) in clips(&dir.join("detect"))? {
                let x = read(&path)?;
                let v = match wm.detect(&x, sr) {
                    Ok(d) => serde_json::json!({
                        "raw": d.raw, "score": d.score, "confidence": d.confidence
                    }),
                    Err(e) => serde_json::json!({ "error": e.to_string() }),
                };
                results.insert(stem, v);
            }
            std::fs::write(
                dir.join("rust_detect.json"),
                serde_json::to_string_pretty(&results)?,
            )?;
        }
        other => bail!("unknown command {other:?} (embed, detect)"),
    }
    Ok(())
}
