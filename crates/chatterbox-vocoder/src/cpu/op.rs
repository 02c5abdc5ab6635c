//! The CPU kernels as candle custom ops (CPU storage only; callers use them for CPU tensors).
use super::conv::{snake_row, Conv1dKernel, PreAct};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

fn f32_slice<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    let data = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("{what}: expected a contiguous tensor"),
    }
}

struct ConvOp<'a> {
    kernel: &'a Conv1dKernel,
    act: PreAct<'a>,
}

impl ConvOp<'_> {
    fn run(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        res: Option<(&CpuStorage, &Layout)>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, c, len) = xl.shape().dims3()?;
        if c != self.kernel.c_in() {
            candle_core::bail!(
                "hift conv1d: {c} input channels, expected {}",
                self.kernel.c_in()
            )
        }
        let Some(lo) = self.kernel.out_len(len) else {
            candle_core::bail!("hift conv1d: input of {len} samples is too short")
        };
        let x = f32_slice(x, xl, "hift conv1d input")?;
        let out_shape = Shape::from((b, self.kernel.c_out(), lo));
        let res = match res {
            Some((r, rl)) => {
                if rl.shape() != &out_shape {
                    candle_core::bail!(
                        "hift conv1d: residual {:?}, expected {out_shape:?}",
                        rl.shape()
                    )
                }
                Some(f32_slice(r, rl, "hift conv1d residual")?)
            }
            None => None,
        };
        let out = self.kernel.run(x, b, len, self.act, res);
        Ok((CpuStorage::F32(out), out_shape))
    }
}

impl CustomOp1 for ConvOp<'_> {
    fn name(&self) -> &'static str {
        "hift-conv1d"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run(s, l, None)
    }
}

impl CustomOp2 for ConvOp<'_> {
    fn name(&self) -> &'static str {
        "hift-conv1d-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run(s1, l1, Some((s2, l2)))
    }
}

/// `kernel(act(x)) + bias (+ residual)` for a CPU tensor `x` `(B, c_in, L)`.
pub(crate) fn conv1d(
    x: &Tensor,
    kernel: &Conv1dKernel,
    act: PreAct,
    residual: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let x = x.contiguous()?;
    let op = ConvOp { kernel, act };
    match residual {
        Some(r) => x.apply_op2_no_bwd(&r.contiguous()?, &op),
        None => x.apply_op1_no_bwd(&op),
    }
}

struct SnakeOp<'a> {
    alpha: &'a [f32],
    inv_alpha: &'a [f32],
}

impl CustomOp1 for SnakeOp<'_> {
    fn name(&self) -> &'static str {
        "hift-snake"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (_, c, len) = l.shape().dims3()?;
        if c != self.alpha.len() {
            candle_core::bail!("hift snake: {c} channels, expected {}", self.alpha.len())
        }
        let x = f32_slice(s, l, "hift snake input")?;
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(len.max(1))
            .zip(x.par_chunks(len.max(1)))
            .enumerate()
            .for_each(|(row, (d, s))| {
                snake_row(d, s, self.alpha[row % c], self.inv_alpha[row % c])
            });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

/// Snake on a CPU tensor `(B, C, L)`.
pub(crate) fn snake(x: &Tensor, alpha: &[f32], inv_alpha: &[f32]) -> candle_core::Result<Tensor> {
    x.contiguous()?
        .apply_op1_no_bwd(&SnakeOp { alpha, inv_alpha })
}
