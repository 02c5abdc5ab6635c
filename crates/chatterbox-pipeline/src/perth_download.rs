//! Fetching Perth's weights for real users (the `hub` feature): the reference gets them from
//! the `resemble-perth` package it depends on; we download that package's wheel once from the
//! Python package index, check its SHA-256, take the checkpoint out of it (a zip member),
//! check that too, and move it into place atomically.
use crate::{PipelineError, Result};
use chatterbox_watermark::{
    PERTH_CHECKPOINT_IN_WHEEL, PERTH_CHECKPOINT_SHA256, PERTH_WHEEL_SHA256, PERTH_WHEEL_URL,
};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::Path;

fn failed(reason: impl std::fmt::Display) -> PipelineError {
    PipelineError::WatermarkWeights {
        why: format!("downloading {PERTH_WHEEL_URL} failed: {reason}"),
    }
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Downloads the wheel and writes its checkpoint to `dest`.
pub(crate) fn download(dest: &Path) -> Result<()> {
    tracing::info!(
        url = PERTH_WHEEL_URL,
        "downloading the Perth watermark weights (34 MB)"
    );
    let mut wheel = Vec::new();
    reqwest::blocking::get(PERTH_WHEEL_URL)
        .and_then(reqwest::blocking::Response::error_for_status)
        .map_err(failed)?
        .read_to_end(&mut wheel)
        .map_err(failed)?;
    let got = hex(&Sha256::digest(&wheel));
    if got != PERTH_WHEEL_SHA256 {
        return Err(failed(format!(
            "the wheel's SHA-256 is {got}, expected {PERTH_WHEEL_SHA256}"
        )));
    }
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(wheel)).map_err(failed)?;
    let mut member = zip.by_name(PERTH_CHECKPOINT_IN_WHEEL).map_err(failed)?;
    let mut checkpoint = Vec::with_capacity(usize::try_from(member.size()).unwrap_or(0));
    member.read_to_end(&mut checkpoint).map_err(failed)?;
    let got = hex(&Sha256::digest(&checkpoint));
    if got != PERTH_CHECKPOINT_SHA256 {
        return Err(failed(format!(
            "the checkpoint's SHA-256 is {got}, expected {PERTH_CHECKPOINT_SHA256}"
        )));
    }
    let dir = dest
        .parent()
        .ok_or_else(|| failed(format!("{} has no directory", dest.display())))?;
    let io = |source| PipelineError::Io {
        path: dest.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    tmp.write_all(&checkpoint).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    // readable like the hub's own cached files (a temporary file is created private)
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(io)?;
    }
    tmp.persist(dest).map_err(|e| io(e.error))?;
    tracing::info!(path = %dest.display(), "Perth watermark weights saved");
    Ok(())
}
