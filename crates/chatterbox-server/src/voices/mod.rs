//! The voice library on disk. A voice is its clip; the conditionals a model speaks it with are
//! derived from the clip and kept beside it, one version directory per upload:
//!
//! ```text
//! DIR/<name>/current                        the live version's name (one line)
//! DIR/<name>/<version>/clip.wav             the clip: mono 32-bit float WAV at 24 kHz
//! DIR/<name>/<version>/<model>.safetensors  a model's conditionals, derived from the clip
//! DIR/<name>.<model>.safetensors            the earlier flat layout: read, listed, deleted
//! DIR/.upload-*/                            an upload (or a derivation) being analysed
//! DIR/.trash-*/                             a voice being deleted
//! DIR/.lock                                 the commit lock's file
//! ```
//!
//! Names are `[A-Za-z0-9_-]{1,64}`, so no name reaches outside the directory or starts with a
//! dot. An upload is analysed into a staging directory (the clip and one file per loaded
//! model), every file and the directory are fsynced, then, under the library's commit lock, the
//! staging directory is renamed into `DIR/<name>/` as a new version and `current` is replaced
//! by renaming a fsynced temporary file over it: that rename is the commit. A kill at any
//! instant leaves `current` naming either the old version or the new one, each whole; what a
//! kill leaves besides (staging, a version never pointed to, a temporary pointer, a replaced
//! version) is removed at start-up. A model loaded later derives its conditionals from the clip
//! on first use ([`voice_file`], [`derive`]) and stores them in the same version.
//!
//! Nothing is cached in memory: every request reads `current`, so servers sharing the directory
//! (replicas on one shared volume) see each other's uploads and deletions at once (on NFS,
//! within its attribute cache time). The commit lock is a process-wide mutex plus an advisory
//! lock (`flock`) on `DIR/.lock`, so servers sharing a directory commit one at a time: of two
//! uploads of one name on two servers, the one committed last is the voice (each is whole) and
//! says `replaced`. A staging directory holds the lock of its own `.lock` file while its upload
//! lives, so a server starting meanwhile leaves it alone; where the file system has no advisory
//! locks, a start removes only staging directories older than an hour. The locks are on
//! regular files opened for writing, which NFS can lock (see `disk`).
use crate::error::ServerError;
use crate::model::{ModelError, ModelId, SAMPLE_RATE};
use chatterbox_dsp::{Audio, DspError, WavFormat};
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

mod disk;
use disk::{
    lock_file, lock_library, staging_state, sync_dir, sync_file, write_synced, Locked, STAGING_LOCK,
};

/// Extension of conditionals files.
const EXT: &str = "safetensors";
/// The clip of a version.
pub(crate) const CLIP: &str = "clip.wav";
/// The file naming a voice's live version.
const CURRENT: &str = "current";
/// Prefix of a pointer being written (removed at start-up if a crash left one).
const CURRENT_TMP: &str = ".current-";
/// Prefix of version directories.
const VERSION: &str = "v-";
/// Prefix of staging directories (removed at start-up if a crash left one).
const STAGING: &str = ".upload-";
/// Prefix of directories being deleted.
const TRASH: &str = ".trash-";
/// Age past which a start removes a staging directory whose liveness the file system cannot
/// tell (no advisory locks): far beyond any upload's analysis.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(3600);
/// Sample rate of stored clips: the rate the analysis works at (S3Gen's 24 kHz; the 16 kHz
/// copy it also uses is made from it), so analysing the stored clip later gives what analysing
/// the upload gave.
pub(crate) const CLIP_RATE: u32 = SAMPLE_RATE;

/// Whether `name` is a valid voice name: 1 to 64 of `A-Z a-z 0-9 _ -`.
pub fn valid_voice_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What can go wrong storing or reading a voice.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// A file operation failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The clip could not be encoded or decoded.
    #[error("the voice clip {}: {source}", path.display())]
    Clip {
        /// The clip.
        path: PathBuf,
        /// The cause.
        #[source]
        source: DspError,
    },
    /// The voice version worked on was replaced or deleted meanwhile.
    #[error("the voice was replaced or deleted meanwhile")]
    Gone,
    /// A test stopped the commit before `Step`, as a kill would.
    #[cfg(test)]
    #[error("a crash injected before {0:?}")]
    Crash(Step),
}

/// An `io::Error` → [`StoreError::Io`] adapter.
fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Why deriving a model's conditionals from a clip failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeriveError {
    /// Reading the clip or storing the result failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The model's analysis failed (bad clip for this model, or the model failed).
    #[error("analysing the voice clip failed: {0}")]
    Analysis(ModelError),
}

/// The steps of a commit, where a test may stop it.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Creating `DIR/<name>/`.
    VoiceDir,
    /// Renaming the staging directory into it as a version.
    Version,
    /// Writing the temporary pointer.
    Pointer,
    /// Renaming the pointer over `current` (the commit).
    Current,
    /// Removing what the new version replaced.
    Cleanup,
}

#[cfg(test)]
thread_local! {
    /// The step before which this thread's next commit stops, as a kill would.
    static CRASH_AT: std::cell::Cell<Option<Step>> = const { std::cell::Cell::new(None) };
}

/// Stops here in a test that asked for a crash at `step`.
#[cfg(test)]
fn step(step: Step) -> Result<(), StoreError> {
    if CRASH_AT.with(|c| c.get()) == Some(step) {
        return Err(StoreError::Crash(step));
    }
    Ok(())
}

#[cfg(not(test))]
fn step(_: ()) -> Result<(), StoreError> {
    Ok(())
}

/// The step marker of a commit (unit in builds without the test hook).
macro_rules! step {
    ($s:ident) => {{
        #[cfg(test)]
        let s = Step::$s;
        #[cfg(not(test))]
        let s = ();
        step(s)
    }};
}

/// Whether `r` is a crash a test injected (nothing is cleaned up then, as after a kill).
fn crashed<T>(r: &Result<T, StoreError>) -> bool {
    #[cfg(test)]
    if let Err(StoreError::Crash(_)) = r {
        return true;
    }
    let _ = r;
    false
}

/// The file of `model`'s conditionals in a version.
fn model_file(model: ModelId) -> String {
    format!("{}.{EXT}", model.name())
}

/// Reads the live version's name in a voice directory: `None` when it has none (never
/// committed); an error when it cannot be read or names no version.
fn read_current(voice: &Path) -> Result<Option<String>, StoreError> {
    let path = voice.join(CURRENT);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", &path)(e)),
    };
    let version = text.trim();
    let valid = version.strip_prefix(VERSION).is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    if valid {
        Ok(Some(version.to_string()))
    } else {
        Err(io_err("read", &path)(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{version:?} is not a version name"),
        )))
    }
}

/// The decoded upload as the library keeps it: mono at [`CLIP_RATE`] (resampled as the
/// analysis would resample it).
pub(crate) fn normalise_clip(audio: &Audio) -> Result<Audio, DspError> {
    audio.resampled(CLIP_RATE)
}

/// A directory an upload (or a derivation) is analysed into, removed when dropped unless
/// committed. It holds the advisory lock of its own lock file while it lives (see the module
/// docs).
#[derive(Debug)]
pub(crate) struct Staging {
    // fields drop in order: the lock file is closed before the directory is removed (NFS
    // keeps an open file that is removed as a hidden file, which would keep the directory)
    lock: Option<File>,
    dir: tempfile::TempDir,
}

impl Staging {
    /// A fresh staging directory in the library `root` (made under the commit lock, so a server
    /// starting meanwhile never sees it before it is locked).
    fn new(root: &Path) -> Result<Self, StoreError> {
        let _commit = lock_library(root)?;
        let mut b = tempfile::Builder::new();
        b.prefix(STAGING);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // what `mkdir` gives (less the umask), not the temporary directory's 0700: the
            // directory becomes the version readers open
            b.permissions(fs::Permissions::from_mode(0o777));
        }
        let dir = b
            .tempdir_in(root)
            .map_err(io_err("create a staging directory in", root))?;
        let lock = match lock_file(&dir.path().join(STAGING_LOCK), true, false)? {
            Locked::Held(f) => Some(f),
            Locked::Busy | Locked::Unsupported => None,
        };
        Ok(Self { lock, dir })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Where the analysis of `model` saves its conditionals.
    pub(crate) fn model_path(&self, model: ModelId) -> PathBuf {
        self.path().join(model_file(model))
    }

    /// The random part of the directory's name.
    fn suffix(&self) -> String {
        self.path()
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(STAGING))
            .unwrap_or("x")
            .to_string()
    }
}

/// The per-name upload locks of a library.
type Uploads = Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>;

/// An upload's hold on its voice name: uploads of one name run one after the other.
#[derive(Debug)]
pub(crate) struct NameLock {
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    name: String,
    uploads: Uploads,
}

impl Drop for NameLock {
    fn drop(&mut self) {
        let mut map = self.uploads.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.guard.take());
        if map
            .get(&self.name)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            map.remove(&self.name);
        }
    }
}

/// What [`VoiceLibrary::commit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Committed {
    /// Whether a voice of that name existed and was replaced.
    pub replaced: bool,
}

/// A voice as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VoiceEntry {
    /// The models with conditionals stored, in [`ModelId::ALL`] order.
    pub models: Vec<ModelId>,
    /// Whether the voice has its clip (every voice uploaded since the clip is kept; not those
    /// of the earlier flat layout), so models without conditionals yet can derive them.
    pub clip: bool,
}

/// The voice directory (see the module docs for its layout).
#[derive(Debug, Clone)]
pub struct VoiceLibrary {
    dir: PathBuf,
    uploads: Uploads,
}

impl VoiceLibrary {
    /// Opens (creating it if needed) the library in `dir`, removing what a crash left behind:
    /// staging directories no live upload holds, versions no voice points to, temporary
    /// pointers, voice directories never committed, and flat-layout files a voice of the new
    /// layout replaced.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, ServerError> {
        let dir = dir.into();
        let err = |source| ServerError::Voices {
            path: dir.clone(),
            source,
        };
        fs::create_dir_all(&dir).map_err(err)?;
        let lib = Self {
            dir: dir.clone(),
            uploads: Uploads::default(),
        };
        lib.clean().map_err(|e| err(io::Error::other(e)))?;
        Ok(lib)
    }

    /// The start-up cleaning of [`VoiceLibrary::open`].
    fn clean(&self) -> Result<(), StoreError> {
        let _lock = lock_library(&self.dir)?;
        let entries = fs::read_dir(&self.dir).map_err(io_err("read", &self.dir))?;
        let mut committed = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err("read", &self.dir))?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if name.starts_with(STAGING) {
                // an upload of a live process holds its lock: leave it
                let dead = match staging_state(&path) {
                    Locked::Held(_) => true,
                    Locked::Busy => false,
                    Locked::Unsupported => entry
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > STALE_STAGING),
                };
                if dead {
                    tracing::info!(dir = %path.display(), "removing an upload a crash left behind");
                    let _ = fs::remove_dir_all(&path);
                }
            } else if name.starts_with(TRASH) {
                let _ = fs::remove_dir_all(&path);
            } else if valid_voice_name(&name) && path.is_dir() {
                match read_current(&path) {
                    Ok(Some(v)) if path.join(&v).is_dir() => {
                        remove_stale(&path, &v);
                        committed.push(name);
                    }
                    Ok(None) => {
                        // a first upload cut short: nothing of it was ever visible
                        remove_stale(&path, "");
                        let _ = fs::remove_dir(&path);
                    }
                    Ok(Some(v)) => {
                        tracing::warn!(
                            voice = name,
                            version = v,
                            "the voice's current version is missing; left as it is"
                        );
                    }
                    Err(e) => {
                        tracing::warn!(voice = name, error = %e, "the voice cannot be read; left as it is");
                    }
                }
            }
        }
        for name in committed {
            self.remove_flat(&name);
        }
        Ok(())
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of voice `name` (`name` must be valid).
    fn voice_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The live version directory of voice `name`, if it has one.
    fn version(&self, name: &str) -> Option<PathBuf> {
        let voice = self.voice_dir(name);
        match read_current(&voice) {
            Ok(v) => v.map(|v| voice.join(v)),
            Err(e) => {
                tracing::warn!(voice = name, error = %e, "the voice cannot be read");
                None
            }
        }
    }

    /// The flat-layout file of voice `name` for `model`.
    fn flat_path(&self, name: &str, model: ModelId) -> PathBuf {
        self.dir.join(format!("{name}.{}", model_file(model)))
    }

    /// The file a request of `model` in voice `name` starts from (`name` must be valid): the
    /// model's conditionals when stored; else the voice's clip, from which the worker derives
    /// them on first use; else the flat-layout file. It exists when the voice can be
    /// spoken by `model`.
    pub fn path(&self, name: &str, model: ModelId) -> PathBuf {
        match self.version(name) {
            Some(v) => {
                let derived = v.join(model_file(model));
                if derived.is_file() {
                    derived
                } else {
                    v.join(CLIP)
                }
            }
            None => self.flat_path(name, model),
        }
    }

    /// The voices by name: the models each has conditionals for, and whether it has its clip.
    pub(crate) fn voices(&self) -> io::Result<BTreeMap<String, VoiceEntry>> {
        let mut out: BTreeMap<String, VoiceEntry> = BTreeMap::new();
        let mut flat: BTreeMap<String, Vec<ModelId>> = BTreeMap::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let file = entry.file_name();
            let Some(file) = file.to_str() else { continue };
            if valid_voice_name(file) {
                let Some(v) = self.version(file) else {
                    continue;
                };
                let models = ModelId::ALL
                    .into_iter()
                    .filter(|m| v.join(model_file(*m)).is_file())
                    .collect();
                let clip = v.join(CLIP).is_file();
                out.insert(file.to_string(), VoiceEntry { models, clip });
                continue;
            }
            let Some(stem) = file.strip_suffix(&format!(".{EXT}")) else {
                continue;
            };
            let Some((name, model)) = stem.split_once('.') else {
                continue;
            };
            if let (true, Some(m)) = (valid_voice_name(name), ModelId::from_name(model)) {
                flat.entry(name.to_string()).or_default().push(m);
            }
        }
        for (name, mut models) in flat {
            if out.contains_key(&name) {
                continue; // replaced by the new layout (removed at the next start)
            }
            models.sort();
            out.insert(
                name,
                VoiceEntry {
                    models,
                    clip: false,
                },
            );
        }
        Ok(out)
    }

    /// The voices and the models each has conditionals for, by name.
    pub fn list(&self) -> io::Result<BTreeMap<String, Vec<ModelId>>> {
        Ok(self
            .voices()?
            .into_iter()
            .map(|(name, e)| (name, e.models))
            .collect())
    }

    /// Deletes voice `name` (its clip and every model's conditionals, and its flat-layout
    /// files); whether it existed. The voice disappears at once (its directory is renamed
    /// away, then removed).
    pub fn delete(&self, name: &str) -> io::Result<bool> {
        let _lock = lock_library(&self.dir).map_err(io::Error::other)?;
        let mut found = false;
        let voice = self.voice_dir(name);
        if voice.is_dir() {
            found = matches!(read_current(&voice), Ok(Some(_)));
            let trash = tempfile::Builder::new()
                .prefix(TRASH)
                .tempdir_in(&self.dir)?;
            fs::rename(&voice, trash.path().join(name))?;
            sync_dir(&self.dir).map_err(io::Error::other)?;
            drop(trash); // removed; a crash leaves it to the next start
        }
        for m in ModelId::ALL {
            match fs::remove_file(self.flat_path(name, m)) {
                Ok(()) => found = true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    /// Holds voice `name` for an upload: uploads of one name run one after the other.
    pub(crate) async fn lock_name(&self, name: &str) -> NameLock {
        let m = self
            .uploads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_string())
            .or_default()
            .clone();
        let guard = m.lock_owned().await;
        NameLock {
            guard: Some(guard),
            name: name.to_string(),
            uploads: self.uploads.clone(),
        }
    }

    /// A staging directory for an upload, with the (normalised) clip written into it.
    pub(crate) fn stage(&self, clip: &Audio) -> Result<Staging, StoreError> {
        let staging = Staging::new(&self.dir)?;
        let path = staging.path().join(CLIP);
        let bytes =
            chatterbox_dsp::audio::wav_bytes(clip, WavFormat::Float32).map_err(|source| {
                StoreError::Clip {
                    path: path.clone(),
                    source,
                }
            })?;
        write_synced(&path, &bytes)?;
        Ok(staging)
    }

    /// Makes the staged upload (its clip and the conditionals of `models`) voice `name`,
    /// replacing the voice of that name (its clip and every model's conditionals) at once.
    pub(crate) fn commit(
        &self,
        name: &str,
        staging: Staging,
        models: &[ModelId],
    ) -> Result<Committed, StoreError> {
        // every file and the directory on disk before the version can become visible
        sync_file(&staging.path().join(CLIP))?;
        for m in models {
            sync_file(&staging.model_path(*m))?;
        }
        sync_dir(staging.path())?;
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let version = format!("{VERSION}{secs}-{}", staging.suffix());
        let lock = lock_library(&self.dir)?;
        let Staging {
            lock: staging_lock,
            dir,
        } = staging;
        let staged = dir.keep();
        // under the commit lock, which a start takes before it looks at staging directories:
        // the version gets no lock file
        drop(staging_lock);
        let unlocked = staged.join(STAGING_LOCK);
        let r = match fs::remove_file(&unlocked) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("remove", &unlocked)(e)),
            _ => self.commit_locked(name, &staged, &version),
        };
        if r.is_err() && !crashed(&r) {
            let _ = fs::remove_dir_all(&staged);
        }
        drop(lock);
        r
    }

    /// The steps of [`VoiceLibrary::commit`], under the commit lock.
    fn commit_locked(
        &self,
        name: &str,
        staged: &Path,
        version: &str,
    ) -> Result<Committed, StoreError> {
        let voice = self.voice_dir(name);
        step!(VoiceDir)?;
        match fs::create_dir(&voice) {
            Ok(()) => sync_dir(&self.dir)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && voice.is_dir() => {}
            Err(e) => return Err(io_err("create", &voice)(e)),
        }
        let replaced = matches!(read_current(&voice), Ok(Some(_)))
            || ModelId::ALL
                .into_iter()
                .any(|m| self.flat_path(name, m).is_file());
        step!(Version)?;
        let target = voice.join(version);
        fs::rename(staged, &target).map_err(io_err("move the upload to", &target))?;
        sync_dir(&voice)?;
        sync_dir(&self.dir)?;
        step!(Pointer)?;
        let tmp = voice.join(format!("{CURRENT_TMP}{version}"));
        write_synced(&tmp, format!("{version}\n").as_bytes())?;
        step!(Current)?;
        let current = voice.join(CURRENT);
        fs::rename(&tmp, &current).map_err(io_err("replace", &current))?;
        sync_dir(&voice)?;
        step!(Cleanup)?;
        // the new version is live: what it replaced goes
        remove_stale(&voice, version);
        self.remove_flat(name);
        Ok(Committed { replaced })
    }

    /// Removes the flat-layout files of voice `name` (a voice of the new layout replaced them).
    fn remove_flat(&self, name: &str) {
        for m in ModelId::ALL {
            let p = self.flat_path(name, m);
            match fs::remove_file(&p) {
                Ok(()) => {
                    tracing::info!(file = %p.display(), "removed a flat-layout voice file the voice's upload replaced")
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %p.display(), error = %e, "cannot remove a replaced voice file")
                }
            }
        }
    }
}

/// Removes from a voice directory the versions other than `keep` and temporary pointers
/// (what the library made; anything else is left alone).
fn remove_stale(voice: &Path, keep: &str) {
    let Ok(entries) = fs::read_dir(voice) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let path = entry.path();
        let r = if file.starts_with(VERSION) && file != keep && path.is_dir() {
            fs::remove_dir_all(&path)
        } else if file.starts_with(CURRENT_TMP) {
            fs::remove_file(&path)
        } else {
            continue;
        };
        if let Err(e) = r {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a stale voice file");
        }
    }
}

/// What a worker loads for a library voice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VoiceFile {
    /// Conditionals to load as they are.
    Ready(PathBuf),
    /// The model has no conditionals for the voice yet: they are derived from its clip.
    Derive(Derive),
}

/// A model's conditionals to derive from a voice's clip ([`derive`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Derive {
    /// The voice's clip.
    pub clip: PathBuf,
    /// Where the conditionals are stored (beside the clip).
    pub target: PathBuf,
    /// The model.
    pub model: ModelId,
}

/// What to load for `model` from the voice file `path` that [`VoiceLibrary::path`] gave: the
/// model's conditionals when stored, the clip to derive them from otherwise. When the version
/// `path` is in has gone (the voice was replaced since the request was read), the voice's
/// live version is used. Files not in a version (the flat layout) are loaded as they are.
pub(crate) fn voice_file(path: &Path, model: ModelId) -> VoiceFile {
    let ready = || VoiceFile::Ready(path.to_path_buf());
    let layered = path
        .file_name()
        .and_then(|f| f.to_str())
        .is_some_and(|f| f == CLIP || ModelId::ALL.iter().any(|m| f == model_file(*m)));
    let Some(version) = path.parent().filter(|_| layered) else {
        return ready();
    };
    let in_version = |version: &Path| {
        let target = version.join(model_file(model));
        if target.is_file() {
            return Some(VoiceFile::Ready(target));
        }
        let clip = version.join(CLIP);
        clip.is_file().then_some(VoiceFile::Derive(Derive {
            clip,
            target,
            model,
        }))
    };
    if let Some(f) = in_version(version) {
        return f;
    }
    let live = version
        .parent()
        .and_then(|voice| Some(voice.join(read_current(voice).ok()??)));
    live.and_then(|v| in_version(&v)).unwrap_or_else(ready)
}

/// Derives `d.model`'s conditionals from the voice's clip with `analyse` (which saves them to
/// the path it is given) and stores them beside the clip; returns where. Conditionals another
/// worker or server stored meanwhile are kept. [`StoreError::Gone`] when the version was
/// replaced or deleted meanwhile ([`voice_file`] then finds the live one).
pub(crate) fn derive(
    d: &Derive,
    analyse: &mut dyn FnMut(&Audio, &Path) -> Result<(), ModelError>,
) -> Result<PathBuf, DeriveError> {
    let (Some(version), Some(root)) = (
        d.target.parent(),
        d.clip
            .parent()
            .and_then(Path::parent)
            .and_then(Path::parent),
    ) else {
        return Err(StoreError::Gone.into());
    };
    if !d.clip.is_file() {
        return Err(StoreError::Gone.into());
    }
    let audio = chatterbox_dsp::audio::load(&d.clip).map_err(|source| StoreError::Clip {
        path: d.clip.clone(),
        source,
    })?;
    let staging = Staging::new(root)?;
    let staged = staging.model_path(d.model);
    analyse(&audio, &staged).map_err(DeriveError::Analysis)?;
    sync_file(&staged)?;
    let _lock = lock_library(root)?;
    if !version.is_dir() {
        return Err(StoreError::Gone.into());
    }
    if !d.target.exists() {
        fs::rename(&staged, &d.target).map_err(io_err("store", &d.target))?;
        sync_dir(version)?;
    }
    Ok(d.target.clone())
}

#[cfg(test)]
mod tests;
