//! The FSMN memory of `FSMNMultiHeadAttention.forward_fsmn` in s3tokenizer/model_v2.py: a
//! depthwise convolution over time (kernel 31, zero "same" padding, no bias) plus its input.
//!
//! candle runs a grouped convolution as one convolution per group (1280 of them here), so the
//! depthwise convolution is computed directly: a fused parallel loop on the CPU, one kernel on
//! CUDA (f32, `cuda` feature), and a gather of the 31 shifted copies followed by a weighted sum
//! on other devices.
use crate::Result;
use candle_core::{CpuStorage, CustomOp2, DType, Device, Layout, Shape, Tensor, D};
use rayon::prelude::*;

/// Depthwise convolution along time of a `(batch, time, channels)` tensor with per-channel
/// kernels, zero-padded `left` frames before and `right` after, plus the input itself:
/// `y[b, t, c] = x[b, t, c] + sum_k w[k, c] * x[b, t + k - left, c]`.
#[derive(Debug, Clone)]
pub struct DepthwiseMemory {
    /// `(kernel, channels)`: the reference's `(channels, 1, kernel)` weight, transposed.
    weight: Tensor,
    left: usize,
    right: usize,
    /// Gather index of the generic path for up to `GATHER_FRAMES` frames (not on the CPU).
    gather: Option<Tensor>,
}

/// Frames the precomputed gather index covers (the encoder's rotary table length); longer
/// inputs build theirs per call.
const GATHER_FRAMES: usize = super::rotary::ROTARY_POSITIONS;

/// `[t + k for t in 0..frames for k in 0..kernel]`: frame `t`'s taps in the padded input.
fn gather_index(frames: usize, kernel: usize, device: &Device) -> Result<Tensor> {
    let index: Vec<u32> = (0..frames as u32)
        .flat_map(|t| (0..kernel as u32).map(move |k| t + k))
        .collect();
    Ok(Tensor::from_vec(index, frames * kernel, device)?)
}

impl DepthwiseMemory {
    /// From the reference's `fsmn_block.weight` of shape `(channels, 1, kernel)`, with the
    /// reference's padding: `(kernel - 1) / 2` frames before, the rest after.
    pub fn new(weight: &Tensor) -> Result<Self> {
        let (c, _, k) = weight.dims3()?;
        let weight = weight.reshape((c, k))?.t()?.contiguous()?;
        let left = (k - 1) / 2;
        // built once so that a forward on a GPU uploads nothing
        let gather = match weight.device() {
            Device::Cpu => None,
            dev => Some(gather_index(GATHER_FRAMES, k, dev)?),
        };
        Ok(Self {
            weight,
            left,
            right: k - 1 - left,
            gather,
        })
    }

    /// `x + depthwise_conv(x)` for `x` of shape `(batch, time, channels)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match (x.device(), x.dtype()) {
            (Device::Cpu, DType::F32) => {
                let x = x.contiguous()?;
                Ok(x.apply_op2_no_bwd(
                    &self.weight,
                    &CpuDepthwise {
                        left: self.left,
                        right: self.right,
                    },
                )?)
            }
            _ => {
                #[cfg(feature = "cuda")]
                if super::cuda_fsmn::applies(x, &self.weight) {
                    return Ok(super::cuda_fsmn::fsmn(x, &self.weight, self.left)?);
                }
                self.forward_generic(x)
            }
        }
    }

    /// The same result from tensor operations that every backend has: the `kernel` shifted
    /// copies are gathered with one `index_select` and summed with their weights.
    pub fn forward_generic(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, c) = x.dims3()?;
        let k = self.weight.dim(0)?;
        // Bound the gathered copy (b * t * k * c values) by running long batches item by item.
        const MAX_GATHER: usize = 1 << 26;
        if b > 1 && b * t * k * c > MAX_GATHER {
            let items = (0..b)
                .map(|i| self.forward_generic(&x.narrow(0, i, 1)?))
                .collect::<Result<Vec<_>>>()?;
            return Ok(Tensor::cat(&items, 0)?);
        }
        let padded = x.pad_with_zeros(1, self.left, self.right)?;
        let index = match &self.gather {
            Some(g) if t <= GATHER_FRAMES && g.device().same_device(x.device()) => {
                g.narrow(0, 0, t * k)?
            }
            _ => gather_index(t, k, x.device())?,
        };
        let gathered = padded.index_select(&index, 1)?.reshape((b, t, k, c))?;
        let w = self.weight.to_dtype(x.dtype())?.reshape((1, 1, k, c))?;
        let conv = gathered.broadcast_mul(&w)?.sum(D::Minus2)?;
        Ok((conv + x)?)
    }
}

struct CpuDepthwise {
    left: usize,
    right: usize,
}

impl CustomOp2 for CpuDepthwise {
    fn name(&self) -> &'static str {
        "s3tokenizer-fsmn-depthwise"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, t, c) = l1.shape().dims3()?;
        let (k, c2) = l2.shape().dims2()?;
        if c != c2 || k != self.left + self.right + 1 {
            candle_core::bail!("fsmn: input {:?} vs weight {:?}", l1.shape(), l2.shape())
        }
        let (CpuStorage::F32(x), CpuStorage::F32(w)) = (s1, s2) else {
            candle_core::bail!("fsmn: f32 only on the cpu path")
        };
        let (Some((x0, x1)), Some((w0, w1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("fsmn: inputs must be contiguous")
        };
        let (x, w) = (&x[x0..x1], &w[w0..w1]);
        let mut out = vec![0f32; b * t * c];
        let (left, c_) = (self.left, c);
        // one frame per item, in parallel: every output is the same sum in the same order
        out.par_chunks_mut(c_).enumerate().for_each(|(row, acc)| {
            let (bi, ti) = (row / t, row % t);
            let xb = &x[bi * t * c_..(bi + 1) * t * c_];
            // taps whose source frame t + k - left lies inside 0..t
            let k_lo = left.saturating_sub(ti);
            let k_hi = k.min(t + left - ti);
            for ki in k_lo..k_hi {
                let src = &xb[(ti + ki - left) * c_..(ti + ki - left + 1) * c_];
                let wk = &w[ki * c_..(ki + 1) * c_];
                for ((a, &s), &wv) in acc.iter_mut().zip(src).zip(wk) {
                    *a += wv * s;
                }
            }
            for (a, &s) in acc.iter_mut().zip(&xb[ti * c_..(ti + 1) * c_]) {
                *a += s;
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((b, t, c))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_kernel_matches_generic_path_and_a_direct_sum() -> Result<()> {
        let dev = Device::Cpu;
        let (b, t, c, k) = (2, 9, 5, 7);
        let x = Tensor::randn(0f32, 1.0, (b, t, c), &dev)?;
        let w = Tensor::randn(0f32, 1.0, (c, 1, k), &dev)?;
        let m = DepthwiseMemory::new(&w)?;
        let fast = m.forward(&x)?;
        let generic = m.forward_generic(&x)?;
        // as on a GPU: the precomputed gather index, cut to the input's frames
        let mut on_gpu = m.clone();
        on_gpu.gather = Some(gather_index(GATHER_FRAMES, k, &dev)?);
        let generic_cached = on_gpu.forward_generic(&x)?;
        // the definition, term by term
        let (xv, wv) = (x.to_vec3::<f32>()?, w.to_vec3::<f32>()?);
        let mut direct = vec![0f32; b * t * c];
        for bi in 0..b {
            for ti in 0..t {
                for ci in 0..c {
                    let mut s = xv[bi][ti][ci];
                    for (ki, &wk) in wv[ci][0].iter().enumerate() {
                        let src = ti as isize + ki as isize - 3;
                        if (0..t as isize).contains(&src) {
                            s += wk * xv[bi][src as usize][ci];
                        }
                    }
                    direct[(bi * t + ti) * c + ci] = s;
                }
            }
        }
        let direct = Tensor::from_vec(direct, (b, t, c), &dev)?;
        for other in [&generic, &generic_cached, &direct] {
            let diff = (&fast - other)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(diff < 1e-5, "max diff {diff}");
        }
        Ok(())
    }
}
