//! Linear layers (`nn.Linear`, GPT-2 `Conv1D`) loaded with typed shape checks, stored in the
//! layout each backend multiplies fastest, with fast paths for decode steps (CPU f32, CUDA bf16).
use super::gemv;
use crate::{Result, T3Error};
use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

/// Loads `name` under `vb` and checks its shape, so a checkpoint of another variant is a typed
/// error naming the key. Builders without stored shapes (zeros, a `VarMap`) get `shape`.
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
    let t = match vb.get_unchecked(name) {
        Ok(t) => t,
        // builders that make tensors to order (`VarBuilder::zeros`, a `VarMap`) need the shape
        Err(_) => vb.get(shape, name)?,
    };
    if t.dims() != shape {
        return Err(T3Error::ShapeMismatch {
            key,
            expected: shape.to_vec(),
            actual: t.dims().to_vec(),
        });
    }
    Ok(t)
}

/// `y = x Wᵀ + b` for a `[out, in]` weight `W`.
///
/// On the CPU in f32 the weight is kept transposed (`[in, out]`, contiguous): candle's GEMM
/// reads that layout 1.2-1.8x faster than a transposed view of `[out, in]` at prefill sizes on
/// the 2-core AVX-512 dev box (e.g. 196 x 4096 x 1024 at 2 threads: 6.0 against 10.6 ms), and
/// the decode-step kernel streams it at memory bandwidth. Elsewhere it is kept `[out, in]`.
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out, in]`, or `[in, out]` when `in_out`.
    weight: Tensor,
    in_out: bool,
    bias: Option<Tensor>,
}

impl Linear {
    /// Wraps a `[out, in]` weight and an optional `[out]` bias.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        let in_out = weight.device().is_cpu() && weight.dtype() == DType::F32;
        let weight = if in_out {
            weight.t()?.contiguous()?
        } else {
            weight.contiguous()?
        };
        Ok(Self {
            weight,
            in_out,
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

    /// The `[out, in]` weight (a transposed view when it is stored `[in, out]`).
    pub fn weight(&self) -> Result<Tensor> {
        Ok(if self.in_out {
            self.weight.t()?
        } else {
            self.weight.clone()
        })
    }

    /// The weight's dtype.
    pub fn dtype(&self) -> DType {
        self.weight.dtype()
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.weight.dims()[usize::from(self.in_out)]
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
        let mut out = lead.to_vec();
        out.push(self.out_dim());
        #[cfg(feature = "cuda")]
        if !self.in_out && super::cuda_gemv::applies(&x2, &self.weight) {
            let y = super::cuda_gemv::gemv(&x2, &self.weight, self.bias.as_ref())?;
            return y.reshape(out);
        }
        let y = if !self.in_out {
            x2.matmul(&self.weight.t()?)?
        } else if x.dtype() == DType::F32 && rows <= gemv::MAX_ROWS {
            gemv::small_gemv(&x2.contiguous()?, &self.weight)?
        } else {
            x2.matmul(&self.weight)?
        };
        let y = match &self.bias {
            #[cfg(feature = "cuda")]
            Some(b) if self.weight.device().is_cuda() => {
                match super::cuda_prefill::bias_add(&y, b)? {
                    Some(y) => y,
                    None => y.broadcast_add(b)?,
                }
            }
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        y.reshape(out)
    }
}
