//! A whole HiFT `ResBlock` on the CPU: channels-last, Winograd convolutions, fused Snake and
//! residual additions.
use super::conv::PreAct;
use super::winograd::WinogradConv;
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use rayon::prelude::*;

/// The convolutions and Snake parameters of one `ResBlock`, for the CPU.
#[derive(Debug, Clone)]
pub(crate) struct ResBlockKernel {
    channels: usize,
    /// One per dilation: `x += conv2(snake2(conv1(snake1(x))))`.
    layers: Vec<Layer>,
}

#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub conv1: WinogradConv,
    pub snake1: (Vec<f32>, Vec<f32>),
    pub conv2: WinogradConv,
    pub snake2: (Vec<f32>, Vec<f32>),
}

impl ResBlockKernel {
    pub fn new(channels: usize, layers: Vec<Layer>) -> Self {
        Self { channels, layers }
    }

    /// `(B, C, L)` in and out (channels-first, as the rest of the model).
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.contiguous()?.apply_op1_no_bwd(self)
    }

    fn run(&self, x: &[f32], len: usize) -> Vec<f32> {
        let c = self.channels;
        let mut cur = transpose(x, c, len);
        for l in &self.layers {
            let y = l.conv1.run(&cur, len, snake(&l.snake1), None);
            cur = l.conv2.run(&y, len, snake(&l.snake2), Some(&cur));
        }
        transpose(&cur, len, c)
    }
}

impl CustomOp1 for ResBlockKernel {
    fn name(&self) -> &'static str {
        "hift-resblock"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, c, len) = l.shape().dims3()?;
        if c != self.channels {
            candle_core::bail!("hift resblock: {c} channels, expected {}", self.channels)
        }
        let data = s.as_slice::<f32>()?;
        let Some((start, end)) = l.contiguous_offsets() else {
            candle_core::bail!("hift resblock: expected a contiguous tensor")
        };
        let data = &data[start..end];
        let mut out = Vec::with_capacity(data.len());
        for bi in 0..b {
            out.extend(self.run(&data[bi * c * len..(bi + 1) * c * len], len));
        }
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

fn snake(s: &(Vec<f32>, Vec<f32>)) -> PreAct<'_> {
    PreAct::Snake {
        alpha: &s.0,
        inv_alpha: &s.1,
    }
}

/// `(rows, cols)` row-major to `(cols, rows)`, in cache-sized tiles.
fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const T: usize = 32;
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(T * rows.max(1))
        .enumerate()
        .for_each(|(cb, dst)| {
            // dst holds output rows c0 .. c0 + T (input columns).
            let c0 = cb * T;
            let nc = dst.len() / rows.max(1);
            for r0 in (0..rows).step_by(T) {
                for r in r0..(r0 + T).min(rows) {
                    let src = &x[r * cols + c0..r * cols + c0 + nc];
                    for (ci, &v) in src.iter().enumerate() {
                        dst[ci * rows + r] = v;
                    }
                }
            }
        });
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn transpose_round_trips() {
        for (r, c) in [(1, 1), (3, 70), (65, 33), (64, 64)] {
            let x: Vec<f32> = (0..r * c).map(|i| i as f32).collect();
            let t = super::transpose(&x, r, c);
            for i in 0..r {
                for j in 0..c {
                    assert_eq!(t[j * r + i], x[i * c + j]);
                }
            }
            assert_eq!(super::transpose(&t, c, r), x);
        }
    }
}
