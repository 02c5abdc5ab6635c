//! Tensor-wide error measures of the tests that compare two candle code paths.
use candle_core::{DType, Tensor};

/// The largest magnitude in `t`, in f32.
pub fn max_abs(t: &Tensor) -> candle_core::Result<f32> {
    t.abs()?.max_all()?.to_dtype(DType::F32)?.to_scalar::<f32>()
}

/// The largest magnitude of `a - b`, in f32.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
    max_abs(&(a - b)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn the_largest_magnitudes() -> candle_core::Result<()> {
        let a = Tensor::new(&[[1f32, -4.0], [2.5, 0.0]], &Device::Cpu)?;
        let b = Tensor::new(&[[1f32, -1.0], [3.0, 0.5]], &Device::Cpu)?;
        assert_eq!(max_abs(&a)?, 4.0);
        assert_eq!(max_abs_diff(&a, &b)?, 3.0);
        Ok(())
    }
}
