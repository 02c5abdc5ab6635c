//! A row-oriented matrix product against a right-hand side packed once at load time:
//! `out[r, :] = sum_c row(c, r) · B[c * chunk_len .. (c + 1) * chunk_len, :]`.
//!
//! The left-hand rows are given in chunks (`row(c, r)`, a slice of `chunk_len` values), so a
//! convolution reads its input in place (one chunk per kernel tap) instead of building an
//! im2col matrix, and the LSTM recurrence reads its hidden state directly. `B` is packed into
//! panels of 16 columns (`k x 16` each), so the micro-kernel streams it sequentially; each call
//! of the micro-kernel keeps up to 6 rows x 16 columns (AVX2) or 6 rows x 64 columns (AVX-512)
//! of accumulators in registers.
#[cfg(target_arch = "x86_64")]
use chatterbox_cpu::{avx2_fma, avx512f};

/// Columns per panel (two AVX registers).
pub(crate) const NR: usize = 16;
/// Rows per micro-kernel call.
pub(crate) const MR: usize = 6;

/// A right-hand side `B` (`k x n`) packed into `ceil(n / 16)` panels of `k x 16` values
/// (columns past `n` are zero).
#[derive(Debug, Clone)]
pub(crate) struct PackedB {
    k: usize,
    n: usize,
    panels: Vec<f32>,
}

impl PackedB {
    /// Packs `B[kk, j] = f(kk, j)`.
    pub fn new(k: usize, n: usize, f: impl Fn(usize, usize) -> f32) -> Self {
        let np = n.div_ceil(NR);
        let mut panels = vec![0f32; np * k * NR];
        for p in 0..np {
            for kk in 0..k {
                for jj in 0..NR.min(n - p * NR) {
                    panels[(p * k + kk) * NR + jj] = f(kk, p * NR + jj);
                }
            }
        }
        Self { k, n, panels }
    }

    /// `w^T` for a row-major `(n, k)` weight `w` (a PyTorch `Linear`/LSTM weight).
    pub fn from_weight(w: &[f32], n: usize, k: usize) -> Self {
        Self::new(k, n, |kk, j| w[j * k + kk])
    }

    /// The row stride of [`gemm_rows_into`]'s output: `n` rounded up to whole panels.
    pub fn ldc(&self) -> usize {
        self.n.div_ceil(NR) * NR
    }
}

/// Left-hand values per k-block: a panel's slice of `B` (`KC x 16`, 20 KiB) and the 6 rows'
/// values (7.5 KiB) stay in L1 while the micro-kernel runs.
const KC: usize = 320;
/// Rows per row block: their k-block (90 KiB) stays in L2 while every panel passes over it.
const MC: usize = 72;

/// One piece of a k-block for `R` rows: each row's `len` values, against rows
/// `koff..koff + len` of `B`.
#[derive(Clone, Copy)]
struct Seg<'a, const R: usize> {
    a: [&'a [f32]; R],
    len: usize,
    koff: usize,
}

/// `c[r * ldc + q * 16 + j] += sum_seg sum_i seg.a[r][i] * panel_{p0 + q}[seg.koff + i][j]`:
/// `R` rows against `P` panels of 16 columns, over all the pieces of a k-block (few rows use
/// several panels to keep enough independent accumulators). Portable version.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register-blocked accumulators, indexed on purpose
fn micro_generic<const R: usize, const P: usize>(
    segs: &[Seg<R>],
    b: &PackedB,
    p0: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let mut acc = [[[0f32; NR]; P]; R];
    for seg in segs {
        for q in 0..P {
            let panel = &b.panels[((p0 + q) * b.k + seg.koff) * NR..];
            for i in 0..seg.len {
                let w = &panel[i * NR..(i + 1) * NR];
                for r in 0..R {
                    let av = seg.a[r][i];
                    for j in 0..NR {
                        acc[r][q][j] += av * w[j];
                    }
                }
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (q, acc) in acc.iter().enumerate() {
            for (o, v) in c[r * ldc + q * NR..r * ldc + (q + 1) * NR]
                .iter_mut()
                .zip(acc)
            {
                *o += v;
            }
        }
    }
}

/// The AVX2+FMA micro-kernel: `2 * R * P` accumulators, plus two panel values and the `R`
/// broadcasts live at once, must fit the 16 vector registers.
///
/// # Safety
/// The CPU must support AVX2 and FMA; for every piece, every `a[r]` must hold at least `len`
/// values and `B` must have the rows `koff..koff + len`; `p0 + P` panels must exist; `c` must
/// hold at least `(R - 1) * ldc + P * 16` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn micro_avx2<const R: usize, const P: usize>(
    segs: &[Seg<R>],
    b: &PackedB,
    p0: usize,
    c: &mut [f32],
    ldc: usize,
) {
    use std::arch::x86_64::*;
    let cp = c.as_mut_ptr();
    let mut c0 = [[_mm256_setzero_ps(); P]; R];
    let mut c1 = [[_mm256_setzero_ps(); P]; R];
    for r in 0..R {
        for q in 0..P {
            c0[r][q] = _mm256_loadu_ps(cp.add(r * ldc + q * NR));
            c1[r][q] = _mm256_loadu_ps(cp.add(r * ldc + q * NR + 8));
        }
    }
    for seg in segs {
        let ap: [*const f32; R] = std::array::from_fn(|r| seg.a[r].as_ptr());
        let bp: [*const f32; P] =
            std::array::from_fn(|q| b.panels.as_ptr().add(((p0 + q) * b.k + seg.koff) * NR));
        for i in 0..seg.len {
            for q in 0..P {
                let w0 = _mm256_loadu_ps(bp[q].add(i * NR));
                let w1 = _mm256_loadu_ps(bp[q].add(i * NR + 8));
                for r in 0..R {
                    let av = _mm256_broadcast_ss(&*ap[r].add(i));
                    c0[r][q] = _mm256_fmadd_ps(av, w0, c0[r][q]);
                    c1[r][q] = _mm256_fmadd_ps(av, w1, c1[r][q]);
                }
            }
        }
    }
    for r in 0..R {
        for q in 0..P {
            _mm256_storeu_ps(cp.add(r * ldc + q * NR), c0[r][q]);
            _mm256_storeu_ps(cp.add(r * ldc + q * NR + 8), c1[r][q]);
        }
    }
}

/// The AVX-512 micro-kernel: one 16-lane register per panel, so `R * P` accumulators (at most
/// 24 of the 32 registers) plus the `P` panel values.
///
/// # Safety
/// The CPU must support AVX-512F; the operands as for [`micro_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // register-blocked accumulators, indexed on purpose
unsafe fn micro_avx512<const R: usize, const P: usize>(
    segs: &[Seg<R>],
    b: &PackedB,
    p0: usize,
    c: &mut [f32],
    ldc: usize,
) {
    use std::arch::x86_64::*;
    let cp = c.as_mut_ptr();
    let mut acc = [[_mm512_setzero_ps(); P]; R];
    for r in 0..R {
        for q in 0..P {
            acc[r][q] = _mm512_loadu_ps(cp.add(r * ldc + q * NR));
        }
    }
    for seg in segs {
        let ap: [*const f32; R] = std::array::from_fn(|r| seg.a[r].as_ptr());
        let bp: [*const f32; P] =
            std::array::from_fn(|q| b.panels.as_ptr().add(((p0 + q) * b.k + seg.koff) * NR));
        for i in 0..seg.len {
            let w: [__m512; P] = std::array::from_fn(|q| _mm512_loadu_ps(bp[q].add(i * NR)));
            for r in 0..R {
                let av = _mm512_set1_ps(*ap[r].add(i));
                for q in 0..P {
                    acc[r][q] = _mm512_fmadd_ps(av, w[q], acc[r][q]);
                }
            }
        }
    }
    for r in 0..R {
        for q in 0..P {
            _mm512_storeu_ps(cp.add(r * ldc + q * NR), acc[r][q]);
        }
    }
}

/// One micro-kernel call, dispatched. Panics if an operand is too short (a caller bug).
#[inline]
fn micro<const R: usize, const P: usize>(
    segs: &[Seg<R>],
    b: &PackedB,
    p0: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let np = b.n.div_ceil(NR);
    assert!(
        p0 + P <= np
            && c.len() >= (R - 1) * ldc + P * NR
            && segs
                .iter()
                .all(|s| s.koff + s.len <= b.k && s.a.iter().all(|a| a.len() >= s.len)),
        "micro-kernel: operands too short"
    );
    #[cfg(target_arch = "x86_64")]
    if avx512f() {
        // SAFETY: AVX-512F is available (checked at run time) and the operand sizes were
        // checked just above.
        unsafe { micro_avx512::<R, P>(segs, b, p0, c, ldc) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: AVX2 and FMA are available (checked at run time) and the operand sizes were
        // checked just above.
        unsafe { micro_avx2::<R, P>(segs, b, p0, c, ldc) };
        return;
    }
    micro_generic::<R, P>(segs, b, p0, c, ldc);
}

/// Whether the micro-kernel runs on 16-lane registers (AVX-512).
fn wide_registers() -> bool {
    chatterbox_cpu::avx512f()
}

/// The pieces of one k-block: `(chunk, offset in the chunk, len)`.
fn k_blocks(chunks: usize, chunk_len: usize) -> Vec<Vec<(usize, usize, usize)>> {
    let mut blocks = Vec::new();
    if chunk_len > KC {
        for c in 0..chunks {
            let mut off = 0;
            while off < chunk_len {
                let len = KC.min(chunk_len - off);
                blocks.push(vec![(c, off, len)]);
                off += len;
            }
        }
    } else {
        let per = (KC / chunk_len.max(1)).max(1);
        let all: Vec<_> = (0..chunks).map(|c| (c, 0, chunk_len)).collect();
        blocks.extend(all.chunks(per).map(<[_]>::to_vec));
    }
    blocks
}

/// The pieces of rows `r..r + R` of one k-block.
fn segs<'a, const R: usize>(
    r: usize,
    pieces: &[(usize, usize, usize)],
    chunk_len: usize,
    row: &impl Fn(usize, usize) -> &'a [f32],
) -> Vec<Seg<'a, R>> {
    pieces
        .iter()
        .map(|&(chunk, off, len)| Seg {
            a: std::array::from_fn(|i| &row(chunk, r + i)[off..]),
            len,
            koff: chunk * chunk_len + off,
        })
        .collect()
}

/// `rows < 6` rows from `r` against every panel, with enough panels per call to keep enough
/// accumulators in flight: a 16-column panel is two AVX2 registers but one AVX-512 register,
/// and with AVX-512 the calls keep 15-20 (8 for one row). The LSTM's recurrence runs 3-6 rows
/// per thread: 4 rows x 4 panels took the VoiceEncoder on 6 s from 15.1-16.4 to 14.2-14.5 ms
/// against 4 x 2. Which columns share a call does not change any sum's order.
#[allow(clippy::too_many_arguments)]
fn few_rows<'a>(
    rows: usize,
    r: usize,
    pieces: &[(usize, usize, usize)],
    chunk_len: usize,
    row: &impl Fn(usize, usize) -> &'a [f32],
    b: &PackedB,
    c: &mut [f32],
    ldc: usize,
) {
    match (rows, wide_registers()) {
        (0, _) => {}
        (1, false) => all_panels::<1, 6>(r, pieces, chunk_len, row, b, c, ldc),
        (2, false) => all_panels::<2, 2>(r, pieces, chunk_len, row, b, c, ldc),
        (3, false) => all_panels::<3, 1>(r, pieces, chunk_len, row, b, c, ldc),
        (4, false) => all_panels::<4, 1>(r, pieces, chunk_len, row, b, c, ldc),
        (_, false) => all_panels::<5, 1>(r, pieces, chunk_len, row, b, c, ldc),
        (1, true) => all_panels::<1, 8>(r, pieces, chunk_len, row, b, c, ldc),
        (2, true) => all_panels::<2, 8>(r, pieces, chunk_len, row, b, c, ldc),
        (3, true) => all_panels::<3, 5>(r, pieces, chunk_len, row, b, c, ldc),
        (4, true) => all_panels::<4, 4>(r, pieces, chunk_len, row, b, c, ldc),
        (_, true) => all_panels::<5, 4>(r, pieces, chunk_len, row, b, c, ldc),
    }
}

/// Rows `r..r + R` (a single small block) against every panel: `P` panels per call where
/// possible, so that few rows still keep enough accumulators busy.
#[allow(clippy::too_many_arguments)]
fn all_panels<'a, const R: usize, const P: usize>(
    r: usize,
    pieces: &[(usize, usize, usize)],
    chunk_len: usize,
    row: &impl Fn(usize, usize) -> &'a [f32],
    b: &PackedB,
    c: &mut [f32],
    ldc: usize,
) {
    let segs = segs::<R>(r, pieces, chunk_len, row);
    let np = b.n.div_ceil(NR);
    let mut p = 0;
    while p + P <= np {
        micro::<R, P>(&segs, b, p, &mut c[p * NR..], ldc);
        p += P;
    }
    while p < np {
        micro::<R, 1>(&segs, b, p, &mut c[p * NR..], ldc);
        p += 1;
    }
}

/// Computes rows `r0..r0 + m` of `sum_c row(c, r) · B[c * chunk_len.., :]` (`chunks *
/// chunk_len` must equal `B`'s `k`) and hands each finished row to `emit(r, values)`.
///
/// Blocked like a BLIS GEMM: row blocks of up to 72 rows and k-blocks of up to 320 values
/// (whole chunks, or pieces of a long one); for each k-block every 16-column panel of `B`
/// passes over the whole row block in micro-kernel calls of 6 rows, which keep their
/// accumulators in registers across the chunks of the k-block. The row slices are looked up
/// once per row block and k-block.
pub(crate) fn gemm_rows<'a>(
    r0: usize,
    m: usize,
    chunks: usize,
    chunk_len: usize,
    row: impl Fn(usize, usize) -> &'a [f32],
    b: &PackedB,
    mut emit: impl FnMut(usize, &[f32]),
) {
    let (n, ldc) = (b.n, b.ldc());
    let mut cbuf = vec![0f32; MC.min(m) * ldc];
    let mut rb = r0;
    while rb < r0 + m {
        let mr = MC.min(r0 + m - rb);
        let block = &mut cbuf[..mr * ldc];
        block.fill(0.0);
        gemm_rows_into(rb, mr, chunks, chunk_len, &row, b, block);
        for (i, v) in block.chunks_exact(ldc).enumerate() {
            emit(rb + i, &v[..n]);
        }
        rb += mr;
    }
}

/// The same product added to `c` in place: row `r0 + i` goes to `c[i * ldc..]`, where `ldc`
/// ([`PackedB::ldc`]) is `B`'s width rounded up to whole panels (the columns past it get
/// zeros added). Saves [`gemm_rows`]'s buffer and copy where the caller has the addend laid
/// out already (the LSTM's projected inputs).
pub(crate) fn gemm_rows_into<'a>(
    r0: usize,
    m: usize,
    chunks: usize,
    chunk_len: usize,
    row: impl Fn(usize, usize) -> &'a [f32],
    b: &PackedB,
    c: &mut [f32],
) {
    assert_eq!(chunks * chunk_len, b.k, "gemm_rows: chunks do not cover B");
    let ldc = b.ldc();
    assert!(c.len() >= m * ldc, "gemm_rows_into: output too short");
    let blocks = k_blocks(chunks, chunk_len);
    let mut rb = 0;
    while rb < m {
        let mr = MC.min(m - rb);
        let block = &mut c[rb * ldc..(rb + mr) * ldc];
        row_block(r0 + rb, mr, &blocks, chunk_len, &row, b, block, ldc);
        rb += mr;
    }
}

/// Adds rows `rb..rb + mr` of the product to `c` (`mr` rows of `ldc`).
#[allow(clippy::too_many_arguments)]
fn row_block<'a>(
    rb: usize,
    mr: usize,
    blocks: &[Vec<(usize, usize, usize)>],
    chunk_len: usize,
    row: &impl Fn(usize, usize) -> &'a [f32],
    b: &PackedB,
    c: &mut [f32],
    ldc: usize,
) {
    let np = b.n.div_ceil(NR);
    for pieces in blocks {
        let (full, rem) = (mr / MR, mr % MR);
        if full == 0 {
            few_rows(rem, rb, pieces, chunk_len, row, b, c, ldc);
            continue;
        }
        let subs: Vec<Vec<Seg<6>>> = (0..full)
            .map(|j| segs::<6>(rb + j * MR, pieces, chunk_len, row))
            .collect();
        // With AVX-512 a panel is one register: four panels per call keep 24 independent
        // accumulators in flight (the AVX2 kernel gets 12 from one panel).
        let mut p = 0;
        for step in if wide_registers() {
            [4, 2, 1]
        } else {
            [1, 1, 1]
        } {
            while p + step <= np {
                for (j, s) in subs.iter().enumerate() {
                    let c = &mut c[j * MR * ldc + p * NR..];
                    match step {
                        4 => micro::<6, 4>(s, b, p, c, ldc),
                        2 => micro::<6, 2>(s, b, p, c, ldc),
                        _ => micro::<6, 1>(s, b, p, c, ldc),
                    }
                }
                p += step;
            }
        }
        let (r, c) = (rb + full * MR, &mut c[full * MR * ldc..]);
        few_rows(rem, r, pieces, chunk_len, row, b, c, ldc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    #[test]
    fn matches_naive_for_every_row_count_and_chunking() {
        // 3 panels, and 10 (calls of 8, 5, 4, 2 and 1 panels, with remainders)
        for n in [37, 149] {
            matches_naive(n);
        }
    }

    fn matches_naive(n: usize) {
        let k = 12;
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1)
            .collect();
        let b = PackedB::from_weight(&w, n, k);
        for (chunks, chunk_len) in [(1, 12), (3, 4)] {
            for m in 1..=14 {
                let a: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.2)
                    .collect();
                let row =
                    |c: usize, r: usize| &a[r * k + c * chunk_len..r * k + (c + 1) * chunk_len];
                let mut out = vec![0f32; m * n];
                gemm_rows(0, m, chunks, chunk_len, row, &b, |r, v| {
                    out[r * n..(r + 1) * n].copy_from_slice(v)
                });
                // in place, onto an addend, from the second row on
                let ldc = b.ldc();
                let addend = |r: usize, j: usize| {
                    if j < n {
                        (r * 3 + j) as f32 * 0.01
                    } else {
                        0.0
                    }
                };
                let mut acc: Vec<f32> = (0..(m - 1) * ldc)
                    .map(|i| addend(i / ldc + 1, i % ldc))
                    .collect();
                gemm_rows_into(1, m - 1, chunks, chunk_len, row, &b, &mut acc);
                for r in 0..m {
                    for j in 0..n {
                        let e: f32 = (0..k).map(|i| a[r * k + i] * w[j * k + i]).sum();
                        assert_abs_diff_eq!(out[r * n + j], e, epsilon = 1e-5);
                        if r > 0 {
                            let got = acc[(r - 1) * ldc + j];
                            assert_abs_diff_eq!(got, e + addend(r, j), epsilon = 1e-5);
                        }
                    }
                }
                // the padding columns only get zeros added
                assert!(
                    (0..m - 1).all(|r| acc[r * ldc + n..(r + 1) * ldc].iter().all(|&v| v == 0.0))
                );
            }
        }
    }
}
