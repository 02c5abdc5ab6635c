//! The FCM front end on the CPU: `(time, freq, channel)` images zero-padded by one pixel, each
//! 3x3 convolution one [`gemm_rows`] product over the 9 taps read in place (plus the shortcut
//! as a tenth chunk in residual blocks).
use super::{host, not_on_cpu, par_rows};
use crate::campplus::batch_norm::ConvWeights;
use crate::kernels::{gemm_rows, PackedB};
use crate::Result;

/// A `(time, freq, channel)` image with one pixel of zeros around time and frequency.
pub(super) struct Image {
    t: usize,
    h: usize,
    c: usize,
    data: Vec<f32>,
}

impl Image {
    fn zeros(t: usize, h: usize, c: usize) -> Self {
        Self {
            t,
            h,
            c,
            data: vec![0f32; (t + 2) * (h + 2) * c],
        }
    }

    /// Time frames.
    pub(super) fn frames(&self) -> usize {
        self.t
    }

    /// Values per time frame without the padding (`h * c`, frequency-major).
    pub(super) fn frame_len(&self) -> usize {
        self.h * self.c
    }

    /// Time frame `tt` without the padding: `h` pixels of `c` channels.
    pub(super) fn frame(&self, tt: usize) -> &[f32] {
        let start = ((tt + 1) * (self.h + 2) + 1) * self.c;
        &self.data[start..start + self.h * self.c]
    }
}

/// A 3x3 convolution over (freq, time) with padding 1 and frequency stride `stride`, its
/// BatchNorm folded, then ReLU; optionally plus a shortcut from the residual block's input.
pub(super) struct Conv3 {
    w: PackedB,
    bias: Vec<f32>,
    c_out: usize,
    stride: usize,
    /// Frequency stride at which the shortcut chunk reads the block input, if any.
    shortcut: Option<usize>,
}

/// How a residual block's input reaches its output.
pub(super) enum Shortcut<'a> {
    Identity,
    /// Folded 1x1 convolution `(c_out, c_in)` and its bias.
    Projection(&'a [f32], &'a [f32]),
}

impl Conv3 {
    /// `conv` holds a PyTorch `(c_out, c_in, 3 (freq), 3 (time))` weight. Chunk `dt * 3 + df`
    /// is tap `(df, dt)`; chunk 9 (when `shortcut` is given) the shortcut, whose input must
    /// have `c_in` channels too, read at frequency stride `sc_stride`.
    pub(super) fn new(
        conv: &ConvWeights,
        c_in: usize,
        c_out: usize,
        stride: usize,
        shortcut: Option<(Shortcut, usize)>,
    ) -> Result<Self> {
        let (w, b) = host(conv, c_out * c_in * 9)?;
        let mut bias = b.ok_or_else(not_on_cpu)?.to_vec();
        let taps = if shortcut.is_some() { 10 } else { 9 };
        let proj = match &shortcut {
            Some((Shortcut::Projection(pw, pb), _)) => {
                bias.iter_mut().zip(pb.iter()).for_each(|(a, b)| *a += b);
                Some(*pw)
            }
            _ => None,
        };
        let packed = PackedB::new(taps * c_in, c_out, |k, co| {
            let (tap, ci) = (k / c_in, k % c_in);
            if tap < 9 {
                let (dt, df) = (tap / 3, tap % 3);
                w[((co * c_in + ci) * 3 + df) * 3 + dt]
            } else if let Some(pw) = proj {
                pw[co * c_in + ci]
            } else {
                f32::from(u8::from(ci == co))
            }
        });
        Ok(Self {
            w: packed,
            bias,
            c_out,
            stride,
            shortcut: shortcut.map(|(_, s)| s),
        })
    }

    /// `relu(conv(x) [+ shortcut(block_in)] + bias)` as a new padded image.
    pub(super) fn forward(&self, x: &Image, block_in: Option<&Image>) -> Image {
        let (t, stride, c_out) = (x.t, self.stride, self.c_out);
        let h_out = (x.h - 1) / stride + 1;
        let mut y = Image::zeros(t, h_out, c_out);
        let row_len = (h_out + 2) * c_out;
        let taps = if self.shortcut.is_some() { 10 } else { 9 };
        let sc = block_in.unwrap_or(x);
        let sc_stride = self.shortcut.unwrap_or(1);
        // Offsets (no divisions in the product's inner loops): output pixel r = (tt, fo) reads
        // tap (dt, df) at base[r] + tap_off[dt * 3 + df], the shortcut at sc_base[r].
        let (xw, sw) = ((x.h + 2) * x.c, (sc.h + 2) * sc.c);
        let mut base = Vec::with_capacity(t * h_out);
        let mut sc_base = Vec::with_capacity(t * h_out);
        for tt in 0..t {
            for fo in 0..h_out {
                base.push(tt * xw + fo * stride * x.c);
                sc_base.push((tt + 1) * sw + (fo * sc_stride + 1) * sc.c);
            }
        }
        let tap_off: Vec<usize> = (0..9).map(|k| (k / 3) * xw + (k % 3) * x.c).collect();
        let cin = x.c;
        let row = |tap: usize, r: usize| -> &[f32] {
            if tap < 9 {
                &x.data[base[r] + tap_off[tap]..][..cin]
            } else {
                &sc.data[sc_base[r]..][..cin]
            }
        };
        let interior = &mut y.data[row_len..row_len * (t + 1)];
        par_rows(interior, row_len, t, |t0, slab| {
            let nt = slab.len() / row_len;
            gemm_rows(t0 * h_out, nt * h_out, taps, cin, row, &self.w, |r, v| {
                let (tt, fo) = (r / h_out - t0, r % h_out);
                let o = &mut slab[tt * row_len + (fo + 1) * c_out..][..c_out];
                for ((o, v), b) in o.iter_mut().zip(v).zip(&self.bias) {
                    *o = (v + b).max(0.0);
                }
            });
        });
        y
    }
}

/// The front end's first convolution (one input channel).
pub(super) struct FirstConv {
    /// `(9, c_out)`, tap `dt * 3 + df` major.
    w: Vec<f32>,
    bias: Vec<f32>,
    c_out: usize,
}

impl FirstConv {
    pub(super) fn new(conv: &ConvWeights, c_out: usize) -> Result<Self> {
        let (w, b) = host(conv, c_out * 9)?;
        Ok(Self {
            w: (0..9 * c_out)
                .map(|i| {
                    let (k, co) = (i / c_out, i % c_out);
                    w[co * 9 + (k % 3) * 3 + k / 3]
                })
                .collect(),
            bias: b.ok_or_else(not_on_cpu)?.to_vec(),
            c_out,
        })
    }

    /// `feats` is `(t, h)` (time-major fbank). With one input channel the 9 taps are a small
    /// direct loop per pixel, vectorised over the output channels.
    pub(super) fn forward(&self, feats: &[f32], t: usize, h: usize) -> Image {
        let c_out = self.c_out;
        let mut y = Image::zeros(t, h, c_out);
        let row_len = (h + 2) * c_out;
        // padded input (t + 2, h + 2)
        let mut xp = vec![0f32; (t + 2) * (h + 2)];
        for (tt, row) in feats.chunks_exact(h).take(t).enumerate() {
            xp[(tt + 1) * (h + 2) + 1..(tt + 1) * (h + 2) + 1 + h].copy_from_slice(row);
        }
        let interior = &mut y.data[row_len..row_len * (t + 1)];
        par_rows(interior, row_len, t, |t0, slab| {
            for (i, out_row) in slab.chunks_exact_mut(row_len).enumerate() {
                // padded input rows tt..tt + 3 around output time tt
                let rows = &xp[(t0 + i) * (h + 2)..(t0 + i + 3) * (h + 2)];
                first_conv_row(
                    rows,
                    h,
                    &self.w,
                    &self.bias,
                    &mut out_row[c_out..(h + 1) * c_out],
                );
            }
        });
        y
    }
}

#[inline(always)]
fn first_conv_row_body<const FMA: bool>(
    rows: &[f32],
    h: usize,
    w: &[f32],
    bias: &[f32],
    out: &mut [f32],
) {
    let c = bias.len();
    for (ff, o) in out.chunks_exact_mut(c).take(h).enumerate() {
        o.copy_from_slice(bias);
        for k in 0..9 {
            let x = rows[(k / 3) * (h + 2) + ff + k % 3];
            for (o, &wv) in o.iter_mut().zip(&w[k * c..(k + 1) * c]) {
                *o = crate::kernels::madd::<FMA>(x, wv, *o);
            }
        }
        o.iter_mut().for_each(|v| *v = v.max(0.0));
    }
}

crate::kernels::multiversion! {
    /// One time row of the first convolution: for each of the `h` frequency bins,
    /// `relu(bias + sum_k tap_k * w[k, :])` over the 3 padded input `rows` around it.
    fn first_conv_row(rows: &[f32], h: usize, w: &[f32], bias: &[f32], out: &mut [f32]) => first_conv_row_body
}
