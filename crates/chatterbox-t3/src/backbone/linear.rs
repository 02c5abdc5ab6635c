//! Linear layers in `nn.Linear` layout (`[out, in]`), loaded from `nn.Linear` or GPT-2 `Conv1D`
//! (`[in, out]`) weights with typed shape checks, and fast paths for decode steps (CPU f32,
//! CUDA bf16).
use super::{gemm_nt, gemv};
use crate::{Result, T3Error};
use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

/// Loads `name` under `vb` and checks its shape, so a checkpoint of another variant is a typed
/// error naming the key.
pub(crate) fn weight(vb: &VarBuilder, shape: &[usize], name: &str) -> Result<Tensor> {
    let prefix = vb.prefix();
    let key = if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    };
    if !vb.contains_tensor(name) {
        return Err(T3Error::MissingWeight { key });
    }
    let t = vb.get_unchecked(name)?;
    if t.dims() != shape {
        return Err(T3Error::ShapeMismatch {
            key,
            expected: shape.to_vec(),
            actual: t.dims().to_vec(),
        });
    }
    Ok(t)
}

/// `y = x Wᵀ + b` with `W` stored `[out, in]` (contiguous).
#[derive(Debug, Clone)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// Wraps a `[out, in]` weight and an optional `[out]` bias.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        Ok(Self {
            weight: weight.contiguous()?,
            bias,
        })
    }

    /// An `nn.Linear(in_dim, out_dim, bias)` (`weight`, `bias` under `vb`).
    pub fn load(vb: VarBuilder, in_dim: usize, out_dim: usize, bias: bool) -> Result<Self> {
        let w = weight(&vb, &[out_dim, in_dim], "weight")?;
        let b = if bias {
            Some(weight(&vb, &[out_dim], "bias")?)
        } else {
            None
        };
        Self::new(w, b)
    }

    /// A GPT-2 `Conv1D(out_dim, in_dim)`: weight stored `[in, out]`, transposed here.
    pub fn load_conv1d(vb: VarBuilder, in_dim: usize, out_dim: usize) -> Result<Self> {
        let w = weight(&vb, &[in_dim, out_dim], "weight")?.t()?;
        let b = weight(&vb, &[out_dim], "bias")?;
        Self::new(w, Some(b))
    }

    /// The `[out, in]` weight.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.weight.dims()[0]
    }
}

impl candle_nn::Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dims = x.dims();
        let Some((&k, lead)) = dims.split_last() else {
            candle_core::bail!("linear: scalar input")
        };
        let rows: usize = lead.iter().product();
        let x2 = x.reshape((rows, k))?;
        #[cfg(feature = "cuda")]
        if super::cuda_gemv::applies(&x2, &self.weight) {
            let y = super::cuda_gemv::gemv(&x2, &self.weight, self.bias.as_ref())?;
            let mut out = lead.to_vec();
            out.push(self.weight.dims()[0]);
            return y.reshape(out);
        }
        let cpu_f32 = x.device().is_cpu() && x.dtype() == DType::F32;
        let y = if cpu_f32 && rows <= gemv::MAX_ROWS {
            gemv::small_gemv(&x2.contiguous()?, &self.weight)?
        } else if cpu_f32 && rows <= gemm_nt::MAX_ROWS && gemm_nt::available() {
            gemm_nt::matmul_nt(&x2.contiguous()?, &self.weight)?
        } else {
            x2.matmul(&self.weight.t()?)?
        };
        let y = match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        let mut out = lead.to_vec();
        out.push(self.weight.dims()[0]);
        y.reshape(out)
    }
}
