//! The voice library's file-system primitives: fsyncs, new files written and synced, and the
//! locks: the commit lock (a process-wide mutex plus an advisory lock on the library's lock
//! file) and a staging directory's lock on its own lock file.
//!
//! The advisory locks are `flock`s on regular files opened for writing, never on directories:
//! on NFS (a shared volume of several servers, as a Kubernetes ReadWriteMany claim often is)
//! Linux emulates `flock` with POSIX locks, which need a file opened for writing and cannot
//! lock a directory, so a lock on the directory itself would silently lock nothing there.
use super::{io_err, StoreError};
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The process's half of the commit lock (see the module docs).
static COMMIT: Mutex<()> = Mutex::new(());

/// The library's lock file, in its directory (not a valid voice name: never listed).
pub(super) const LIBRARY_LOCK: &str = ".lock";
/// A staging directory's lock file, in the directory (removed before it becomes a version).
pub(super) const STAGING_LOCK: &str = ".lock";

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

/// Whether the file system was found without advisory locks (warned about once).
static NO_LOCKS: AtomicBool = AtomicBool::new(false);

/// What trying a lock found.
#[derive(Debug)]
pub(super) enum Locked {
    /// Taken: held while the file is open.
    Held(File),
    /// Another open file (another server, or another upload of this one) holds it.
    Busy,
    /// The file system has no advisory locks (or refused this one).
    Unsupported,
}

/// Takes the advisory lock of the lock file `path`, opened for reading and writing (created
/// when `create`), waiting for it when `wait`. `Err` when the file cannot be opened.
pub(super) fn lock_file(path: &Path, create: bool, wait: bool) -> Result<Locked, StoreError> {
    let f = File::options()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
        .map_err(io_err("open", path))?;
    let r = if wait {
        f.lock()
    } else {
        match f.try_lock() {
            Ok(()) => Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => return Ok(Locked::Busy),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    };
    match r {
        Ok(()) => Ok(Locked::Held(f)),
        Err(e) => {
            if !NO_LOCKS.swap(true, Ordering::Relaxed) {
                tracing::warn!(file = %path.display(), error = %e,
                    "no advisory lock on the voice library's file system: servers sharing \
                     this directory may commit over each other");
            }
            Ok(Locked::Unsupported)
        }
    }
}

/// The advisory lock of a directory itself: what staging directories of servers before the
/// lock files held (see [`staging_state`]).
#[cfg(unix)]
fn lock_dir(dir: &Path) -> Locked {
    let Ok(f) = File::open(dir) else {
        return Locked::Unsupported;
    };
    match f.try_lock() {
        Ok(()) => Locked::Held(f),
        Err(std::fs::TryLockError::WouldBlock) => Locked::Busy,
        Err(std::fs::TryLockError::Error(_)) => Locked::Unsupported,
    }
}

#[cfg(not(unix))]
fn lock_dir(_: &Path) -> Locked {
    Locked::Unsupported
}

/// Whether the staging directory `dir` belongs to a live upload: its lock file's lock (or,
/// without a lock file, the directory's own, as earlier servers locked it) is held by
/// another open file. [`Locked::Unsupported`] when that cannot be told.
pub(super) fn staging_state(dir: &Path) -> Locked {
    match lock_file(&dir.join(STAGING_LOCK), false, false) {
        Ok(l) => l,
        Err(StoreError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            lock_dir(dir)
        }
        Err(_) => Locked::Unsupported,
    }
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
    let file = match lock_file(&dir.join(LIBRARY_LOCK), true, true)? {
        Locked::Held(f) => Some(f),
        Locked::Busy | Locked::Unsupported => None,
    };
    Ok(CommitLock {
        _file: file,
        _guard: guard,
    })
}
