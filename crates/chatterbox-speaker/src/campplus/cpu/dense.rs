//! CAM dense layers and transit layers on the CPU, over `(time, channel)` rows.
use super::{bn_host, host, not_on_cpu, par_rows, unsupported, SEG_LEN};
use crate::campplus::dense_block::CAMDenseTDNNLayer;
use crate::campplus::layers::TransitLayer;
use crate::kernels::{affine_relu_cols, gemm_rows, sigmoid_inplace, PackedB};
use crate::Result;

/// One CAM dense layer.
pub(super) struct DenseTdnn {
    bn1: (Vec<f32>, Vec<f32>),
    c_in: usize,
    /// `linear1` with `nonlinear2`'s BatchNorm folded: `(c_in, bn)`.
    linear1: PackedB,
    b1: Vec<f32>,
    /// `linear_local`, 3 taps: `(3 * bn, growth)`.
    local: PackedB,
    dilation: usize,
    /// CAM `linear1` `(bn, bn / 2)` and `linear2` `(bn / 2, growth)`.
    cam1: PackedB,
    cam1_b: Vec<f32>,
    cam2: PackedB,
    cam2_b: Vec<f32>,
    bn_ch: usize,
    pub(super) growth: usize,
}

impl DenseTdnn {
    pub(super) fn new(l: &CAMDenseTDNNLayer) -> Result<Self> {
        let (c_in, bn_ch) = (l.c_in, l.bn_channels);
        let cam = &l.cam_layer;
        let (growth, red, k) = (cam.local.c_out, bn_ch / 2, cam.local.kernel);
        if k != 3 {
            return Err(unsupported("a CAM layer whose kernel is not 3"));
        }
        let (w1, b1) = host(&l.linear1, bn_ch * c_in)?;
        let (wl, _) = host(&cam.linear_local, growth * bn_ch * 3)?;
        let (wc1, bc1) = host(&cam.linear1, red * bn_ch)?;
        let (wc2, bc2) = host(&cam.linear2, growth * red)?;
        Ok(Self {
            bn1: bn_host(&l.nonlinear1)?,
            c_in,
            linear1: PackedB::from_weight(w1, bn_ch, c_in),
            b1: b1.ok_or_else(not_on_cpu)?.to_vec(),
            local: PackedB::new(3 * bn_ch, growth, |kk, co| {
                let (tap, ci) = (kk / bn_ch, kk % bn_ch);
                wl[(co * bn_ch + ci) * 3 + tap]
            }),
            dilation: cam.local.dilation,
            cam1: PackedB::from_weight(wc1, red, bn_ch),
            cam1_b: bc1.ok_or_else(not_on_cpu)?.to_vec(),
            cam2: PackedB::from_weight(wc2, growth, red),
            cam2_b: bc2.ok_or_else(not_on_cpu)?.to_vec(),
            bn_ch,
            growth,
        })
    }

    /// Appends this layer's `growth` channels to `buf` (`t x ld`, columns `0..c_in` filled).
    pub(super) fn forward(
        &self,
        buf: &mut [f32],
        ld: usize,
        t: usize,
        act: &mut Vec<f32>,
        h: &mut Vec<f32>,
    ) {
        let (c_in, bn_ch, growth) = (self.c_in, self.bn_ch, self.growth);
        // nonlinear1: relu(bn1(x)) of the first c_in channels.
        act.resize(t * c_in, 0.0);
        affine_relu_cols(buf, ld, c_in, &self.bn1.0, &self.bn1.1, act);
        // linear1 + folded bn2 + relu.
        h.resize(t * bn_ch, 0.0);
        let act_ref: &[f32] = act;
        par_rows(h, bn_ch, t, |r0, slab| {
            let m = slab.len() / bn_ch;
            let row = |_: usize, r: usize| &act_ref[r * c_in..(r + 1) * c_in];
            gemm_rows(r0, m, 1, c_in, row, &self.linear1, |r, v| {
                let o = &mut slab[(r - r0) * bn_ch..(r - r0 + 1) * bn_ch];
                for ((o, v), b) in o.iter_mut().zip(v).zip(&self.b1) {
                    *o = (v + b).max(0.0);
                }
            });
        });
        let h: &[f32] = h;
        let mask = self.mask(h, t);
        // linear_local (3 taps, dilation d, zero padding d), times the mask of the segment.
        let zeros = vec![0f32; bn_ch];
        let d = self.dilation as isize;
        let row = |tap: usize, r: usize| -> &[f32] {
            let tt = r as isize + (tap as isize - 1) * d;
            if tt < 0 || tt as usize >= t {
                &zeros
            } else {
                &h[tt as usize * bn_ch..(tt as usize + 1) * bn_ch]
            }
        };
        par_rows(buf, ld, t, |r0, slab| {
            let m = slab.len() / ld;
            gemm_rows(r0, m, 3, bn_ch, row, &self.local, |r, v| {
                let mrow = &mask[(r / SEG_LEN) * growth..(r / SEG_LEN + 1) * growth];
                let o = &mut slab[(r - r0) * ld + c_in..(r - r0) * ld + c_in + growth];
                for ((o, v), m) in o.iter_mut().zip(v).zip(mrow) {
                    *o = v * m;
                }
            });
        });
    }

    /// The CAM mask per segment, `(n_seg, growth)`: `sigmoid(linear2(relu(linear1(mean +
    /// segment mean))))` of `h` (`t x bn`).
    fn mask(&self, h: &[f32], t: usize) -> Vec<f32> {
        let bn_ch = self.bn_ch;
        let n_seg = t.div_ceil(SEG_LEN);
        let mut total = vec![0f64; bn_ch];
        let mut seg = vec![0f64; n_seg * bn_ch];
        for (r, row) in h.chunks_exact(bn_ch).take(t).enumerate() {
            let s = &mut seg[(r / SEG_LEN) * bn_ch..(r / SEG_LEN + 1) * bn_ch];
            for ((a, b), &v) in total.iter_mut().zip(s.iter_mut()).zip(row) {
                *a += v as f64;
                *b += v as f64;
            }
        }
        let mut context = vec![0f32; n_seg * bn_ch];
        for (i, (c, s)) in context
            .chunks_exact_mut(bn_ch)
            .zip(seg.chunks_exact(bn_ch))
            .enumerate()
        {
            let len = (t - i * SEG_LEN).min(SEG_LEN) as f64;
            for ((c, s), tot) in c.iter_mut().zip(s).zip(&total) {
                *c = ((tot / t as f64) as f32) + (s / len) as f32;
            }
        }
        let red = bn_ch / 2;
        let mut hidden = vec![0f32; n_seg * red];
        let row = |_: usize, r: usize| &context[r * bn_ch..(r + 1) * bn_ch];
        gemm_rows(0, n_seg, 1, bn_ch, row, &self.cam1, |r, v| {
            for ((o, v), b) in hidden[r * red..(r + 1) * red]
                .iter_mut()
                .zip(v)
                .zip(&self.cam1_b)
            {
                *o = (v + b).max(0.0);
            }
        });
        let growth = self.growth;
        let mut mask = vec![0f32; n_seg * growth];
        let row = |_: usize, r: usize| &hidden[r * red..(r + 1) * red];
        gemm_rows(0, n_seg, 1, red, row, &self.cam2, |r, v| {
            for ((o, v), b) in mask[r * growth..(r + 1) * growth]
                .iter_mut()
                .zip(v)
                .zip(&self.cam2_b)
            {
                *o = v + b;
            }
        });
        sigmoid_inplace(&mut mask);
        mask
    }
}

/// `conv1x1(relu(bn(x)))`.
pub(super) struct Transit {
    bn: (Vec<f32>, Vec<f32>),
    w: PackedB,
    c_in: usize,
    pub(super) c_out: usize,
}

impl Transit {
    pub(super) fn new(l: &TransitLayer) -> Result<Self> {
        let (w, _) = host(&l.linear, l.c_out * l.c_in)?;
        Ok(Self {
            bn: bn_host(&l.bn)?,
            w: PackedB::from_weight(w, l.c_out, l.c_in),
            c_in: l.c_in,
            c_out: l.c_out,
        })
    }

    /// `x` is `t x c_in`; writes `t x c_out` into the first columns of `out` (`t x ld`).
    pub(super) fn forward(
        &self,
        x: &[f32],
        t: usize,
        act: &mut Vec<f32>,
        out: &mut [f32],
        ld: usize,
    ) {
        let (c_in, c_out) = (self.c_in, self.c_out);
        act.resize(t * c_in, 0.0);
        affine_relu_cols(x, c_in, c_in, &self.bn.0, &self.bn.1, act);
        let act: &[f32] = act;
        let row = |_: usize, r: usize| &act[r * c_in..(r + 1) * c_in];
        par_rows(out, ld, t, |r0, slab| {
            let m = slab.len() / ld;
            gemm_rows(r0, m, 1, c_in, row, &self.w, |r, v| {
                slab[(r - r0) * ld..(r - r0) * ld + c_out].copy_from_slice(v);
            });
        });
    }
}
