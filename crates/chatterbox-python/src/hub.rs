//! `from_pretrained`'s checkpoint: the Hugging Face cache as `huggingface_hub` uses it. With
//! `HF_HUB_OFFLINE` set (as the reference's users set it) the files are looked up in the cache
//! only (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`; the snapshot
//! that `refs/main` names) and nothing is requested from the network; otherwise the pipeline
//! downloads them (cached) with the `hf-hub` crate.
use crate::error::{Error, Result};
use chatterbox_pipeline::{CheckpointFiles, MultilingualT3, Variant};
use std::path::PathBuf;

/// The files voice conversion requires (`vc.py`'s `from_pretrained`; `conds.pt`, the built-in
/// target voice, is optional).
pub const VC_FILES: [&str; 1] = ["s3gen.safetensors"];

/// Whether `HF_HUB_OFFLINE` asks for the cache only (`1`, `true`, `yes`, `on`).
pub fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// The hub cache folder.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("HF_HUB_CACHE").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    let home = std::env::var_os("HF_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("huggingface"))
        })
        .or_else(|| {
            std::env::var_os("HOME")
                .or_else(|| std::env::var_os("USERPROFILE"))
                .map(|h| PathBuf::from(h).join(".cache").join("huggingface"))
        })?;
    Some(home.join("hub"))
}

/// The cached snapshot of `repo` (`owner/name`) holding every file of `required`.
pub fn cached_snapshot(repo: &str, required: &[&str]) -> Result<PathBuf> {
    let cache = cache_dir()
        .ok_or_else(|| Error::NotFound("no Hugging Face cache folder (set HF_HOME)".into()))?;
    let folder = cache.join(format!("models--{}", repo.replace('/', "--")));
    let refs = folder.join("refs").join("main");
    let hash = std::fs::read_to_string(&refs).map_err(|e| {
        Error::NotFound(format!(
            "{repo} is not in the Hugging Face cache ({}: {e}) and HF_HUB_OFFLINE is set",
            refs.display()
        ))
    })?;
    let snapshot = folder.join("snapshots").join(hash.trim());
    for file in required {
        if !snapshot.join(file).is_file() {
            return Err(Error::NotFound(format!(
                "{repo}/{file} is not in the Hugging Face cache ({}) and HF_HUB_OFFLINE is set",
                snapshot.display()
            )));
        }
    }
    Ok(snapshot)
}

/// The checkpoint folder of a text-to-speech variant: cached (offline) or downloaded.
pub fn tts_checkpoint(variant: Variant, mtl: &MultilingualT3) -> Result<PathBuf> {
    if offline() {
        let files = CheckpointFiles::of(variant, mtl);
        return cached_snapshot(
            variant.hub_repo(),
            &[files.ve, files.t3.as_str(), files.s3gen],
        );
    }
    download_tts(variant, mtl)
}

/// The checkpoint folder of voice conversion (`s3gen.safetensors`, `conds.pt`).
pub fn vc_checkpoint() -> Result<PathBuf> {
    if offline() {
        return cached_snapshot(Variant::English.hub_repo(), &VC_FILES);
    }
    download_vc()
}

/// Downloads `variant`'s files through the pipeline (the `hub` feature).
#[cfg(feature = "hub")]
fn download_tts(variant: Variant, mtl: &MultilingualT3) -> Result<PathBuf> {
    Ok(chatterbox_pipeline::download_checkpoint(variant, mtl)?)
}

/// Downloads voice conversion's files through the pipeline (the `hub` feature).
#[cfg(feature = "hub")]
fn download_vc() -> Result<PathBuf> {
    Ok(chatterbox_pipeline::download_vc_checkpoint()?)
}

/// Without the `hub` feature nothing is downloaded: the cache is all there is.
#[cfg(not(feature = "hub"))]
fn download_tts(_: Variant, _: &MultilingualT3) -> Result<PathBuf> {
    download_vc()
}

/// Without the `hub` feature nothing is downloaded: the cache is all there is.
#[cfg(not(feature = "hub"))]
fn download_vc() -> Result<PathBuf> {
    Err(Error::Runtime(
        "this chatterbox_rs build does not download (built without the `hub` feature): set \
         HF_HUB_OFFLINE=1 to use the Hugging Face cache, or load a folder with from_local"
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_repository_names_it() {
        let e = cached_snapshot("nobody/nothing-here-xyz", &["a.bin"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("nobody/nothing-here-xyz"), "{e}");
    }
}
