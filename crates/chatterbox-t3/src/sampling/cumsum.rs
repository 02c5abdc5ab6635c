//! Cumulative sums along the vocabulary as two small matmuls (block prefix sums, then block
//! offsets), instead of candle's `cumsum`, which multiplies by a `vocab x vocab` triangle.
//! Accumulates in f64 on the CPU (as torch's CPU `cumsum` does), f32 elsewhere.
use crate::Result;
use candle_core::{DType, Device, Tensor};

const BLOCK: usize = 128;

/// Inclusive prefix sums over the last dimension of `[rows, n]` f32 tensors.
#[derive(Debug, Clone)]
pub struct BlockCumsum {
    n: usize,
    blocks: usize,
    acc: DType,
    /// `[BLOCK, BLOCK]`, ones where `i <= j`.
    within: Tensor,
    /// `[blocks, blocks]`, ones where `i < j`.
    offsets: Tensor,
    /// `[1, blocks * BLOCK - n]` zeros appended to reach whole blocks.
    pad: Option<Tensor>,
}

fn triangle(n: usize, strict: bool, dtype: DType, dev: &Device) -> Result<Tensor> {
    let v: Vec<f64> = (0..n)
        .flat_map(|i| {
            (0..n).map(move |j| {
                if (strict && i < j) || (!strict && i <= j) {
                    1.0
                } else {
                    0.0
                }
            })
        })
        .collect();
    // Cast on the host: candle's Metal backend has no f64 conversions.
    Ok(Tensor::from_vec(v, (n, n), &Device::Cpu)?
        .to_dtype(dtype)?
        .to_device(dev)?)
}

impl BlockCumsum {
    /// Constants for sums over `n` elements on `dev`.
    pub fn new(n: usize, dev: &Device) -> Result<Self> {
        let acc = if dev.is_cpu() { DType::F64 } else { DType::F32 };
        let blocks = n.div_ceil(BLOCK).max(1);
        let pad = blocks * BLOCK - n;
        Ok(Self {
            n,
            blocks,
            acc,
            within: triangle(BLOCK, false, acc, dev)?,
            offsets: triangle(blocks, true, acc, dev)?,
            pad: (pad > 0)
                .then(|| Tensor::zeros((1, pad), acc, dev))
                .transpose()?,
        })
    }

    /// `x.cumsum(-1)` for `x: [rows, n]`, returned in f32.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (rows, n) = x.dims2()?;
        if n != self.n {
            return Err(crate::error::invalid(
                "cumsum input",
                format!("{n} elements, built for {}", self.n),
            ));
        }
        let x = x.to_dtype(self.acc)?;
        let x = match &self.pad {
            Some(p) => Tensor::cat(&[&x, &p.broadcast_as((rows, p.dims()[1]))?], 1)?,
            None => x,
        };
        let within = x
            .reshape((rows * self.blocks, BLOCK))?
            .matmul(&self.within)?;
        let totals = within
            .narrow(1, BLOCK - 1, 1)?
            .reshape((rows, self.blocks))?;
        let offsets = totals.matmul(&self.offsets)?;
        let out = within
            .reshape((rows, self.blocks, BLOCK))?
            .broadcast_add(&offsets.unsqueeze(2)?)?
            .reshape((rows, self.blocks * BLOCK))?
            .narrow(1, 0, n)?;
        Ok(out.to_dtype(DType::F32)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_sequential_sums() -> Result<()> {
        let dev = Device::Cpu;
        for n in [1usize, 5, 128, 129, 300, 8194] {
            let x: Vec<f32> = (0..2 * n)
                .map(|i| ((i * 37 % 101) as f32) / 101.0)
                .collect();
            let t = Tensor::from_vec(x.clone(), (2, n), &dev)?;
            let got = BlockCumsum::new(n, &dev)?.forward(&t)?.to_vec2::<f32>()?;
            for r in 0..2 {
                let mut acc = 0f64;
                for j in 0..n {
                    acc += x[r * n + j] as f64;
                    assert_eq!(got[r][j], acc as f32, "n {n} row {r} col {j}");
                }
            }
        }
        Ok(())
    }
}
