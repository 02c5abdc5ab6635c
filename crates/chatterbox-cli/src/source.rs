//! Where the checkpoint comes from: `--model-dir`, or the Hugging Face hub (cargo feature `hub`).
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// A checkpoint's origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A directory in the hub layout.
    Dir(PathBuf),
    /// The hub repository (downloaded and cached on first use).
    Hub(&'static str),
}

impl Source {
    /// `--model-dir` when given (it must be a directory), else `repo` on the hub.
    pub fn resolve(model_dir: Option<&Path>, repo: &'static str) -> Result<Self> {
        match model_dir {
            Some(dir) => {
                if !dir.is_dir() {
                    bail!(
                        "--model-dir {}: no such directory (it should hold the checkpoint files, \
                         as downloaded from {repo})",
                        dir.display()
                    );
                }
                Ok(Self::Dir(dir.to_path_buf()))
            }
            None if cfg!(feature = "hub") => Ok(Self::Hub(repo)),
            None => bail!(
                "no --model-dir given, and this chatterbox was built without the `hub` cargo \
                 feature that downloads {repo}: pass --model-dir DIR, or rebuild with \
                 --features hub"
            ),
        }
    }

    /// How messages name it.
    pub fn describe(&self) -> String {
        match self {
            Self::Dir(d) => d.display().to_string(),
            Self::Hub(r) => format!("{r} (Hugging Face hub)"),
        }
    }
}

/// `--config`: a `ChatterboxConfig` JSON file.
pub fn read_config(path: &Path) -> Result<chatterbox_pipeline::ChatterboxConfig> {
    use anyhow::Context;
    chatterbox_pipeline::ChatterboxConfig::from_json_file(path).with_context(|| {
        format!(
            "--config {}: expected a ChatterboxConfig JSON (fields t3, ve, s3gen)",
            path.display()
        )
    })
}
