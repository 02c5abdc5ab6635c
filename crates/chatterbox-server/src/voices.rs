//! The voice library on disk: one safetensors file of conditionals per voice and model,
//! `DIR/<name>.<model>.safetensors`. Names are `[A-Za-z0-9_-]{1,64}`, so no name reaches
//! outside the directory. Uploads are analysed into a staging directory and renamed into
//! place when every model has its file: a crash never leaves half a voice.
use crate::error::ServerError;
use crate::model::ModelId;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// Extension of voice files.
const EXT: &str = "safetensors";
/// Prefix of staging directories (removed at start-up if a crash left one).
const STAGING: &str = ".upload-";

/// Whether `name` is a valid voice name: 1 to 64 of `A-Z a-z 0-9 _ -`.
pub fn valid_voice_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The voice directory.
#[derive(Debug, Clone)]
pub struct VoiceLibrary {
    dir: PathBuf,
}

impl VoiceLibrary {
    /// Opens (creating it if needed) the library in `dir`, removing staging directories a
    /// crash left behind.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, ServerError> {
        let dir = dir.into();
        let err = |source| ServerError::Voices {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(err)?;
        for entry in std::fs::read_dir(&dir).map_err(err)? {
            let entry = entry.map_err(err)?;
            if entry.file_name().to_string_lossy().starts_with(STAGING) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        Ok(Self { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of voice `name` for `model` (`name` must be valid).
    pub fn path(&self, name: &str, model: ModelId) -> PathBuf {
        self.dir.join(format!("{name}.{}.{EXT}", model.name()))
    }

    /// The voices and the models each has a file for, by name.
    pub fn list(&self) -> io::Result<BTreeMap<String, Vec<ModelId>>> {
        let mut out: BTreeMap<String, Vec<ModelId>> = BTreeMap::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let file = entry?.file_name();
            let Some(file) = file.to_str() else { continue };
            let Some(stem) = file.strip_suffix(&format!(".{EXT}")) else {
                continue;
            };
            let Some((name, model)) = stem.split_once('.') else {
                continue;
            };
            if let (true, Some(m)) = (valid_voice_name(name), ModelId::from_name(model)) {
                out.entry(name.to_string()).or_default().push(m);
            }
        }
        for models in out.values_mut() {
            models.sort();
        }
        Ok(out)
    }

    /// Deletes voice `name` (every model's file); whether it existed.
    pub fn delete(&self, name: &str) -> io::Result<bool> {
        let mut found = false;
        for m in ModelId::ALL {
            match std::fs::remove_file(self.path(name, m)) {
                Ok(()) => found = true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    /// A fresh staging directory for an upload.
    pub(crate) fn staging(&self) -> io::Result<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix(STAGING)
            .tempdir_in(&self.dir)
    }

    /// Moves the staged files of voice `name` into place (each rename is atomic), replacing
    /// the files of models not in `models` as well (removed), so the voice is all new.
    pub(crate) fn commit(&self, name: &str, staged: &Path, models: &[ModelId]) -> io::Result<()> {
        for m in models {
            std::fs::rename(
                staged.join(format!("{}.{EXT}", m.name())),
                self.path(name, *m),
            )?;
        }
        for m in ModelId::ALL.iter().filter(|m| !models.contains(m)) {
            match std::fs::remove_file(self.path(name, *m)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// The staged file of `model` in a staging directory.
    pub(crate) fn staged_path(staged: &Path, model: ModelId) -> PathBuf {
        staged.join(format!("{}.{EXT}", model.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "Bob_2", "x-y", &"z".repeat(64)] {
            assert!(valid_voice_name(ok), "{ok}");
        }
        for bad in ["", "../x", "a.b", "a/b", "é", " a", &"z".repeat(65), "a\0"] {
            assert!(!valid_voice_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn list_and_delete() {
        let tmp = tempfile::tempdir().unwrap();
        let lib = VoiceLibrary::open(tmp.path()).unwrap();
        std::fs::write(lib.path("amy", ModelId::English), b"x").unwrap();
        std::fs::write(lib.path("amy", ModelId::Turbo), b"x").unwrap();
        std::fs::write(tmp.path().join("junk.txt"), b"x").unwrap();
        let l = lib.list().unwrap();
        assert_eq!(l["amy"], vec![ModelId::English, ModelId::Turbo]);
        assert_eq!(l.len(), 1);
        assert!(lib.delete("amy").unwrap());
        assert!(!lib.delete("amy").unwrap());
        assert!(lib.list().unwrap().is_empty());
    }
}
