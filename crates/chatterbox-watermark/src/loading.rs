//! Loading PerthNet's weights: perth/perth_net/perth_net_implicit/checkpoint_manager.py saves
//! `torch.save({"model": state_dict, "step": step}, "perth_net_{step:06d}.pth.tar")`, a torch
//! zip archive despite the `.tar` name; this reads its `model` entry with candle's pickle
//! reader (no Python), or a safetensors file holding the same state dict keys. The format is
//! told by the file's first bytes, not its name.
use crate::{PerthConfig, PerthNet, Result, WatermarkError};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The resemble-perth 1.0.1 wheel on the Python package index, which ships the pretrained
/// model (MIT licence, Resemble AI). The pipeline fetches it; this crate has no network code.
pub const PERTH_WHEEL_URL: &str = "https://files.pythonhosted.org/packages/77/cc/\
73226dd776f8e9c2975f64f4efc22988fb37e5b185ba5cccd6f2e7196954/resemble_perth-1.0.1-py3-none-any.whl";
/// SHA-256 of the wheel at [`PERTH_WHEEL_URL`] (34 404 578 bytes).
pub const PERTH_WHEEL_SHA256: &str =
    "65e9c37531b1a128a4a56226b75dece4521683cf3611b0b2a5ffe234f00c9342";
/// The checkpoint's path inside the wheel (a zip archive).
pub const PERTH_CHECKPOINT_IN_WHEEL: &str =
    "perth/perth_net/pretrained/implicit/perth_net_250000.pth.tar";
/// The checkpoint's file name.
pub const PERTH_CHECKPOINT_FILE: &str = "perth_net_250000.pth.tar";
/// SHA-256 of the checkpoint (37 429 684 bytes; the wheel's RECORD lists the same digest).
pub const PERTH_CHECKPOINT_SHA256: &str =
    "a15bce457ebc53ce5e6c9c3f11df78cf7ee2bf9cdab0a798902135b4c4027670";

/// The entry of the checkpoint dict that holds the state dict.
const STATE_DICT_KEY: &str = "model";

fn corrupt(path: &Path, reason: impl std::fmt::Display) -> WatermarkError {
    WatermarkError::CorruptCheckpoint {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// Reads every tensor of a Perth checkpoint: a torch zip (`.pth.tar`, the dict's `model`
/// entry, or a bare state dict) or a safetensors file, told apart by their first bytes.
pub fn load_state_dict(path: impl AsRef<Path>) -> Result<HashMap<String, Tensor>> {
    let path = path.as_ref();
    let mut head = [0u8; 9];
    let n = match std::fs::File::open(path) {
        Ok(mut f) => f.read(&mut head).map_err(|e| corrupt(path, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(WatermarkError::CheckpointNotFound {
                path: PathBuf::from(path),
            })
        }
        Err(e) => return Err(corrupt(path, e)),
    };
    let head = &head[..n];
    if head.starts_with(b"PK\x03\x04") {
        let with_key = candle_core::pickle::read_all_with_key(path, Some(STATE_DICT_KEY));
        let tensors = match with_key {
            Ok(t) if !t.is_empty() => t,
            // a bare state dict saved without the {"model": ..., "step": ...} wrapper
            _ => {
                candle_core::pickle::read_all_with_key(path, None).map_err(|e| corrupt(path, e))?
            }
        };
        if tensors.is_empty() {
            return Err(corrupt(
                path,
                "torch archive holds no tensors (expected a state dict, or one under \"model\")",
            ));
        }
        Ok(tensors.into_iter().collect())
    } else if head.len() == 9 && head[8] == b'{' {
        candle_core::safetensors::load(path, &Device::Cpu).map_err(|e| corrupt(path, e))
    } else {
        Err(corrupt(
            path,
            "neither a torch zip checkpoint (.pth.tar) nor a safetensors file",
        ))
    }
}

impl PerthNet {
    /// Builds the network of `cfg` from a state dict, checking every weight's presence and
    /// shape first (errors name the key). Extra entries (`ap.*` buffers) are ignored.
    pub fn from_state_dict(
        cfg: &PerthConfig,
        mut tensors: HashMap<String, Tensor>,
        device: &Device,
    ) -> Result<Self> {
        cfg.validate()?;
        let mut weights = HashMap::new();
        for (key, expected) in Self::weight_shapes(cfg) {
            let t = tensors
                .remove(&key)
                .ok_or_else(|| WatermarkError::MissingWeight { key: key.clone() })?;
            if t.dims() != expected.as_slice() {
                return Err(WatermarkError::ShapeMismatch {
                    key,
                    expected,
                    actual: t.dims().to_vec(),
                });
            }
            let t = t.to_dtype(DType::F32)?.to_device(device)?;
            weights.insert(key, t);
        }
        Self::new(cfg, VarBuilder::from_tensors(weights, DType::F32, device))
    }

    /// Loads `cfg`'s network from a checkpoint file ([`load_state_dict`]).
    pub fn load(path: impl AsRef<Path>, cfg: &PerthConfig, device: &Device) -> Result<Self> {
        Self::from_state_dict(cfg, load_state_dict(path)?, device)
    }
}
