//! The voice library's file-system primitives: fsyncs, new files written and synced, and the
//! commit lock (a process-wide mutex plus an advisory `flock` on the directory where the
//! platform has one).
use super::{io_err, StoreError};
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The process's half of the commit lock (see the module docs).
static COMMIT: Mutex<()> = Mutex::new(());

/// Fsyncs a file.
pub(super) fn sync_file(path: &Path) -> Result<(), StoreError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io_err("sync", path))
}

/// Fsyncs a directory (its entries: renames into and out of it).
#[cfg(unix)]
pub(super) fn sync_dir(path: &Path) -> Result<(), StoreError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io_err("sync", path))
}

/// Directories cannot be opened to be synced here.
#[cfg(not(unix))]
pub(super) fn sync_dir(_: &Path) -> Result<(), StoreError> {
    Ok(())
}

/// Writes a new file and fsyncs it.
pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut f = File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err("create", path))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(io_err("write", path))
}

/// An advisory lock on a directory, held while the returned file is open; `None` where the
/// platform or file system has none.
#[cfg(unix)]
pub(super) fn lock_dir(dir: &Path, wait: bool) -> Result<Option<File>, StoreError> {
    let f = File::open(dir).map_err(io_err("open", dir))?;
    let locked = if wait {
        f.lock()
    } else {
        match f.try_lock() {
            Ok(()) => Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Io {
                    op: "lock",
                    path: dir.to_path_buf(),
                    source: io::ErrorKind::WouldBlock.into(),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    };
    match locked {
        Ok(()) => Ok(Some(f)),
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "no advisory lock on the voice directory");
            Ok(None)
        }
    }
}

#[cfg(not(unix))]
pub(super) fn lock_dir(_: &Path, _: bool) -> Result<Option<File>, StoreError> {
    Ok(None)
}

/// The library's commit lock (see the module docs), released when dropped.
pub(super) struct CommitLock {
    // fields drop in order: the advisory lock, then the mutex
    _file: Option<File>,
    _guard: MutexGuard<'static, ()>,
}

/// Takes the commit lock of the library in `dir`, waiting for it.
pub(super) fn lock_library(dir: &Path) -> Result<CommitLock, StoreError> {
    let guard = COMMIT.lock().unwrap_or_else(PoisonError::into_inner);
    let file = lock_dir(dir, true)?;
    Ok(CommitLock {
        _file: file,
        _guard: guard,
    })
}
