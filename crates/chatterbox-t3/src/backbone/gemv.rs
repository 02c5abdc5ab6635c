//! A CPU kernel for `x · W` with few rows of `x` (decode steps: 1 row, or 2 with CFG) and the
//! weight stored `[in, out]`, the layout [`Linear`](super::Linear) keeps on the CPU.
//!
//! candle's CPU matmul packs the weight matrix for every call, which caps a 2-row product at
//! ~14 GB/s on the 2-core dev box; this kernel streams the weight rows once, in order, and runs
//! at memory bandwidth (~24 GB/s there). The shared dimension is cut into fixed chunks whose
//! partial sums are added in chunk order, so the result does not depend on the thread count.
use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

/// Most rows of `x` the kernel handles in one pass over the weights.
pub(crate) const MAX_ROWS: usize = 4;

/// Weight rows (of the shared dimension) per parallel task.
const K_CHUNK: usize = 256;

struct SmallGemv;

impl CustomOp2 for SmallGemv {
    fn name(&self) -> &'static str {
        "t3-small-gemv"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(x), CpuStorage::F32(w)) = (s1, s2) else {
            candle_core::bail!("t3-small-gemv: f32 only");
        };
        let (Some((x0, x1)), Some((w0, w1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("t3-small-gemv: inputs must be contiguous");
        };
        let (m, k) = l1.shape().dims2()?;
        let (k2, n) = l2.shape().dims2()?;
        if k != k2 || m == 0 || m > MAX_ROWS {
            candle_core::bail!(
                "t3-small-gemv: bad shapes {:?} x {:?}",
                l1.shape(),
                l2.shape()
            );
        }
        let out = gemv(&x[x0..x1], m, k, &w[w0..w1], n);
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

/// `x [m, k] · w [k, n] -> [m, n]` for `1 <= m <= MAX_ROWS`, f32, on the CPU.
pub(crate) fn small_gemv(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    x.apply_op2_no_bwd(w, &SmallGemv)
}

fn gemv(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
    let chunks = k.div_ceil(K_CHUNK).max(1);
    let mut parts = vec![0f32; chunks * m * n];
    parts
        .par_chunks_mut(m * n)
        .enumerate()
        .for_each(|(c, part)| {
            let k0 = c * K_CHUNK;
            let kc = K_CHUNK.min(k - k0);
            let wc = &w[k0 * n..(k0 + kc) * n];
            match m {
                1 => accumulate::<1>(x, k, k0, wc, n, part),
                2 => accumulate::<2>(x, k, k0, wc, n, part),
                3 => accumulate::<3>(x, k, k0, wc, n, part),
                _ => accumulate::<4>(x, k, k0, wc, n, part),
            }
        });
    let (first, rest) = parts.split_at_mut(m * n);
    for part in rest.chunks_exact(m * n) {
        for (a, b) in first.iter_mut().zip(part) {
            *a += *b;
        }
    }
    parts.truncate(m * n);
    parts
}

/// `part[r, j] += Σ_t x[r, k0 + t] · wc[t, j]` over the `wc.len() / n` rows of the chunk.
fn accumulate<const M: usize>(
    x: &[f32],
    k: usize,
    k0: usize,
    wc: &[f32],
    n: usize,
    part: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if chatterbox_cpu::avx2_fma() {
            // SAFETY: the CPU supports the features the function is compiled for.
            unsafe { avx2::accumulate::<M>(x, k, k0, wc, n, part) };
            return;
        }
    }
    portable_accumulate::<M>(x, k, k0, wc, n, part)
}

fn portable_accumulate<const M: usize>(
    x: &[f32],
    k: usize,
    k0: usize,
    wc: &[f32],
    n: usize,
    part: &mut [f32],
) {
    for (t, wr) in wc.chunks_exact(n).enumerate() {
        for r in 0..M {
            let xv = x[r * k + k0 + t];
            for (p, wv) in part[r * n..(r + 1) * n].iter_mut().zip(wr) {
                *p += xv * wv;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Four weight rows per pass (four streams in flight, one load and store of the partial
    /// sums per four FMAs), 8 output columns per register.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn accumulate<const M: usize>(
        x: &[f32],
        k: usize,
        k0: usize,
        wc: &[f32],
        n: usize,
        part: &mut [f32],
    ) {
        let rows = wc.len() / n;
        let body = n / 8 * 8;
        let (wp, pp) = (wc.as_ptr(), part.as_mut_ptr());
        let mut t = 0;
        while t + 4 <= rows {
            let mut xb = [[_mm256_setzero_ps(); 4]; M];
            for (r, b) in xb.iter_mut().enumerate() {
                for (u, v) in b.iter_mut().enumerate() {
                    *v = _mm256_set1_ps(x[r * k + k0 + t + u]);
                }
            }
            let w0 = wp.add(t * n);
            let (w1, w2, w3) = (w0.add(n), w0.add(2 * n), w0.add(3 * n));
            let mut j = 0;
            while j < body {
                let a = _mm256_loadu_ps(w0.add(j));
                let b = _mm256_loadu_ps(w1.add(j));
                let c = _mm256_loadu_ps(w2.add(j));
                let d = _mm256_loadu_ps(w3.add(j));
                for (r, xr) in xb.iter().enumerate() {
                    let p = pp.add(r * n + j);
                    let mut acc = _mm256_loadu_ps(p);
                    acc = _mm256_fmadd_ps(xr[0], a, acc);
                    acc = _mm256_fmadd_ps(xr[1], b, acc);
                    acc = _mm256_fmadd_ps(xr[2], c, acc);
                    acc = _mm256_fmadd_ps(xr[3], d, acc);
                    _mm256_storeu_ps(p, acc);
                }
                j += 8;
            }
            for j in body..n {
                for r in 0..M {
                    let mut s = part[r * n + j];
                    for u in 0..4 {
                        s += x[r * k + k0 + t + u] * wc[(t + u) * n + j];
                    }
                    part[r * n + j] = s;
                }
            }
            t += 4;
        }
        if t < rows {
            super::portable_accumulate::<M>(x, k, k0 + t, &wc[t * n..], n, part);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn matches_matmul_for_every_row_count_and_odd_widths() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        // widths below and above one chunk, with and without a tail of rows and columns
        for &(k, n) in &[(64usize, 40usize), (37, 19), (1024, 33), (600, 130)] {
            let w = Tensor::randn(0f32, 1., (k, n), &dev)?;
            for m in 1..=MAX_ROWS {
                let x = Tensor::randn(0f32, 1., (m, k), &dev)?;
                let want = x.matmul(&w)?;
                let got = small_gemv(&x, &w)?;
                assert_eq!(got.dims(), &[m, n]);
                let err = (want - &got)?.abs()?.max_all()?.to_scalar::<f32>()?;
                assert!(err < 1e-4 * (k as f32).sqrt(), "m {m} k {k} n {n}: {err}");
            }
        }
        Ok(())
    }

    #[test]
    fn rejects_mismatched_shapes() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let w = Tensor::zeros((8, 4), candle_core::DType::F32, &dev)?;
        assert!(small_gemv(&Tensor::zeros((1, 9), candle_core::DType::F32, &dev)?, &w).is_err());
        assert!(small_gemv(&Tensor::zeros((5, 8), candle_core::DType::F32, &dev)?, &w).is_err());
        Ok(())
    }
}
