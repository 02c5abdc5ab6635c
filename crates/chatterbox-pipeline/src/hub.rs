//! `from_pretrained`'s downloads (`hf_hub_download` / `snapshot_download` in chatterbox/tts.py,
//! mtl_tts.py, tts_turbo.py, vc.py, upstream 5de7a54) with the `hf-hub` crate.
use crate::checkpoint::{CheckpointFiles, MultilingualT3, Variant};
use crate::{PipelineError, Result};
use std::path::PathBuf;

/// Downloads (or finds in the Hugging Face cache) the files of `variant` and returns the
/// directory holding them, for `from_dir`. Required files must download; optional ones (the
/// built-in voice, tokenizer extras) may be absent.
pub fn download_checkpoint(variant: Variant, mtl: &MultilingualT3) -> Result<PathBuf> {
    download_files(variant.hub_repo(), &CheckpointFiles::of(variant, mtl))
}

/// Downloads (or finds in the cache) what voice conversion needs of `ResembleAI/chatterbox`
/// (`s3gen.safetensors`, `conds.pt`) and returns their directory, for `ChatterboxVc::from_dir`.
pub fn download_vc_checkpoint() -> Result<PathBuf> {
    let files = CheckpointFiles {
        ve: "s3gen.safetensors",
        t3: "s3gen.safetensors".into(),
        s3gen: "s3gen.safetensors",
        tokenizer: crate::CONDS_FILE,
        optional: &[],
    };
    download_files("ResembleAI/chatterbox", &files)
}

pub(crate) fn download_files(repo: &str, files: &CheckpointFiles) -> Result<PathBuf> {
    let err = |file: &str, e: &dyn std::fmt::Display| PipelineError::Hub {
        repo: repo.to_string(),
        file: file.to_string(),
        reason: e.to_string(),
    };
    let (owner, name) = repo.split_once('/').unwrap_or(("", repo));
    let client = hf_hub::HFClientSync::new().map_err(|e| err("", &e))?;
    let model = client.model(owner, name);
    let required = [files.ve, files.t3.as_str(), files.s3gen];
    let mut dir = None;
    for file in required {
        let p = model
            .download_file()
            .filename(file)
            .send()
            .map_err(|e| err(file, &e))?;
        dir = p.parent().map(|d| d.to_path_buf());
    }
    for file in std::iter::once(files.tokenizer).chain(files.optional.iter().copied()) {
        if let Err(e) = model.download_file().filename(file).send() {
            tracing::debug!(file, error = %e, "optional checkpoint file not downloaded");
        }
    }
    dir.ok_or_else(|| err("", &"no file downloaded"))
}
