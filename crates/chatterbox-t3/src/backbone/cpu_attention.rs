//! A CPU kernel for causal attention over the KV cache: per (batch, head, query) it dots the
//! query with the keys it may see, softmaxes, and sums those values. For a decode step (one
//! query) that reads the cache once, where candle's batched matmul would run two small GEMMs
//! per head; for a prefill it skips the masked half of the scores and never materialises the
//! `[B, H, T, L]` score, mask and softmax tensors (Turbo's 437-position CPU prefill: 407 ms of
//! attention with candle's ops).
use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

struct CausalAttention {
    scale: f32,
}

/// One (batch, head): `q [d]`, keys/values at `k[j * stride..][..d]` for `j < l`.
struct Head<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    k_stride: usize,
    v_stride: usize,
    l: usize,
}

fn strides4(l: &Layout, what: &str) -> candle_core::Result<(usize, [usize; 4], [usize; 4])> {
    let err = || candle_core::Error::Msg(format!("causal attention: {what} must be 4-d"));
    let dims: [usize; 4] = l.dims().try_into().map_err(|_| err())?;
    let st: [usize; 4] = l.stride().try_into().map_err(|_| err())?;
    if st[3] != 1 {
        candle_core::bail!("causal attention: {what} needs a contiguous last dimension");
    }
    Ok((l.start_offset(), dims, st))
}

impl CustomOp3 for CausalAttention {
    fn name(&self) -> &'static str {
        "t3-causal-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) = (s1, s2, s3) else {
            candle_core::bail!("causal attention: f32 only");
        };
        let (qo, qd, qs) = strides4(l1, "q")?;
        let (ko, kd, ks) = strides4(l2, "k")?;
        let (vo, vd, vs) = strides4(l3, "v")?;
        let [b, h, t, d] = qd;
        if t == 0 || kd[..2] != [b, h] || vd != kd || kd[3] != d || kd[2] < t {
            candle_core::bail!("causal attention: shapes q {qd:?} k {kd:?} v {vd:?}");
        }
        let offset = kd[2] - t;
        let scale = self.scale;
        let mut out = vec![0f32; b * h * t * d];
        out.par_chunks_mut(d).enumerate().for_each(|(row, o)| {
            let (bi, hi, ti) = (row / (h * t), row / t % h, row % t);
            // query ti sits at cache position offset + ti and sees keys 0..=offset + ti
            let l = offset + ti + 1;
            let kb = ko + bi * ks[0] + hi * ks[1];
            let vb = vo + bi * vs[0] + hi * vs[1];
            let head = Head {
                q: &q[qo + bi * qs[0] + hi * qs[1] + ti * qs[2]..][..d],
                k: &k[kb..kb + (l - 1) * ks[2] + d],
                v: &v[vb..vb + (l - 1) * vs[2] + d],
                k_stride: ks[2],
                v_stride: vs[2],
                l,
            };
            attend_head(&head, scale, o);
        });
        Ok((CpuStorage::F32(out), Shape::from((b, h, t, d))))
    }
}

fn attend_head(head: &Head, scale: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        let d = head.q.len();
        if d.is_multiple_of(8) && d <= avx2::MAX_D && chatterbox_cpu::avx2_fma() {
            // SAFETY: the CPU supports the features the function is compiled for.
            unsafe { avx2::attend_head(head, scale, out) };
            return;
        }
    }
    portable_attend_head(head, scale, out)
}

fn portable_attend_head(head: &Head, scale: f32, out: &mut [f32]) {
    let d = head.q.len();
    let mut p: Vec<f32> = (0..head.l)
        .map(|j| {
            let kj = &head.k[j * head.k_stride..][..d];
            head.q.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale
        })
        .collect();
    let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for x in p.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    out.fill(0.0);
    for (j, pj) in p.iter().enumerate() {
        let w = pj / sum;
        for (oi, vi) in out.iter_mut().zip(&head.v[j * head.v_stride..][..d]) {
            *oi += w * vi;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::exp8::avx2::exp8;
    use super::Head;
    use std::arch::x86_64::*;

    /// Widest head the register accumulator holds.
    pub(super) const MAX_D: usize = 128;

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }

    /// The head dimension must be a multiple of 8 and at most [`MAX_D`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn attend_head(head: &Head, scale: f32, out: &mut [f32]) {
        let d = head.q.len();
        let chunks = d / 8;
        let (qp, kp, vp) = (head.q.as_ptr(), head.k.as_ptr(), head.v.as_ptr());
        let mut q = [_mm256_setzero_ps(); MAX_D / 8];
        for (c, qc) in q.iter_mut().enumerate().take(chunks) {
            *qc = _mm256_loadu_ps(qp.add(8 * c));
        }
        let mut p = vec![0f32; head.l];
        let mut max = f32::NEG_INFINITY;
        for (j, pj) in p.iter_mut().enumerate() {
            let kj = kp.add(j * head.k_stride);
            let mut acc = _mm256_setzero_ps();
            for (c, qc) in q.iter().enumerate().take(chunks) {
                acc = _mm256_fmadd_ps(*qc, _mm256_loadu_ps(kj.add(8 * c)), acc);
            }
            *pj = hsum(acc) * scale;
            max = max.max(*pj);
        }
        let vmax = _mm256_set1_ps(max);
        let mut vsum = _mm256_setzero_ps();
        let body = head.l / 8 * 8;
        for j in (0..body).step_by(8) {
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.as_ptr().add(j)), vmax));
            _mm256_storeu_ps(p.as_mut_ptr().add(j), e);
            vsum = _mm256_add_ps(vsum, e);
        }
        let mut sum = hsum(vsum);
        for x in p[body..].iter_mut() {
            *x = (*x - max).exp();
            sum += *x;
        }
        let mut o = [_mm256_setzero_ps(); MAX_D / 8];
        for (j, pj) in p.iter().enumerate() {
            let w = _mm256_set1_ps(pj / sum);
            let vj = vp.add(j * head.v_stride);
            for (c, oc) in o.iter_mut().enumerate().take(chunks) {
                *oc = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj.add(8 * c)), *oc);
            }
        }
        for (c, oc) in o.iter().enumerate().take(chunks) {
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * c), *oc);
        }
    }
}

/// `softmax(scale · q kᵀ + causal mask) v` for the last `T` positions of the cache
/// (`q [B, H, T, D]`, `k`/`v [B, H, L, D]` views of the cache, `L >= T`): query `i` sits at
/// position `L - T + i` and sees keys `0..=L - T + i`. f32 on the CPU; `[B, H, T, D]`.
pub(crate) fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f32,
) -> candle_core::Result<Tensor> {
    q.apply_op3_no_bwd(k, v, &CausalAttention { scale })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, D};

    fn reference(q: &Tensor, k: &Tensor, v: &Tensor, s: f32) -> candle_core::Result<Tensor> {
        candle_nn::ops::softmax_last_dim(&(q.matmul(&k.t()?)? * s as f64)?)?.matmul(v)
    }

    #[test]
    fn matches_matmul_softmax_on_cache_views() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (d, l) in [(16usize, 13usize), (64, 37), (6, 9)] {
            let (b, h, cap) = (2, 3, 40);
            let q = Tensor::randn(0f32, 1., (b, h, 1, d), &dev)?;
            let kc = Tensor::randn(0f32, 1., (b, h, cap, d), &dev)?;
            let vc = Tensor::randn(0f32, 1., (b, h, cap, d), &dev)?;
            let (k, v) = (kc.narrow(2, 0, l)?, vc.narrow(2, 0, l)?);
            let s = 0.3f32;
            let got = causal_attention(&q, &k, &v, s)?;
            let err = (reference(&q, &k, &v, s)? - got)?
                .abs()?
                .flatten_all()?
                .max(D::Minus1)?;
            assert!(err.to_scalar::<f32>()? < 1e-5, "d {d}: {err}");
        }
        Ok(())
    }

    #[test]
    fn prefill_rows_match_the_masked_reference() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        // T queries at the end of an L-long cache (L > T: a prefill after earlier positions)
        for (d, t, l) in [(64usize, 7usize, 12usize), (16, 5, 5), (6, 3, 4)] {
            let (b, h) = (2, 3);
            let q = Tensor::randn(0f32, 1., (b, h, t, d), &dev)?;
            let k = Tensor::randn(0f32, 1., (b, h, l, d), &dev)?;
            let v = Tensor::randn(0f32, 1., (b, h, l, d), &dev)?;
            let mask = super::super::attention::causal_mask(t, l - t, &dev)
                .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
            let s = 0.125f32;
            let want = candle_nn::ops::softmax_last_dim(
                &(q.matmul(&k.t()?)? * s as f64)?.broadcast_add(&mask)?,
            )?
            .matmul(&v)?;
            let got = causal_attention(&q, &k, &v, s)?;
            assert_eq!(got.dims(), &[b, h, t, d]);
            let err = (want - got)?.abs()?.flatten_all()?.max(D::Minus1)?;
            assert!(err.to_scalar::<f32>()? < 1e-5, "d {d} t {t} l {l}: {err}");
        }
        Ok(())
    }

    #[test]
    fn portable_path_matches_too() {
        let (d, l) = (8usize, 11usize);
        let q: Vec<f32> = (0..d).map(|i| (i as f32 * 0.37).sin()).collect();
        let k: Vec<f32> = (0..l * d).map(|i| (i as f32 * 0.11).cos()).collect();
        let v: Vec<f32> = (0..l * d).map(|i| (i as f32 * 0.07).sin()).collect();
        let head = Head {
            q: &q,
            k: &k,
            v: &v,
            k_stride: d,
            v_stride: d,
            l,
        };
        let (mut a, mut b) = (vec![0f32; d], vec![0f32; d]);
        portable_attend_head(&head, 0.5, &mut a);
        attend_head(&head, 0.5, &mut b);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
    }
}
