//! Linear layers (`nn.Linear`, GPT-2 `Conv1D`) loaded with typed shape checks, stored in the
//! layout each backend multiplies fastest, with fast paths for decode steps (CPU f32, CUDA bf16),
//! or quantized ([`Linear::quantized`]).
use super::gemv;
use super::quantized::QuantizedWeight;
use crate::weight_format::WeightFormat;
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
/// A quantized copy ([`Linear::quantized`]) keeps only the blocks, and the bias as it was.
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out, in]`, or `[in, out]` when `in_out`.
    weight: Stored,
    in_out: bool,
    bias: Option<Tensor>,
}

/// The weight of a [`Linear`]: a tensor (`[out, in]`, or `[in, out]` when `in_out`) or blocks.
#[derive(Debug, Clone)]
enum Stored {
    Dense(Tensor),
    Quantized(QuantizedWeight),
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
            weight: Stored::Dense(weight),
            in_out,
            bias,
        })
    }

    /// This layer with its weight in `format` (the bias unchanged), or a clone when the format
    /// is exact or does not fit the input width (not a multiple of its block). Quantized layers
    /// run on the CPU only.
    pub fn quantized(&self, format: WeightFormat) -> Result<Self> {
        if let Stored::Quantized(q) = &self.weight {
            // a quantized checkpoint asked for its own format: nothing to do
            if q.format() == format {
                return Ok(self.clone());
            }
            return Err(T3Error::InvalidConfig(format!(
                "T3's weights are already stored in {} (a quantized checkpoint, or quantized \
                 earlier); {format} needs the full-precision checkpoint",
                q.format()
            )));
        }
        Ok(match QuantizedWeight::new(&self.weight()?, format)? {
            Some(q) => Self {
                weight: Stored::Quantized(q),
                in_out: false,
                bias: self.bias.clone(),
            },
            None => self.clone(),
        })
    }

    /// A layer of blocks read from a quantized checkpoint, with its bias.
    pub(crate) fn from_quantized(weight: QuantizedWeight, bias: Option<Tensor>) -> Self {
        Self {
            weight: Stored::Quantized(weight),
            in_out: false,
            bias,
        }
    }

    /// The blocks of a quantized layer (`None` for a tensor).
    pub(crate) fn quantized_weight(&self) -> Option<&QuantizedWeight> {
        match &self.weight {
            Stored::Quantized(q) => Some(q),
            Stored::Dense(_) => None,
        }
    }

    /// `(out, in)`.
    pub(crate) fn dims(&self) -> (usize, usize) {
        match &self.weight {
            Stored::Dense(w) if self.in_out => (w.dims()[1], w.dims()[0]),
            Stored::Dense(w) => (w.dims()[0], w.dims()[1]),
            Stored::Quantized(q) => q.dims(),
        }
    }

    /// The format of the weight: [`WeightFormat::F32`] for a tensor (whatever its dtype).
    pub fn format(&self) -> WeightFormat {
        match &self.weight {
            Stored::Dense(_) => WeightFormat::F32,
            Stored::Quantized(q) => q.format(),
        }
    }

    /// Bytes of the stored weight (without the bias).
    pub fn weight_bytes(&self) -> usize {
        match &self.weight {
            Stored::Dense(w) => w.elem_count() * w.dtype().size_in_bytes(),
            Stored::Quantized(q) => q.bytes(),
        }
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

    /// The `[out, in]` weight (a transposed view when it is stored `[in, out]`; dequantized to
    /// f32 when it is quantized).
    pub fn weight(&self) -> Result<Tensor> {
        Ok(match &self.weight {
            Stored::Dense(w) if self.in_out => w.t()?,
            Stored::Dense(w) => w.clone(),
            // quantized weights live on the CPU
            Stored::Quantized(q) => q.dequantize(&candle_core::Device::Cpu)?,
        })
    }

    /// The weight's dtype (f32 for a quantized weight: what it multiplies in).
    pub fn dtype(&self) -> DType {
        match &self.weight {
            Stored::Dense(w) => w.dtype(),
            Stored::Quantized(_) => DType::F32,
        }
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        match &self.weight {
            Stored::Dense(w) => w.dims()[usize::from(self.in_out)],
            Stored::Quantized(q) => q.dims().0,
        }
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
        let weight = match &self.weight {
            Stored::Dense(w) => w,
            Stored::Quantized(q) => {
                let y = q.matmul_t(&x2)?;
                let y = match &self.bias {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                };
                return y.reshape(out);
            }
        };
        #[cfg(feature = "cuda")]
        if !self.in_out && super::cuda_gemv::applies(&x2, weight) {
            let y = super::cuda_gemv::gemv(&x2, weight, self.bias.as_ref())?;
            return y.reshape(out);
        }
        let y = if !self.in_out {
            x2.matmul(&weight.t()?)?
        } else if x.dtype() == DType::F32 && rows <= gemv::MAX_ROWS {
            gemv::small_gemv(&x2.contiguous()?, weight)?
        } else {
            x2.matmul(weight)?
        };
        let y = match &self.bias {
            #[cfg(feature = "cuda")]
            Some(b) if weight.device().is_cuda() => match super::cuda_prefill::bias_add(&y, b)? {
                Some(y) => y,
                None => y.broadcast_add(b)?,
            },
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        y.reshape(out)
    }
}
