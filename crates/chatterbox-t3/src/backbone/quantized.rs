//! A projection weight in one of candle's block formats (GGUF `Q8_0`, `Q4_K`, or bf16), and its
//! product with f32 activations.
//!
//! The product is candle's quantized matmul (`QTensor` as a custom op): on x86 it repacks the
//! blocks once, on first use, into tiles for its AVX-512 VNNI, AVX-VNNI or AVX2 kernels when the
//! CPU has them and the shapes allow (input width a multiple of 256, output width of 16), and
//! otherwise runs its per-block vector dot products, both chosen at run time. It quantizes the
//! activations to 8 bits per block for the int8 formats, so the result differs from the f32
//! product by the weights' and the activations' rounding.
use crate::weight_format::WeightFormat;
use crate::{Result, T3Error};
use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor};
use std::sync::Arc;

/// A `[out, in]` weight stored in a block format.
#[derive(Debug, Clone)]
pub(crate) struct QuantizedWeight {
    q: Arc<QTensor>,
    format: WeightFormat,
}

impl QuantizedWeight {
    /// Quantizes a `[out, in]` weight (any float dtype, on the CPU). `None` for
    /// [`WeightFormat::F32`] or an input width that is not a multiple of the format's block.
    pub(crate) fn new(weight: &Tensor, format: WeightFormat) -> Result<Option<Self>> {
        let Some(dtype) = format.ggml_dtype() else {
            return Ok(None);
        };
        check_runs_on(format, weight.device())?;
        let (_, k) = weight.dims2()?;
        if k % format.block_size() != 0 {
            return Ok(None);
        }
        let w = weight.to_dtype(DType::F32)?.contiguous()?;
        Ok(Some(Self {
            q: Arc::new(QTensor::quantize(&w, dtype)?),
            format,
        }))
    }

    /// Blocks read from a quantized checkpoint: a `[out, in]` tensor of `format`'s block type
    /// whose input width is a whole number of blocks, refused where the CPU cannot run it (as
    /// [`QuantizedWeight::new`] refuses to make it).
    pub(crate) fn from_blocks(q: QTensor, format: WeightFormat) -> Result<Self> {
        check_runs_on(format, &Device::Cpu)?;
        let bad = |why: String| {
            Err(T3Error::InvalidConfig(format!(
                "stored {format} weight: {why}"
            )))
        };
        if format.ggml_dtype() != Some(q.dtype()) {
            return bad(format!("blocks of type {:?}", q.dtype()));
        }
        match q.shape().dims() {
            [_, k] if k % format.block_size() == 0 => {}
            d => return bad(format!("shape {d:?}, expected [out, in] whole blocks")),
        }
        Ok(Self {
            q: Arc::new(q),
            format,
        })
    }

    /// The stored blocks (what a quantized checkpoint writes).
    pub(crate) fn blocks(&self) -> &QTensor {
        &self.q
    }

    /// The format.
    pub(crate) fn format(&self) -> WeightFormat {
        self.format
    }

    /// `[out, in]`.
    pub(crate) fn dims(&self) -> (usize, usize) {
        let d = self.q.shape().dims();
        (d[0], d[1])
    }

    /// Bytes of the stored blocks.
    pub(crate) fn bytes(&self) -> usize {
        self.q.storage_size_in_bytes()
    }

    /// The weight back in f32, `[out, in]` (what the product effectively multiplies by, up to
    /// the activations' rounding).
    pub(crate) fn dequantize(&self, device: &Device) -> Result<Tensor> {
        Ok(self.q.dequantize(device)?)
    }

    /// `x [rows, in] -> [rows, out]` in `x`'s dtype (f32 on the CPU).
    pub(crate) fn matmul_t(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.contiguous()?.apply_op1_no_bwd(self.q.as_ref())
    }
}

/// Quantized weights live on the CPU, and on aarch64 only where candle's kernels can run.
fn check_runs_on(format: WeightFormat, device: &Device) -> Result<()> {
    if !device.is_cpu() {
        return Err(T3Error::InvalidConfig(format!(
            "{format} weights run on the CPU only (on a GPU use the model's dtype, e.g. bf16)"
        )));
    }
    if !cpu_runs(format) {
        return Err(T3Error::InvalidConfig(format!(
            "{format} weights need an ARM CPU with the dot-product instructions (dotprod: \
             Cortex-A55/A76, Neoverse, Graviton 2 and later); candle's {format} kernels \
             would stop this one with an illegal instruction"
        )));
    }
    Ok(())
}

/// Whether this CPU can run candle's kernels for `format`: on aarch64 its 8- and 4-bit kernels
/// use the dot-product instructions without checking for them (SIGILL on Armv8.0 cores such as
/// the Cortex-A72); elsewhere candle picks its kernels from the CPU's features.
fn cpu_runs(format: WeightFormat) -> bool {
    #[cfg(target_arch = "aarch64")]
    if matches!(format, WeightFormat::Q8 | WeightFormat::Q4) {
        return std::arch::is_aarch64_feature_detected!("dotprod");
    }
    let _ = format;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_abs(t: Tensor) -> Result<f32> {
        Ok(t.abs()?.max_all()?.to_scalar::<f32>()?)
    }

    /// A `dims` tensor of N(0, std) values drawn from stream `k` (Box-Muller on testkit's
    /// seeded uniforms): the same values on every run, so the measured errors below hold.
    fn normals(k: usize, std: f32, dims: (usize, usize)) -> Result<Tensor> {
        let n = dims.0 * dims.1;
        let values: Vec<f32> = (0..n)
            .map(|i| {
                let a = (1.0 - chatterbox_testkit::uniform(k, 2 * i)) / 2.0; // (0, 1]
                let b = chatterbox_testkit::uniform(k, 2 * i + 1) * std::f32::consts::PI;
                std * (-2.0 * a.ln()).sqrt() * b.cos()
            })
            .collect();
        Ok(Tensor::from_vec(values, dims, &Device::Cpu)?)
    }

    /// The product equals the dequantized weight's f32 product up to the activations' 8-bit
    /// rounding, and the dequantized weight is within the format's step of the original.
    #[test]
    fn products_match_the_dequantized_weight() -> Result<()> {
        let dev = Device::Cpu;
        let (n, k) = (48, 512);
        let w = normals(1, 0.02, (n, k))?;
        let x = normals(2, 1.0, (3, k))?;
        let exact = x.matmul(&w.t()?)?;
        let scale = max_abs(exact.clone())?;
        // measured on these values (largest weight error; largest product error over the
        // largest product): q8 3.4e-4, 0.81 %; q4 4.8e-3, 8.2 %; bf16 2.3e-4, 0.23 % (with
        // unseeded draws q4's weight error once reached 6.09e-3, past its bound)
        for (format, weight_tol, product_tol) in [
            (WeightFormat::Q8, 5e-4, 0.02),
            (WeightFormat::Q4, 6e-3, 0.15),
            (WeightFormat::Bf16, 4e-4, 0.005),
        ] {
            let q = QuantizedWeight::new(&w, format)?
                .ok_or_else(|| T3Error::InvalidConfig(format!("{format} refused {k}")))?;
            assert_eq!(q.dims(), (n, k));
            let werr = max_abs((q.dequantize(&dev)? - &w)?)?;
            assert!(werr < weight_tol, "{format}: weight error {werr}");
            let y = q.matmul_t(&x)?;
            assert_eq!(y.dims(), &[3, n]);
            let perr = max_abs((y - &exact)?)? / scale;
            assert!(perr < product_tol, "{format}: product error {perr}");
        }
        Ok(())
    }

    #[test]
    fn odd_widths_and_the_exact_format_are_left_alone() -> Result<()> {
        let w = Tensor::zeros((16, 48), DType::F32, &Device::Cpu)?;
        assert!(QuantizedWeight::new(&w, WeightFormat::Q4)?.is_none());
        assert!(QuantizedWeight::new(&w, WeightFormat::F32)?.is_none());
        assert!(QuantizedWeight::new(&w, WeightFormat::Q8)?.is_none());
        let w = Tensor::zeros((16, 64), DType::F32, &Device::Cpu)?;
        let q = QuantizedWeight::new(&w, WeightFormat::Q8)?;
        assert_eq!(q.map(|q| q.bytes()), Some(16 * 2 * 34));
        Ok(())
    }
}
