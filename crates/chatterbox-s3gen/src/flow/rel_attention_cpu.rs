//! The conformer encoder's relative-position attention core as one CPU kernel: port of the
//! score path of chatterbox/models/s3gen/transformer/attention.py
//! `RelPositionMultiHeadedAttention.forward` (upstream 5de7a54),
//! `softmax(((q + u) k^T + rel_shift((q + v) p^T)) / sqrt(d_k) + mask) v`, per (batch row, head).
//!
//! The tensor path wrote a `(b, h, t, t)` and a `(b, h, t, 2t - 1)` score tensor per layer
//! (47 MB at 700 frames: fresh pages the kernel zeroes on every call) and a transposed copy of
//! every operand. Here each task keeps its head's operands and `t x t` scores in per-thread
//! buffers, and computes the position scores by blocks of rows, only over the `t + rows - 1`
//! columns that `rel_shift` keeps (the reference computes all `2t - 1`, half of them dropped).
//! Every score is the same dot product as the reference's (same operands, same order within
//! the GEMM micro-kernel).
use super::kernels::{sized, softmax_one, OutPtr};
use candle_core::{DType, Storage, Tensor};
use rayon::prelude::*;

/// Rows of position scores computed per GEMM.
const ROWS: usize = 64;

/// `(batch, time, heads, head size)`.
pub(crate) type Dims = (usize, usize, usize, usize);

/// The operands of [`rel_attention`]: `q`, `k`, `v` `(b, t, h d)` row-major (unscaled, the
/// projections' outputs), `p` `(2t - 1, h d)` (the projected positions, shared by the batch),
/// `u` and `pv` `(h, d)` (`pos_bias_u`, `pos_bias_v`), `bias` `(b, t)` added to each key's
/// score (0 or -inf), or `None`.
pub(crate) struct RelAttention<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub p: &'a [f32],
    pub u: &'a [f32],
    pub pv: &'a [f32],
    pub bias: Option<&'a [f32]>,
    pub scale: f32,
}

/// Per-thread buffers of one head.
#[derive(Default)]
struct Scratch {
    qu: Vec<f32>,
    qv: Vec<f32>,
    kt: Vec<f32>,
    pt: Vec<f32>,
    v: Vec<f32>,
    scores: Vec<f32>,
    pos: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// `c (m, n) = a (m, k) @ b (k, n)` with row strides `lda`, `ldb`, `ldc` (unit column
/// strides), on one thread.
///
/// # Safety
/// `a`, `b` and `c` must hold the `m x k`, `k x n` and `m x n` elements those strides address.
unsafe fn gemm_rows(
    (m, n, k): (usize, usize, usize),
    (a, lda): (*const f32, usize),
    (b, ldb): (*const f32, usize),
    (c, ldc): (*mut f32, usize),
) {
    gemm::gemm(
        m,
        n,
        k,
        c,
        1,
        ldc as isize,
        false,
        a,
        1,
        lda as isize,
        b,
        1,
        ldb as isize,
        0.0f32,
        1.0f32,
        false,
        false,
        false,
        gemm::Parallelism::None,
    );
}

/// Writes the attention output `(b, t, h d)` into `out`. One rayon task per (batch row, head).
pub(crate) fn rel_attention(
    op: &RelAttention,
    (b, t, h, d): Dims,
    out: &mut [f32],
) -> Result<(), String> {
    let (hd, n_pos) = (h * d, (2 * t).saturating_sub(1));
    let n = b * t * hd;
    let sizes_ok = op.q.len() == n
        && op.k.len() == n
        && op.v.len() == n
        && out.len() == n
        && op.p.len() == n_pos * hd
        && op.u.len() == hd
        && op.pv.len() == hd
        && op.bias.is_none_or(|bias| bias.len() == b * t);
    if !sizes_ok {
        return Err(format!(
            "rel_attention: q/k/v/out {}/{}/{}/{}, p {}, u/v {}/{}, bias {:?} for (b, t, h, d) \
             = ({b}, {t}, {h}, {d})",
            op.q.len(),
            op.k.len(),
            op.v.len(),
            out.len(),
            op.p.len(),
            op.u.len(),
            op.pv.len(),
            op.bias.map(<[f32]>::len)
        ));
    }
    if n == 0 {
        return Ok(());
    }
    let out_ptr = OutPtr(out.as_mut_ptr());
    (0..b * h).into_par_iter().for_each(|task| {
        let (bi, hi) = (task / h, task % h);
        SCRATCH.with(|cell| {
            let mut guard = cell.borrow_mut();
            let s = &mut *guard;
            head(op, (bi, hi), (b, t, h, d), s, out_ptr);
        });
    });
    Ok(())
}

/// One (batch row, head) of [`rel_attention`].
fn head(op: &RelAttention, (bi, hi): (usize, usize), dims: Dims, s: &mut Scratch, out: OutPtr) {
    let (_, t, h, d) = dims;
    let (hd, n_pos) = (h * d, 2 * t - 1);
    let (u, pv) = (&op.u[hi * d..][..d], &op.pv[hi * d..][..d]);
    let qu = sized(&mut s.qu, t * d);
    let qv = sized(&mut s.qv, t * d);
    let kt = sized(&mut s.kt, d * t);
    let v = sized(&mut s.v, t * d);
    let pt = sized(&mut s.pt, d * n_pos);
    let sc = sized(&mut s.scores, t * t);
    let pos = sized(&mut s.pos, ROWS * (t + ROWS - 1));
    for i in 0..t {
        let at = (bi * t + i) * hd + hi * d;
        let q = &op.q[at..at + d];
        for (((a, c), &x), (&bu, &bv)) in qu[i * d..(i + 1) * d]
            .iter_mut()
            .zip(&mut qv[i * d..(i + 1) * d])
            .zip(q)
            .zip(u.iter().zip(pv))
        {
            *a = x + bu;
            *c = x + bv;
        }
        v[i * d..(i + 1) * d].copy_from_slice(&op.v[at..at + d]);
        for (c, &x) in op.k[at..at + d].iter().enumerate() {
            kt[c * t + i] = x;
        }
    }
    for j in 0..n_pos {
        for (c, &x) in op.p[j * hd + hi * d..][..d].iter().enumerate() {
            pt[c * n_pos + j] = x;
        }
    }
    let bias_row = op.bias.map(|bias| &bias[bi * t..(bi + 1) * t]);
    // SAFETY: qu, kt, sc hold (t, d), (d, t), (t, t).
    unsafe {
        gemm_rows(
            (t, t, d),
            (qu.as_ptr(), d),
            (kt.as_ptr(), t),
            (sc.as_mut_ptr(), t),
        )
    };
    for i0 in (0..t).step_by(ROWS) {
        let rows = ROWS.min(t - i0);
        // rel_shift: row i keeps columns t - 1 - i .. 2t - 1 - i of (q + v) p^T; the block's
        // rows need columns c0 .. c0 + w
        let (c0, w) = (t - i0 - rows, t + rows - 1);
        // SAFETY: qv rows i0.. (rows x d, stride d), pt columns c0..c0 + w <= 2t - 1 (d rows
        // of stride 2t - 1), pos rows x w <= ROWS x (t + ROWS - 1).
        unsafe {
            gemm_rows(
                (rows, w, d),
                (qv.as_ptr().add(i0 * d), d),
                (pt.as_ptr().add(c0), n_pos),
                (pos.as_mut_ptr(), w),
            )
        };
        for r in 0..rows {
            let i = i0 + r;
            let row = &mut sc[i * t..(i + 1) * t];
            for (a, &p) in row.iter_mut().zip(&pos[r * w + rows - 1 - r..][..t]) {
                *a = (*a + p) * op.scale;
            }
            softmax_one(row, bias_row);
        }
    }
    // SAFETY: sc (t, t) and v (t, d); the output block of (bi, hi) is t rows of d floats at
    // stride h d inside `out` (length checked by the caller), written by this task only.
    unsafe {
        gemm_rows(
            (t, d, t),
            (sc.as_ptr(), t),
            (v.as_ptr(), d),
            (out.0.add(bi * t * hd + hi * d), hd),
        )
    };
}

/// [`rel_attention`] on tensors: `q`, `k`, `v` `(b, t, h d)`, `p` `(1, 2t - 1, h d)`, `u` and
/// `pv` `(h, d)`, `key_bias` `(b, 1, 1, t)`; returns `(b, t, h d)`. `None` unless every operand
/// is a contiguous f32 CPU tensor (the caller then takes the tensor path).
pub(crate) fn rel_attention_tensors(
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    p: &Tensor,
    (u, pv): (&Tensor, &Tensor),
    key_bias: Option<&Tensor>,
    heads: usize,
    scale: f32,
) -> candle_core::Result<Option<Tensor>> {
    let all = [q, k, v, p, u, pv];
    let fast = |x: &Tensor| x.device().is_cpu() && x.dtype() == DType::F32 && x.is_contiguous();
    let (b, t, hd) = q.dims3()?;
    if !all.iter().all(|x| fast(x)) || heads == 0 || !hd.is_multiple_of(heads) || p.dim(0)? != 1 {
        return Ok(None);
    }
    let bias = key_bias
        .map(|kb| kb.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>())
        .transpose()?;
    let guards: Vec<_> = all.iter().map(|x| x.storage_and_layout()).collect();
    let mut slices = Vec::with_capacity(all.len());
    for (storage, layout) in &guards {
        let (Storage::Cpu(cpu), Some((a, z))) = (&**storage, layout.contiguous_offsets()) else {
            return Ok(None);
        };
        slices.push(&cpu.as_slice::<f32>()?[a..z]);
    }
    let &[qs, ks, vs, ps, us, pvs] = slices.as_slice() else {
        return Ok(None);
    };
    let op = RelAttention {
        q: qs,
        k: ks,
        v: vs,
        p: ps,
        u: us,
        pv: pvs,
        bias: bias.as_deref(),
        scale,
    };
    let mut out = vec![0f32; b * t * hd];
    rel_attention(&op, (b, t, heads, hd / heads), &mut out).map_err(candle_core::Error::Msg)?;
    Ok(Some(Tensor::from_vec(out, (b, t, hd), q.device())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's formulation in f64: full `(t, 2t - 1)` position scores, then the shift.
    fn reference(op: &RelAttention, (b, t, h, d): Dims) -> Vec<f64> {
        let hd = h * d;
        let mut out = vec![0f64; b * t * hd];
        for bi in 0..b {
            for hi in 0..h {
                let at = |x: &[f32], i: usize, c: usize| x[(bi * t + i) * hd + hi * d + c] as f64;
                for i in 0..t {
                    let mut s: Vec<f64> = (0..t)
                        .map(|j| {
                            let (mut ac, mut bd) = (0f64, 0f64);
                            let jp = t - 1 - i + j; // rel_shift
                            for c in 0..d {
                                let q = at(op.q, i, c);
                                ac += (q + op.u[hi * d + c] as f64) * at(op.k, j, c);
                                bd += (q + op.pv[hi * d + c] as f64)
                                    * op.p[jp * hd + hi * d + c] as f64;
                            }
                            let bias = op.bias.map_or(0.0, |bb| bb[bi * t + j] as f64);
                            (ac + bd) * op.scale as f64 + bias
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    s.iter_mut().for_each(|x| *x = (*x - m).exp());
                    let z: f64 = s.iter().sum();
                    for c in 0..d {
                        out[(bi * t + i) * hd + hi * d + c] =
                            (0..t).map(|j| s[j] / z * at(op.v, j, c)).sum();
                    }
                }
            }
        }
        out
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2654435761).wrapping_add(12345);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x as f32 / u32::MAX as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn matches_the_reference_formulation() {
        // t across the row blocks (64), two heads, a padded second batch row
        for (b, t, h, d) in [
            (2usize, 150usize, 2usize, 8usize),
            (1, 1, 1, 4),
            (1, 64, 3, 5),
        ] {
            let (n, hd) = (b * t * h * d, h * d);
            let (q, k, v) = (values(n, 1), values(n, 2), values(n, 3));
            let p = values((2 * t - 1) * hd, 4);
            let (u, pv) = (values(hd, 5), values(hd, 6));
            let mut bias = vec![0f32; b * t];
            if b > 1 {
                for x in &mut bias[2 * t - t / 3..] {
                    *x = f32::NEG_INFINITY;
                }
            }
            let op = RelAttention {
                q: &q,
                k: &k,
                v: &v,
                p: &p,
                u: &u,
                pv: &pv,
                bias: Some(&bias),
                scale: 0.5,
            };
            let mut out = vec![0f32; n];
            rel_attention(&op, (b, t, h, d), &mut out).unwrap();
            let want = reference(&op, (b, t, h, d));
            let err = out
                .iter()
                .zip(&want)
                .map(|(&a, &w)| (a as f64 - w).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-5, "({b}, {t}, {h}, {d}): {err}");
        }
        let mut out = vec![0f32; 4];
        let short = RelAttention {
            q: &[0.0; 4],
            k: &[0.0; 4],
            v: &[0.0; 4],
            p: &[0.0; 4],
            u: &[0.0; 4],
            pv: &[0.0; 4],
            bias: None,
            scale: 1.0,
        };
        assert!(rel_attention(&short, (1, 2, 1, 2), &mut out).is_err());
    }
}
