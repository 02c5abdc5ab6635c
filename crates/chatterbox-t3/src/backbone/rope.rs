//! Rotary position tables of transformers' `LlamaRotaryEmbedding` with the `llama3` frequency
//! scaling (`_compute_llama3_parameters` in `modeling_rope_utils.py`, transformers 5.2).
use crate::config::LlamaConfig;
use crate::Result;
use candle_core::{DType, Device, Tensor};

/// `inv_freq` as transformers computes it, in f32 with the same operation order.
pub fn llama3_inv_freq(cfg: &LlamaConfig) -> Vec<f32> {
    let dim = cfg.head_dim;
    let base = cfg.rope_theta as f32;
    let inv: Vec<f32> = (0..dim)
        .step_by(2)
        .map(|i| 1.0 / base.powf(i as f32 / dim as f32))
        .collect();
    let Some(s) = &cfg.rope_scaling else {
        return inv;
    };
    let factor = s.factor as f32;
    let low = s.low_freq_factor as f32;
    let high = s.high_freq_factor as f32;
    let old = s.original_max_position_embeddings as f32;
    let low_wavelen = old / low;
    let high_wavelen = old / high;
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    inv.iter()
        .map(|&f| {
            let wavelen = two_pi / f;
            let scaled = if wavelen > low_wavelen { f / factor } else { f };
            let smooth = (old / wavelen - low) / (high - low);
            let smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled;
            let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
            if medium {
                smoothed
            } else {
                scaled
            }
        })
        .collect()
}

/// `cos`/`sin` tables `[positions, head_dim / 2]` (the halves transformers concatenates).
#[derive(Debug, Clone)]
pub struct RotaryTables {
    /// `cos(pos * inv_freq)`.
    pub cos: Tensor,
    /// `sin(pos * inv_freq)`.
    pub sin: Tensor,
}

impl RotaryTables {
    /// Tables for positions `0..positions`, in `dtype` (computed in f32).
    pub fn new(cfg: &LlamaConfig, positions: usize, dtype: DType, dev: &Device) -> Result<Self> {
        let inv = llama3_inv_freq(cfg);
        let half = inv.len();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for p in 0..positions {
            for &f in &inv {
                let a = p as f32 * f;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        Ok(Self {
            cos: Tensor::from_vec(cos, (positions, half), dev)?.to_dtype(dtype)?,
            sin: Tensor::from_vec(sin, (positions, half), dev)?.to_dtype(dtype)?,
        })
    }

    /// Rows `start..start + len` (host offsets: prefill).
    pub fn range(&self, start: usize, len: usize) -> Result<(Tensor, Tensor)> {
        Ok((
            self.cos.narrow(0, start, len)?,
            self.sin.narrow(0, start, len)?,
        ))
    }

    /// The rows at device-side positions `pos` (u32 `[n]`): capturable.
    pub fn at(&self, pos: &Tensor) -> Result<(Tensor, Tensor)> {
        Ok((
            self.cos.index_select(pos, 0)?,
            self.sin.index_select(pos, 0)?,
        ))
    }

    /// Rows in the table.
    pub fn positions(&self) -> usize {
        self.cos.dims()[0]
    }
}
