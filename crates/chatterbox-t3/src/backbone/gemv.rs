//! A CPU kernel for `x · Wᵀ` with few rows of `x` (decode steps: 1 row, or 2 with CFG).
//!
//! candle's CPU matmul packs the weight matrix for every call, which makes a 2-row product read
//! the weights several times (measured 3 GB/s on the 2-core dev box); this kernel streams each
//! weight row once and dots it with every row of `x`, so decode runs at memory bandwidth.
use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

/// Most rows of `x` the kernel handles in one pass over the weights.
pub(crate) const MAX_ROWS: usize = 4;

/// Weight rows per parallel task.
const ROWS_PER_TASK: usize = 32;

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
        let (n, k2) = l2.shape().dims2()?;
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

/// `x [m, k] · w [n, k]ᵀ -> [m, n]` for `1 <= m <= MAX_ROWS`, f32, on the CPU.
pub(crate) fn small_gemv(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    x.apply_op2_no_bwd(w, &SmallGemv)
}

fn gemv(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
    // Computed as [n, m] (one task writes whole rows), then transposed when m > 1.
    let mut out_nm = vec![0f32; n * m];
    out_nm
        .par_chunks_mut(ROWS_PER_TASK * m)
        .zip(w.par_chunks(ROWS_PER_TASK * k))
        .for_each(|(o, wc)| match m {
            1 => rows::<1>(wc, x, k, o),
            2 => rows::<2>(wc, x, k, o),
            3 => rows::<3>(wc, x, k, o),
            _ => rows::<4>(wc, x, k, o),
        });
    if m == 1 {
        return out_nm;
    }
    let mut out = vec![0f32; m * n];
    for (j, r) in out_nm.chunks_exact(m).enumerate() {
        for (i, v) in r.iter().enumerate() {
            out[i * n + j] = *v;
        }
    }
    out
}

fn rows<const M: usize>(w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports the features the function is compiled for.
            unsafe { avx2::rows::<M>(w, x, k, out) };
            return;
        }
    }
    portable_rows::<M>(w, x, k, out)
}

fn portable_rows<const M: usize>(w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
    for (j, wr) in w.chunks_exact(k).enumerate() {
        let mut acc = [[0f32; 8]; M];
        let body = k / 8 * 8;
        for i in (0..body).step_by(8) {
            let wv = &wr[i..i + 8];
            for (mi, a) in acc.iter_mut().enumerate() {
                let xv = &x[mi * k + i..mi * k + i + 8];
                for l in 0..8 {
                    a[l] += wv[l] * xv[l];
                }
            }
        }
        for (mi, a) in acc.iter().enumerate() {
            let mut s: f32 = a.iter().sum();
            for i in body..k {
                s += wr[i] * x[mi * k + i];
            }
            out[j * M + mi] = s;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// Dots `R` consecutive `k`-long rows of `w` with the `M` rows of `x` at once (several
    /// weight streams in flight hide memory latency); `out[r * M + m]`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn block<const M: usize, const R: usize>(
        w: &[f32],
        x: &[f32],
        k: usize,
        out: &mut [f32],
    ) {
        let body = k / 8 * 8;
        let (wp, xp) = (w.as_ptr(), x.as_ptr());
        let mut acc = [[_mm256_setzero_ps(); M]; R];
        let mut i = 0;
        while i < body {
            let mut xv = [_mm256_setzero_ps(); M];
            for (m, v) in xv.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(xp.add(m * k + i));
            }
            for (r, a) in acc.iter_mut().enumerate() {
                let wv = _mm256_loadu_ps(wp.add(r * k + i));
                for m in 0..M {
                    a[m] = _mm256_fmadd_ps(wv, xv[m], a[m]);
                }
            }
            i += 8;
        }
        for (r, a) in acc.iter().enumerate() {
            for m in 0..M {
                let mut s = hsum(a[m]);
                for t in body..k {
                    s += w[r * k + t] * x[m * k + t];
                }
                out[r * M + m] = s;
            }
        }
    }

    /// Dots each `k`-long row of `w` with the `M` rows of `x`; `out[j * M + m]`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows<const M: usize>(w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
        const R: usize = 4;
        let n = w.len() / k;
        let mut j = 0;
        while j + R <= n {
            let (wb, ob) = (&w[j * k..(j + R) * k], &mut out[j * M..(j + R) * M]);
            if M <= 2 {
                block::<M, R>(wb, x, k, ob);
            } else {
                block::<M, 2>(&wb[..2 * k], x, k, &mut ob[..2 * M]);
                block::<M, 2>(&wb[2 * k..], x, k, &mut ob[2 * M..]);
            }
            j += R;
        }
        while j < n {
            block::<M, 1>(&w[j * k..(j + 1) * k], x, k, &mut out[j * M..(j + 1) * M]);
            j += 1;
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
        for &(k, n) in &[(64usize, 40usize), (37, 19), (1024, 33)] {
            let w = Tensor::randn(0f32, 1., (n, k), &dev)?;
            for m in 1..=MAX_ROWS {
                let x = Tensor::randn(0f32, 1., (m, k), &dev)?;
                let want = x.matmul(&w.t()?)?;
                let got = small_gemv(&x, &w)?;
                let err = (want - &got)?.abs()?.max_all()?.to_scalar::<f32>()?;
                assert!(err < 1e-4 * (k as f32).sqrt(), "m {m} k {k} n {n}: {err}");
                assert_eq!(got.dims(), &[m, n]);
            }
        }
        Ok(())
    }
}
