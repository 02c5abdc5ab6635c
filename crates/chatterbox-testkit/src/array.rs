//! A dense row-major array with its shape: what fixtures hold and cases return.

/// A dense row-major array.
#[derive(Debug, Clone, PartialEq)]
pub struct Array<T> {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Elements in row-major order; `data.len()` is the product of `shape`.
    pub data: Vec<T>,
}

impl<T> Array<T> {
    /// Wraps `data` with `shape`; panics in tests if they disagree.
    pub fn new(shape: impl Into<Vec<usize>>, data: Vec<T>) -> Self {
        let shape = shape.into();
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "shape {shape:?} does not match {} elements",
            data.len()
        );
        Self { shape, data }
    }

    /// A one-dimensional array.
    pub fn vector(data: Vec<T>) -> Self {
        Self {
            shape: vec![data.len()],
            data,
        }
    }
}

/// The value a case produced for one named output.
#[derive(Debug, Clone, PartialEq)]
pub enum Actual {
    /// Floating-point output, compared with a tolerance.
    F32(Array<f32>),
    /// Integer output (token ids, codes), compared exactly.
    I64(Array<i64>),
}

impl From<Array<f32>> for Actual {
    fn from(a: Array<f32>) -> Self {
        Actual::F32(a)
    }
}

impl From<Array<i64>> for Actual {
    fn from(a: Array<i64>) -> Self {
        Actual::I64(a)
    }
}
