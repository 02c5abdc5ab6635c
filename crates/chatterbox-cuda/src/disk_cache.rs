//! Compiled kernels kept on disk between processes, so that only the first run on a machine
//! waits for NVRTC: one file per source, target and NVRTC version, named by a SHA-256 of
//! what went into the compilation. The folder is `$CHATTERBOX_CUDA_CACHE` (empty or `off`:
//! no cache), else `chatterbox/cuda` in the user's cache folder (`~/.cache` on Linux).
//! Files are written whole (a temporary file renamed into place), so a reader never sees a
//! partial one; a file that fails to load is removed and compiled afresh by the caller.
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The environment variable that overrides the cache folder.
pub const CACHE_ENV: &str = "CHATTERBOX_CUDA_CACHE";

/// The cache folder: `$CHATTERBOX_CUDA_CACHE` when set (empty or `off`: none), else
/// `chatterbox/cuda` under the user's cache folder, if there is one.
pub fn dir() -> Option<PathBuf> {
    dir_from(std::env::var_os(CACHE_ENV), dirs::cache_dir())
}

/// [`dir`] from the variable's value and the user's cache folder.
pub fn dir_from(var: Option<std::ffi::OsString>, user_cache: Option<PathBuf>) -> Option<PathBuf> {
    match var {
        Some(v) if v.is_empty() || v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => user_cache.map(|d| d.join("chatterbox").join("cuda")),
    }
}

/// A file name for the compilation of `parts` (the source, the options, the NVRTC version
/// ...) with the extension `ext`: the hex SHA-256 of the parts, each length-prefixed.
pub fn file_name(parts: &[&[u8]], ext: &str) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    let digest = h.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.{ext}")
}

/// The cached bytes of `name` in `dir`, if the file is there and readable.
pub fn read(dir: &Path, name: &str) -> Option<Vec<u8>> {
    std::fs::read(dir.join(name)).ok().filter(|b| !b.is_empty())
}

/// Stores `bytes` as `name` in `dir` (created if missing), atomically.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    Ok(())
}

/// Removes `name` from `dir` (a file that failed to load); a missing file is not an error.
pub fn remove(dir: &Path, name: &str) {
    let _ = std::fs::remove_file(dir.join(name));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_comes_from_the_variable_or_the_user_cache() {
        let home = Some(PathBuf::from("/home/u/.cache"));
        assert_eq!(
            dir_from(None, home.clone()),
            Some(PathBuf::from("/home/u/.cache/chatterbox/cuda"))
        );
        assert_eq!(
            dir_from(Some("/tmp/k".into()), home.clone()),
            Some(PathBuf::from("/tmp/k"))
        );
        assert_eq!(dir_from(Some("".into()), home.clone()), None);
        assert_eq!(dir_from(Some("off".into()), home), None);
        assert_eq!(dir_from(None, None), None);
    }

    #[test]
    fn names_change_with_every_part_and_its_boundaries() {
        let a = file_name(&[b"src", b"sm_90"], "cubin");
        assert_eq!(a.len(), 64 + ".cubin".len());
        assert_eq!(a, file_name(&[b"src", b"sm_90"], "cubin"));
        assert_ne!(a, file_name(&[b"src", b"sm_89"], "cubin"));
        assert_ne!(a, file_name(&[b"src ", b"sm_90"], "cubin"));
        // the same bytes split differently are a different compilation
        assert_ne!(a, file_name(&[b"srcs", b"m_90"], "cubin"));
        assert!(file_name(&[b"src", b"sm_90"], "ptx").ends_with(".ptx"));
    }

    #[test]
    fn files_round_trip_and_a_missing_or_empty_one_is_a_miss() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("nested").join("cuda");
        assert_eq!(read(&dir, "k.cubin"), None);
        write(&dir, "k.cubin", b"\x7fELF bytes")?;
        assert_eq!(
            read(&dir, "k.cubin").as_deref(),
            Some(&b"\x7fELF bytes"[..])
        );
        // rewriting replaces the whole file; no temporary file is left behind
        write(&dir, "k.cubin", b"new")?;
        assert_eq!(read(&dir, "k.cubin").as_deref(), Some(&b"new"[..]));
        assert_eq!(std::fs::read_dir(&dir)?.count(), 1);
        std::fs::write(dir.join("empty.cubin"), b"")?;
        assert_eq!(read(&dir, "empty.cubin"), None);
        remove(&dir, "k.cubin");
        remove(&dir, "k.cubin");
        assert_eq!(read(&dir, "k.cubin"), None);
        Ok(())
    }
}
