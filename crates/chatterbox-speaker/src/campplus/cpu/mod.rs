//! CAMPPlus (chatterbox/models/s3gen/xvector.py, upstream 5de7a54) on the CPU with the crate's
//! kernels (one utterance at a time, f32).
//!
//! Everything is time-major: the FCM works on `(time, freq, channel)` images zero-padded by one
//! pixel, the TDNN part on `(time, channel)` rows. Every convolution is a [`gemm_rows`] product
//! whose left-hand rows are read in place, one chunk per kernel tap (no im2col matrix), against
//! weights packed at load time with their BatchNorm folded in; bias and ReLU are applied as each
//! output row is produced. A residual block's shortcut (projection or identity) is one more
//! chunk of its second convolution. Dense layers write their new channels straight into one
//! preallocated buffer per block.
mod dense;
mod fcm;

use super::batch_norm::{BatchNorm, ConvWeights};
use super::dense_block::CAMDenseTDNNBlock;
use super::fcm::{BasicResBlock, FCM};
use super::layers::{DenseLayer, TDNNLayer, TransitLayer};
use crate::kernels::{affine_relu_cols, gemm_rows, num_threads, PackedB};
use crate::{Result, SpeakerError};
use dense::{DenseTdnn, Transit};
use fcm::{Conv3, FirstConv, Shortcut};
use rayon::prelude::*;

/// Segment length of the CAM segment pooling.
pub(super) const SEG_LEN: usize = 100;

pub(super) fn not_on_cpu() -> SpeakerError {
    SpeakerError::InvalidInput {
        what: "CAMPPlus CPU kernels".into(),
        reason: "the weights are not on the CPU".into(),
    }
}

pub(super) fn unsupported(what: &str) -> SpeakerError {
    SpeakerError::InvalidInput {
        what: "CAMPPlus CPU kernels".into(),
        reason: format!("{what} is not supported"),
    }
}

pub(super) fn host(conv: &ConvWeights, len: usize) -> Result<(&[f32], Option<&[f32]>)> {
    let w = conv.w();
    if w.len() != len {
        return Err(not_on_cpu());
    }
    Ok((w, conv.b()))
}

pub(super) fn bn_host(bn: &BatchNorm) -> Result<(Vec<f32>, Vec<f32>)> {
    bn.host()
        .map(|(s, b)| (s.to_vec(), b.to_vec()))
        .ok_or_else(not_on_cpu)
}

/// Splits the `m` rows of `out` (row length `ld`) into contiguous slabs, a few per thread (so
/// that a thread slowed down by another process does not hold the others up), and runs
/// `f(first_row, slab)` on each.
pub(super) fn par_rows(out: &mut [f32], ld: usize, m: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if m == 0 || ld == 0 {
        return;
    }
    let threads = num_threads();
    let tasks = if threads == 1 { 1 } else { 4 * threads };
    let per = m.div_ceil(tasks).max(1);
    out[..m * ld]
        .par_chunks_mut(per * ld)
        .enumerate()
        .for_each(|(i, slab)| f(i * per, slab));
}

impl std::fmt::Debug for CpuCAMPPlus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuCAMPPlus").finish_non_exhaustive()
    }
}

/// The whole network, packed for the CPU kernels.
pub(crate) struct CpuCAMPPlus {
    conv1: FirstConv,
    /// Per residual block: first convolution, second convolution with the shortcut.
    res_blocks: Vec<(Conv3, Conv3)>,
    conv2: Conv3,
    /// TDNN layer: 5 taps over `(fcm_h, 32)`-ordered input channels, stride 2.
    tdnn: PackedB,
    tdnn_b: Vec<f32>,
    tdnn_taps: usize,
    tdnn_stride: usize,
    tdnn_c_out: usize,
    blocks: Vec<(Vec<DenseTdnn>, Transit)>,
    out_bn: (Vec<f32>, Vec<f32>),
    dense: PackedB,
    dense_b: Vec<f32>,
    feat_dim: usize,
}

impl CpuCAMPPlus {
    pub fn new(
        head: &FCM,
        tdnn: &TDNNLayer,
        blocks: &[(CAMDenseTDNNBlock, TransitLayer)],
        out_nonlinear: &BatchNorm,
        dense: &DenseLayer,
        feat_dim: usize,
    ) -> Result<Self> {
        let m = head.channels;
        let conv1 = FirstConv::new(&head.conv1, m)?;
        let res_blocks = head
            .blocks
            .iter()
            .map(|b: &BasicResBlock| {
                let c1 = Conv3::new(&b.conv1, b.in_planes, b.planes, b.stride, None)?;
                let sc = match &b.shortcut {
                    Some(sc) => {
                        let (w, bias) = host(sc, b.planes * b.in_planes)?;
                        Shortcut::Projection(w, bias.ok_or_else(not_on_cpu)?)
                    }
                    None => Shortcut::Identity,
                };
                if b.in_planes != b.planes {
                    return Err(unsupported(
                        "a residual block that changes the channel count",
                    ));
                }
                let c2 = Conv3::new(&b.conv2, b.planes, b.planes, 1, Some((sc, b.stride)))?;
                Ok((c1, c2))
            })
            .collect::<Result<Vec<_>>>()?;
        let conv2 = Conv3::new(&head.conv2, m, m, 2, None)?;
        // TDNN input channels: PyTorch orders them (channel, freq); the image rows are (freq,
        // channel).
        let s = tdnn.shape;
        let fcm_h = s.c_in / m;
        let (w, b) = host(&tdnn.conv, s.c_out * s.c_in * s.kernel)?;
        let tdnn_w = PackedB::new(s.kernel * s.c_in, s.c_out, |k, co| {
            let (tap, ci) = (k / s.c_in, k % s.c_in);
            let (f, c) = (ci / m, ci % m);
            w[(co * s.c_in + c * fcm_h + f) * s.kernel + tap]
        });
        if s.padding != (s.kernel - 1) / 2 || s.dilation != 1 {
            return Err(unsupported("a dilated or unevenly padded TDNN layer"));
        }
        let blocks = blocks
            .iter()
            .map(|(block, transit)| {
                let layers = block
                    .layers
                    .iter()
                    .map(DenseTdnn::new)
                    .collect::<Result<Vec<_>>>()?;
                Ok((layers, Transit::new(transit)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let (dw, db) = host(&dense.linear, dense.c_out * dense.c_in)?;
        Ok(Self {
            conv1,
            res_blocks,
            conv2,
            tdnn: tdnn_w,
            tdnn_b: b.ok_or_else(not_on_cpu)?.to_vec(),
            tdnn_taps: s.kernel,
            tdnn_stride: s.stride,
            tdnn_c_out: s.c_out,
            blocks,
            out_bn: bn_host(out_nonlinear)?,
            dense: PackedB::from_weight(dw, dense.c_out, dense.c_in),
            dense_b: db.ok_or_else(not_on_cpu)?.to_vec(),
            feat_dim,
        })
    }

    /// The embedding of one utterance's features, time-major `(t, feat_dim)`.
    pub fn forward(&self, feats: &[f32], t: usize) -> Vec<f32> {
        // FCM
        let mut x = self.conv1.forward(feats, t, self.feat_dim);
        for (c1, c2) in &self.res_blocks {
            let mid = c1.forward(&x, None);
            x = c2.forward(&mid, Some(&x));
        }
        let x = self.conv2.forward(&x, None);
        // TDNN: stride 2, padding (taps - 1) / 2, over rows of (freq, channel).
        let c_in = x.frame_len();
        debug_assert_eq!(x.frames(), t);
        let zeros = vec![0f32; c_in];
        let (taps, stride) = (self.tdnn_taps, self.tdnn_stride);
        let pad = (taps - 1) / 2;
        let t2 = (t + 2 * pad - taps) / stride + 1;
        let mut c = self.tdnn_c_out;
        let mut ld = self
            .blocks
            .first()
            .map_or(c, |(l, _)| c + l.iter().map(|d| d.growth).sum::<usize>());
        let mut buf = vec![0f32; t2 * ld];
        let row = |tap: usize, r: usize| -> &[f32] {
            let tt = (r * stride + tap) as isize - pad as isize;
            if tt < 0 || tt as usize >= t {
                &zeros
            } else {
                x.frame(tt as usize)
            }
        };
        par_rows(&mut buf, ld, t2, |r0, slab| {
            let m = slab.len() / ld;
            gemm_rows(r0, m, taps, c_in, row, &self.tdnn, |r, v| {
                let o = &mut slab[(r - r0) * ld..(r - r0) * ld + v.len()];
                for ((o, v), b) in o.iter_mut().zip(v).zip(&self.tdnn_b) {
                    *o = (v + b).max(0.0);
                }
            });
        });
        // Dense blocks and transit layers.
        let (mut act, mut h) = (Vec::new(), Vec::new());
        for (i, (layers, transit)) in self.blocks.iter().enumerate() {
            for layer in layers {
                layer.forward(&mut buf, ld, t2, &mut act, &mut h);
            }
            let next_ld = match self.blocks.get(i + 1) {
                Some((l, _)) => transit.c_out + l.iter().map(|d| d.growth).sum::<usize>(),
                None => transit.c_out,
            };
            let mut next = vec![0f32; t2 * next_ld];
            transit.forward(&buf, t2, &mut act, &mut next, next_ld);
            buf = next;
            ld = next_ld;
            c = transit.c_out;
        }
        // out_nonlinear, statistics pooling (mean, unbiased std), dense.
        let mut y = vec![0f32; t2 * c];
        affine_relu_cols(&buf, ld, c, &self.out_bn.0, &self.out_bn.1, &mut y);
        let mut stats = vec![0f32; 2 * c];
        for j in 0..c {
            let mean = y.iter().skip(j).step_by(c).map(|&v| v as f64).sum::<f64>() / t2 as f64;
            let var = y
                .iter()
                .skip(j)
                .step_by(c)
                .map(|&v| (v as f64 - mean).powi(2))
                .sum::<f64>()
                / (t2 as f64 - 1.0);
            stats[j] = mean as f32;
            stats[c + j] = var.sqrt() as f32;
        }
        let mut out = vec![0f32; self.dense_b.len()];
        gemm_rows(
            0,
            1,
            1,
            2 * c,
            |_, _| &stats,
            &self.dense,
            |_, v| {
                for ((o, v), b) in out.iter_mut().zip(v).zip(&self.dense_b) {
                    *o = v + b;
                }
            },
        );
        out
    }
}
