//! Tensors as the comparisons take them, and the tensor-wide error measures of the tests that
//! compare two candle code paths.
use crate::{Array, Error, Result};
use candle_core::{DType, Tensor};

/// `t`'s values as f32, with its shape: a case's float output.
pub fn f32_array(t: &Tensor) -> Result<Array<f32>> {
    let data = t
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(Error::case)?;
    Ok(Array::new(t.dims().to_vec(), data))
}

/// `t`'s values as i64, with its shape: a case's integer output (token ids, codes).
pub fn i64_array(t: &Tensor) -> Result<Array<i64>> {
    let data = t
        .to_dtype(DType::I64)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<i64>())
        .map_err(Error::case)?;
    Ok(Array::new(t.dims().to_vec(), data))
}

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

    #[test]
    fn arrays_keep_the_shape_and_the_values() -> Result<()> {
        let t = Tensor::new(&[[1u32, 2, 3], [4, 5, 6]], &Device::Cpu).map_err(Error::case)?;
        assert_eq!(
            f32_array(&t)?,
            Array::new([2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        );
        assert_eq!(i64_array(&t)?, Array::new([2, 3], vec![1, 2, 3, 4, 5, 6]));
        Ok(())
    }
}
