//! Reading parity fixtures: `<root>/<component>/<case>.safetensors` plus `<case>.json`.
use crate::{Array, Error, Result, Tolerance};
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The JSON sidecar of a fixture.
#[derive(Debug, Clone, Deserialize)]
pub struct Meta {
    /// Component the case belongs to (`dsp`, `speaker`, ...).
    pub component: String,
    /// Case name, unique within the component.
    pub case: String,
    /// Which Rust handler runs the case (several cases can share a kind).
    pub kind: String,
    /// Seed the recorder used, if any.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Free-form configuration the handler reads (the reference's arguments).
    #[serde(default)]
    pub config: serde_json::Value,
    /// Expected outputs (`out.<name>` tensors) and their tolerances.
    pub tolerances: BTreeMap<String, Tolerance>,
    /// Versions of what recorded the case.
    #[serde(default)]
    pub reference: serde_json::Value,
}

/// One recorded case: its sidecar and its tensors.
#[derive(Debug)]
pub struct Fixture {
    /// The sidecar.
    pub meta: Meta,
    path: PathBuf,
    bytes: Vec<u8>,
}

/// Where fixtures are read from: `$CHATTERBOX_FIXTURES`, else the committed `parity/fixtures`.
pub fn fixtures_root() -> PathBuf {
    match std::env::var_os("CHATTERBOX_FIXTURES") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => committed_fixtures_root(),
    }
}

/// The committed `parity/fixtures`, whatever `$CHATTERBOX_FIXTURES` says: for tests that only
/// borrow a fixture's weights or inputs (error paths, API checks), so that they keep working
/// when `cargo xtask parity --fixtures DIR` points the parity cases at a partial recording.
pub fn committed_fixtures_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../parity/fixtures")
}

/// The file `rel` in the site-packages of the reference's venv (`parity/.venv`), where a
/// package installed there ships it (Perth's pretrained weights); `None` without the venv or
/// the file.
pub fn reference_venv_file(rel: &str) -> Option<PathBuf> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../parity/.venv/lib");
    std::fs::read_dir(lib).ok()?.find_map(|e| {
        let p = e.ok()?.path().join("site-packages").join(rel);
        p.is_file().then_some(p)
    })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Fixture {
    /// Loads `<dir>/<case>.json` and `<dir>/<case>.safetensors`.
    pub fn load(json_path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(json_path).map_err(io(json_path))?;
        let meta: Meta = serde_json::from_str(&text).map_err(|source| Error::Json {
            path: json_path.to_path_buf(),
            source,
        })?;
        let path = json_path.with_extension("safetensors");
        let bytes = std::fs::read(&path).map_err(io(&path))?;
        SafeTensors::deserialize(&bytes).map_err(|e| Error::SafeTensors {
            path: path.clone(),
            message: e.to_string(),
        })?;
        Ok(Self { meta, path, bytes })
    }

    /// Every fixture of `component` under `root`, sorted by case name. A missing folder is an
    /// empty list (the suite reports the missing cases).
    pub fn discover(root: &Path, component: &str) -> Result<Vec<Self>> {
        let dir = root.join(component);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(Vec::new());
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths.iter().map(|p| Self::load(p)).collect()
    }

    /// Path of the safetensors file (for `VarBuilder::from_mmaped_safetensors`).
    pub fn safetensors_path(&self) -> &Path {
        &self.path
    }

    /// A file the fixture names (`rel`), beside the fixture's files.
    pub fn asset(&self, rel: &str) -> PathBuf {
        self.path
            .parent()
            .map(|d| d.join(rel))
            .unwrap_or_else(|| PathBuf::from(rel))
    }

    /// The parsed safetensors payload.
    pub fn tensors(&self) -> SafeTensors<'_> {
        // Validated in `load`.
        SafeTensors::deserialize(&self.bytes).unwrap_or_else(|e| unreachable!("{e}"))
    }

    /// Names of all tensors in the fixture.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .tensors()
            .names()
            .into_iter()
            .map(|s| s.to_string())
            .collect();
        names.sort();
        names
    }

    fn view(&self, name: &str) -> Result<(Dtype, Vec<usize>, Vec<u8>)> {
        let st = self.tensors();
        let v = st.tensor(name).map_err(|_| Error::MissingTensor {
            case: self.meta.case.clone(),
            name: name.to_string(),
        })?;
        Ok((v.dtype(), v.shape().to_vec(), v.data().to_vec()))
    }

    fn dtype_err(&self, name: &str, dtype: Dtype, expected: &'static str) -> Error {
        Error::Dtype {
            case: self.meta.case.clone(),
            name: name.to_string(),
            dtype: format!("{dtype:?}"),
            expected,
        }
    }

    /// A float tensor (stored as F32 or F64) by full name.
    pub fn f32(&self, name: &str) -> Result<Array<f32>> {
        let (dtype, shape, data) = self.view(name)?;
        let data = match dtype {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F64 => data
                .chunks_exact(8)
                .map(|b| {
                    f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32
                })
                .collect(),
            d => return Err(self.dtype_err(name, d, "F32 or F64")),
        };
        Ok(Array { shape, data })
    }

    /// An integer tensor (stored as I64, I32 or U8/Bool) by full name.
    pub fn i64(&self, name: &str) -> Result<Array<i64>> {
        let (dtype, shape, data) = self.view(name)?;
        let data = match dtype {
            Dtype::I64 => data
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect(),
            Dtype::I32 => data
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64)
                .collect(),
            Dtype::U8 | Dtype::BOOL => data.iter().map(|&b| b as i64).collect(),
            d => return Err(self.dtype_err(name, d, "I64, I32, U8 or BOOL")),
        };
        Ok(Array { shape, data })
    }

    /// The input tensor `in.<name>` as f32.
    pub fn input(&self, name: &str) -> Result<Array<f32>> {
        self.f32(&format!("in.{name}"))
    }

    /// The integer input tensor `in.<name>`.
    pub fn input_i64(&self, name: &str) -> Result<Array<i64>> {
        self.i64(&format!("in.{name}"))
    }

    /// A config field, deserialised.
    pub fn config<T: serde::de::DeserializeOwned>(&self, field: &str) -> Result<T> {
        let v = self.meta.config.get(field).ok_or_else(|| Error::Config {
            case: self.meta.case.clone(),
            field: field.to_string(),
            message: "missing".into(),
        })?;
        serde_json::from_value(v.clone()).map_err(|e| Error::Config {
            case: self.meta.case.clone(),
            field: field.to_string(),
            message: e.to_string(),
        })
    }

    /// A config field, or `default` when absent.
    pub fn config_or<T: serde::de::DeserializeOwned>(&self, field: &str, default: T) -> Result<T> {
        if self.meta.config.get(field).is_none() {
            return Ok(default);
        }
        self.config(field)
    }
}
