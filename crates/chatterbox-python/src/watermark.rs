//! The Perth watermark on every output, as the reference's classes apply it: on by default,
//! off with `CHATTERBOX_NO_WATERMARK=1` (the `chatterbox` command's variable) or
//! `watermark=False`. The weights come from `CHATTERBOX_WATERMARK_WEIGHTS`, else the copy
//! cached beside the hub's files (downloaded once from PyPI's resemble-perth wheel unless
//! `HF_HUB_OFFLINE` is set).
use crate::error::{Error, Result};
use candle_core::Device;
use chatterbox_pipeline::Watermarker;
use std::path::PathBuf;
use std::sync::Arc;

/// Whether an environment flag is set to something other than empty, `0`, `false`, `no` or
/// `off` (clap's reading of the command's flags).
pub fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "no" | "off" | "n" | "f"
        )
    })
}

/// Perth on `device`, or `None` when turned off.
pub fn perth(device: &Device, enabled: bool) -> Result<Option<Arc<dyn Watermarker>>> {
    if !enabled || env_flag("CHATTERBOX_NO_WATERMARK") {
        return Ok(None);
    }
    let explicit = std::env::var_os("CHATTERBOX_WATERMARK_WEIGHTS")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    if explicit.is_none() && crate::hub::offline() {
        let cached = chatterbox_pipeline::perth_cache_path().filter(|p| p.is_file());
        if cached.is_none() {
            return Err(Error::NotFound(format!(
                "the Perth watermark weights are not cached ({}) and HF_HUB_OFFLINE is set: \
                 set CHATTERBOX_WATERMARK_WEIGHTS to perth_net_250000.pth.tar (in PyPI's \
                 resemble-perth wheel), or turn the watermark off with \
                 CHATTERBOX_NO_WATERMARK=1 or watermark=False",
                chatterbox_pipeline::perth_cache_path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "no cache folder".into())
            )));
        }
    }
    let path = chatterbox_pipeline::find_perth_checkpoint(explicit.as_deref())?;
    Ok(Some(chatterbox_pipeline::perth_watermarker(&path, device)?))
}
