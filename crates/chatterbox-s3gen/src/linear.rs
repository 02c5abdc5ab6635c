//! `torch.nn.Linear` on the last dimension, shared by the tokenizer and the flow, with the weight
//! kept in the layout each backend multiplies fastest.
//!
//! On the CPU in f32 the weight is stored transposed, `(in, out)` contiguous: candle's GEMM
//! (the `gemm` crate) reads that layout directly, while a transposed view of `(out, in)` is
//! repacked on every call. Measured on the 2-core AVX-512 dev box with cold weights: 150 x 5120
//! x 1280 (the tokenizer's `mlp.2`) 13.5 against 17.7 ms on one thread, 7.7 against 11.9 ms on
//! two. Elsewhere (CUDA, Metal, half precision) it stays `(out, in)`.
use candle_core::{DType, Module, Result, Tensor};
use candle_nn::{Init, VarBuilder};

/// `a @ b`, with bf16 on the CPU computed in f32 (candle's CPU GEMM has no bf16), rounded back
/// as a GPU bf16 GEMM with f32 accumulation does.
pub(crate) fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.dtype() == DType::BF16 && a.device().is_cpu() {
        a.to_dtype(DType::F32)?
            .matmul(&b.to_dtype(DType::F32)?)?
            .to_dtype(DType::BF16)
    } else {
        a.matmul(b)
    }
}

/// `torch.nn.Linear` on the last dimension.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    /// `(out, in)`, or `(in, out)` when `in_out`.
    weight: Tensor,
    in_out: bool,
    bias: Option<Tensor>,
}

impl Linear {
    /// Loads `weight` `(out, in)` and, with `bias`, `bias` `(out,)` under `vb` (with
    /// `nn.Linear`'s initialisation when `vb` creates variables).
    pub(crate) fn new(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get_with_hints(
            (out_dim, in_dim),
            "weight",
            candle_nn::init::DEFAULT_KAIMING_NORMAL,
        )?;
        let bias = if bias {
            let bound = 1.0 / (in_dim as f64).sqrt();
            Some(vb.get_with_hints(
                out_dim,
                "bias",
                Init::Uniform {
                    lo: -bound,
                    up: bound,
                },
            )?)
        } else {
            None
        };
        Self::from_weights(weight, bias)
    }

    /// A layer from an `(out, in)` weight (already loaded or rearranged).
    pub(crate) fn from_weights(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
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

    /// The `(out, in)` weight (a transposed view when it is stored `(in, out)`).
    pub(crate) fn weight(&self) -> Result<Tensor> {
        if self.in_out {
            self.weight.t()
        } else {
            Ok(self.weight.clone())
        }
    }

    /// The contiguous `(in, out)` weight, when the layer stores that layout (CPU, f32).
    pub(crate) fn weight_in_out(&self) -> Option<&Tensor> {
        self.in_out.then_some(&self.weight)
    }

    pub(crate) fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// `(out, in)`.
    fn dims(&self) -> Result<(usize, usize)> {
        let (a, b) = self.weight.dims2()?;
        Ok(if self.in_out { (b, a) } else { (a, b) })
    }

    /// `x @ weight^T` without the bias (for a fused bias + activation / residual after it).
    pub(crate) fn forward_no_bias(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let (out_dim, in_dim) = self.dims()?;
        let rows = x.elem_count() / in_dim.max(1);
        let x2 = if x.is_contiguous() {
            x.reshape((rows, in_dim))?
        } else {
            x.contiguous()?.reshape((rows, in_dim))?
        };
        let y = if self.in_out {
            x2.matmul(&self.weight)?
        } else {
            matmul(&x2, &self.weight.t()?)?
        };
        let mut out_dims = dims;
        if let Some(last) = out_dims.last_mut() {
            *last = out_dim;
        }
        y.reshape(out_dims)
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.forward_no_bias(x)?;
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;
    use candle_core::Device;

    #[test]
    fn both_layouts_compute_x_wt_plus_b() -> Result<()> {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1., (5, 7), &dev)?;
        let b = Tensor::randn(0f32, 1., 5, &dev)?;
        let x = Tensor::randn(0f32, 1., (2, 3, 7), &dev)?;
        let want = x
            .reshape((6, 7))?
            .matmul(&w.t()?)?
            .broadcast_add(&b)?
            .reshape((2, 3, 5))?;
        // f32 on the CPU: stored (in, out)
        let f32_layer = Linear::from_weights(w.clone(), Some(b.clone()))?;
        assert_eq!(
            f32_layer.weight_in_out().map(|t| t.dims().to_vec()),
            Some(vec![7, 5])
        );
        assert_eq!(f32_layer.weight()?.dims(), &[5, 7]);
        let err = (f32_layer.forward(&x)? - &want)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert_abs_diff_eq!(err, 0.0, epsilon = 1e-5);
        // f64 keeps (out, in)
        let f64_layer =
            Linear::from_weights(w.to_dtype(DType::F64)?, Some(b.to_dtype(DType::F64)?))?;
        assert!(f64_layer.weight_in_out().is_none());
        let got = f64_layer
            .forward(&x.to_dtype(DType::F64)?)?
            .to_dtype(DType::F32)?;
        let err = (got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert_abs_diff_eq!(err, 0.0, epsilon = 1e-5);
        Ok(())
    }
}
