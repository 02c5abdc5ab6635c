//! Stride-1 `conv1d` on the CPU: blocked im2col + GEMM with a fused input activation, bias and
//! residual.
use super::vmath::sin;
use super::SendPtr;
use rayon::prelude::*;

/// The activation applied to the convolution's input (per channel for Snake).
#[derive(Debug, Clone, Copy)]
pub(crate) enum PreAct<'a> {
    /// None.
    Identity,
    /// `x + inv_alpha * sin(alpha * x)^2` (hifigan.py `Snake`).
    Snake {
        alpha: &'a [f32],
        inv_alpha: &'a [f32],
    },
    /// `x > 0 ? x : slope * x` (torch `leaky_relu`).
    LeakyRelu(f32),
}

/// A stride-1 `Conv1d(c_in, c_out, k, padding, dilation)`.
#[derive(Debug, Clone)]
pub(crate) struct Conv1dKernel {
    c_in: usize,
    c_out: usize,
    k: usize,
    dilation: usize,
    padding: usize,
    /// torch's `[c_out][c_in][k]`: a `(c_out, c_in * k)` GEMM operand.
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl Conv1dKernel {
    /// From torch's `(c_out, c_in, k)` weight (row-major) and `(c_out,)` bias.
    pub fn new(
        weight: &[f32],
        bias: Vec<f32>,
        c_out: usize,
        c_in: usize,
        k: usize,
        padding: usize,
        dilation: usize,
    ) -> Self {
        Self {
            c_in,
            c_out,
            k,
            dilation,
            padding,
            weight: weight.to_vec(),
            bias,
        }
    }

    pub fn c_in(&self) -> usize {
        self.c_in
    }

    pub fn c_out(&self) -> usize {
        self.c_out
    }

    /// Output length for `len` input samples, if positive.
    pub fn out_len(&self, len: usize) -> Option<usize> {
        (len + 2 * self.padding)
            .checked_sub(self.dilation * (self.k - 1))
            .filter(|&n| n > 0)
    }

    /// `conv(act(x)) + bias (+ residual)` for `x` `(batch, c_in, len)`, `residual`
    /// `(batch, c_out, out_len)`; returns `(batch, c_out, out_len)`.
    pub fn run(
        &self,
        x: &[f32],
        batch: usize,
        len: usize,
        act: PreAct,
        residual: Option<&[f32]>,
    ) -> Vec<f32> {
        let Some(lo) = self.out_len(len) else {
            return Vec::new();
        };
        let (c_in, c_out, p) = (self.c_in, self.c_out, self.padding);
        let lp = len + 2 * p;
        let mut out = vec![0f32; batch * c_out * lo];
        let mut xp = vec![0f32; c_in * lp];
        for b in 0..batch {
            let xb = &x[b * c_in * len..(b + 1) * c_in * len];
            // Padded, activated input, one channel per task.
            xp.par_chunks_mut(lp)
                .zip(xb.par_chunks(len))
                .enumerate()
                .for_each(|(ci, (dst, src))| activate(&mut dst[p..p + len], src, act, ci));
            // The output starts as bias (+ residual).
            let ob = &mut out[b * c_out * lo..(b + 1) * c_out * lo];
            let rb = residual.map(|r| &r[b * c_out * lo..(b + 1) * c_out * lo]);
            ob.par_chunks_mut(lo)
                .enumerate()
                .for_each(|(co, row)| match rb {
                    Some(r) => {
                        let bias = self.bias[co];
                        for (o, &v) in row.iter_mut().zip(&r[co * lo..(co + 1) * lo]) {
                            *o = v + bias;
                        }
                    }
                    None => row.fill(self.bias[co]),
                });
            self.im2col_gemm(&xp, lp, SendPtr(ob.as_mut_ptr()), lo);
        }
        out
    }
}

impl Conv1dKernel {
    /// Per block of output positions: an im2col tile `(c_in * k, block)` copied from the padded
    /// input (L2-sized), then one GEMM with the whole `(c_out, c_in * k)` weight.
    fn im2col_gemm(&self, xp: &[f32], lp: usize, dst: SendPtr, lo: usize) {
        let (c_in, c_out, k, d) = (self.c_in, self.c_out, self.k, self.dilation);
        let kk = c_in * k;
        // ~512 KiB of im2col tile per block.
        let block = (131_072 / kk.max(1)).clamp(48, 4096).min(lo);
        let n_blocks = lo.div_ceil(block);
        (0..n_blocks)
            .into_par_iter()
            .for_each_init(Vec::new, |col: &mut Vec<f32>, i| {
                let start = i * block;
                let m = block.min(lo - start);
                col.resize(kk * m, 0.0);
                for ci in 0..c_in {
                    let row = &xp[ci * lp..(ci + 1) * lp];
                    for t in 0..k {
                        let off = start + t * d;
                        col[(ci * k + t) * m..(ci * k + t + 1) * m]
                            .copy_from_slice(&row[off..off + m]);
                    }
                }
                // SAFETY: dst[co * lo + start .. + m] is in bounds for every co, and blocks of
                // different workers are disjoint; col and the weight are read only.
                unsafe {
                    gemm::gemm(
                        m,
                        c_out,
                        kk,
                        dst.get().add(start),
                        lo as isize,
                        1,
                        true,
                        col.as_ptr(),
                        m as isize,
                        1,
                        self.weight.as_ptr(),
                        kk as isize,
                        1,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
            });
    }
}

fn activate(dst: &mut [f32], src: &[f32], act: PreAct, channel: usize) {
    match act {
        PreAct::Identity => dst.copy_from_slice(src),
        PreAct::Snake { alpha, inv_alpha } => {
            snake_row(dst, src, alpha[channel], inv_alpha[channel])
        }
        PreAct::LeakyRelu(slope) => {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = if v > 0.0 { v } else { v * slope };
            }
        }
    }
}

/// `dst = src + inv_alpha * sin(alpha * src)^2`, vectorised with AVX2 where the CPU has it.
pub(crate) fn snake_row(dst: &mut [f32], src: &[f32], alpha: f32, inv_alpha: f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if chatterbox_cpu::avx2() {
            // SAFETY: the CPU supports AVX2 (checked above).
            unsafe { snake_row_avx2(dst, src, alpha, inv_alpha) };
            return;
        }
    }
    snake_row_generic(dst, src, alpha, inv_alpha);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn snake_row_avx2(dst: &mut [f32], src: &[f32], alpha: f32, inv_alpha: f32) {
    snake_row_generic(dst, src, alpha, inv_alpha)
}

#[inline(always)]
fn snake_row_generic(dst: &mut [f32], src: &[f32], alpha: f32, inv_alpha: f32) {
    for (d, &v) in dst.iter_mut().zip(src) {
        let s = sin(v * alpha);
        *d = v + inv_alpha * (s * s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct evaluation of torch's definition.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        b: usize,
        c_in: usize,
        c_out: usize,
        k: usize,
        len: usize,
        p: usize,
        d: usize,
    ) -> Vec<f32> {
        let lo = len + 2 * p - d * (k - 1);
        let mut out = vec![0f32; b * c_out * lo];
        for bi in 0..b {
            for co in 0..c_out {
                for j in 0..lo {
                    let mut acc = bias[co] as f64;
                    for ci in 0..c_in {
                        for t in 0..k {
                            let pos = (j + t * d) as isize - p as isize;
                            if pos >= 0 && (pos as usize) < len {
                                acc += (w[(co * c_in + ci) * k + t]
                                    * x[(bi * c_in + ci) * len + pos as usize])
                                    as f64;
                            }
                        }
                    }
                    out[(bi * c_out + co) * lo + j] = acc as f32;
                }
            }
        }
        out
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i + seed) * 7919 % 1013) as f32 / 506.5) - 1.0)
            .collect()
    }

    #[test]
    fn matches_the_definition_with_activations_and_residual() {
        for &(b, c_in, c_out, k, len, p, d) in &[
            (1, 3, 5, 3, 40, 1, 1),
            (2, 4, 6, 7, 300, 9, 3),
            (1, 8, 16, 11, 3000, 25, 5),
            (1, 5, 2, 1, 17, 0, 1),
            (1, 2, 3, 5, 9, 0, 2),
        ] {
            let x = values(b * c_in * len, 1);
            let w = values(c_out * c_in * k, 2);
            let bias = values(c_out, 3);
            let kern = Conv1dKernel::new(&w, bias.clone(), c_out, c_in, k, p, d);
            let lo = kern.out_len(len).unwrap();
            let got = kern.run(&x, b, len, PreAct::Identity, None);
            let want = naive(&x, &w, &bias, b, c_in, c_out, k, len, p, d);
            assert_eq!(got.len(), want.len());
            for (g, e) in got.iter().zip(&want) {
                assert!((g - e).abs() < 1e-4, "{g} vs {e}");
            }
            // Snake input + residual.
            let alpha: Vec<f32> = (0..c_in).map(|i| 0.5 + i as f32 * 0.1).collect();
            let inv: Vec<f32> = alpha.iter().map(|a| 1.0 / (a + 1e-9)).collect();
            let xs: Vec<f32> = x
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let a = alpha[(i / len) % c_in];
                    v + (1.0 / (a + 1e-9)) * (v * a).sin().powi(2)
                })
                .collect();
            let res = values(b * c_out * lo, 4);
            let got = kern.run(
                &x,
                b,
                len,
                PreAct::Snake {
                    alpha: &alpha,
                    inv_alpha: &inv,
                },
                Some(&res),
            );
            let want = naive(&xs, &w, &bias, b, c_in, c_out, k, len, p, d);
            for ((g, e), r) in got.iter().zip(&want).zip(&res) {
                assert!((g - (e + r)).abs() < 1e-4, "{g} vs {}", e + r);
            }
            // Leaky ReLU input.
            let xl: Vec<f32> = x
                .iter()
                .map(|&v| if v > 0.0 { v } else { 0.1 * v })
                .collect();
            let got = kern.run(&x, b, len, PreAct::LeakyRelu(0.1), None);
            let want = naive(&xl, &w, &bias, b, c_in, c_out, k, len, p, d);
            for (g, e) in got.iter().zip(&want) {
                assert!((g - e).abs() < 1e-4, "{g} vs {e}");
            }
        }
    }
}
