//! Port of perth/perth_net/perth_net_implicit/model/decoder.py (resemble-perth 1.0.1): the
//! multi-scale `Decoder`. Three layer stacks read the watermark bins at 1.25x ("slow"), 1x
//! ("normal") and 0.75x ("fast") time scale (linear interpolation, `align_corners=True`); each
//! predicts an attention logit and a watermark value per frame, averaged over the `magmask`
//! frames (nearest-neighbour resized); a softmax over the three attentions weights the three
//! watermark values into one score per clip.
use crate::layers::{layer_stack, magmask, run_stack, Conv};
use candle_core::{Tensor, D};
use candle_nn::VarBuilder;

/// `F.interpolate(x, size, mode='linear', align_corners=True)` index pairs and weights as
/// torch's CPU kernel computes them in f32 (`upsample_linear1d`).
fn lerp_plan(input: usize, output: usize) -> (Vec<u32>, Vec<u32>, Vec<f32>, Vec<f32>) {
    let scale = if output > 1 {
        (input as f32 - 1.0) / (output as f32 - 1.0)
    } else {
        0.0
    };
    let (mut i0, mut i1, mut w0, mut w1) = (vec![], vec![], vec![], vec![]);
    for o in 0..output {
        let real = scale * o as f32;
        let idx = (real.floor() as usize).min(input - 1);
        let lambda = (real - idx as f32).clamp(0.0, 1.0);
        let next = if idx < input - 1 { idx + 1 } else { idx };
        i0.push(idx as u32);
        i1.push(next as u32);
        w0.push(1.0 - lambda);
        w1.push(lambda);
    }
    (i0, i1, w0, w1)
}

/// `F.interpolate(x, size, mode='nearest')` source indices as torch computes them
/// (`nearest_idx`: `min(floor(o * (in / out)), in - 1)` in f32).
fn nearest_plan(input: usize, output: usize) -> Vec<u32> {
    (0..output)
        .map(|o| {
            if output == input {
                o
            } else if output == 2 * input {
                o >> 1
            } else {
                let scale = input as f32 / output as f32;
                ((o as f32 * scale).floor() as usize).min(input - 1)
            }
        } as u32)
        .collect()
}

fn lerp(x: &Tensor, size: usize) -> candle_core::Result<Tensor> {
    let t = x.dim(D::Minus1)?;
    let (i0, i1, w0, w1) = lerp_plan(t, size);
    let dev = x.device();
    let a = x.index_select(&Tensor::new(i0, dev)?, 2)?;
    let b = x.index_select(&Tensor::new(i1, dev)?, 2)?;
    let w0 = Tensor::from_vec(w0, (1, 1, size), dev)?;
    let w1 = Tensor::from_vec(w1, (1, 1, size), dev)?;
    a.broadcast_mul(&w0)? + b.broadcast_mul(&w1)?
}

fn nerp(x: &Tensor, size: usize) -> candle_core::Result<Tensor> {
    let t = x.dim(D::Minus1)?;
    x.index_select(&Tensor::new(nearest_plan(t, size), x.device())?, 2)
}

/// `_masked_mean(x, m)`: `(x * m).sum(2) / m.sum(2)`, `(B, C)`.
fn masked_mean(x: &Tensor, m: &Tensor) -> candle_core::Result<Tensor> {
    (x * m)?.sum(2)?.div(&m.sum(2)?)
}

/// One branch's `(attention, watermark)` masked means, each `(B, 1)`.
fn branch(
    layers: &[Conv],
    subband: &Tensor,
    mask: &Tensor,
) -> candle_core::Result<(Tensor, Tensor)> {
    let out = run_stack(layers, subband)?; // (B, 2, T')
    let t = out.dim(2)?;
    let m = nerp(mask, t)?;
    let attn = masked_mean(&out.narrow(1, 0, 1)?, &m)?;
    let wmarks = masked_mean(&out.narrow(1, 1, 1)?, &m)?;
    Ok((attn, wmarks))
}

/// `Decoder(hidden, subband)`: `slow_layers`, `normal_layers` and `fast_layers`, each
/// `{0..6}` as in model/decoder.py.
#[derive(Debug, Clone)]
pub struct Decoder {
    slow: Vec<Conv>,
    normal: Vec<Conv>,
    fast: Vec<Conv>,
    subband: usize,
}

impl Decoder {
    /// Builds the decoder (`vb` at `decoder`).
    pub fn new(hidden: usize, subband: usize, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(Self {
            slow: layer_stack(subband, hidden, 2, vb.pp("slow_layers"))?,
            normal: layer_stack(subband, hidden, 2, vb.pp("normal_layers"))?,
            fast: layer_stack(subband, hidden, 2, vb.pp("fast_layers"))?,
            subband,
        })
    }

    /// Frames the decoder needs: the 0.75x branch must keep at least one (`int(T * 0.75) >= 1`).
    pub const MIN_FRAMES: usize = 2;

    /// `forward(magspec)`: `(B, n_freq, T)` normalised magnitudes to the `(B,)` raw watermark
    /// score (about 1 when watermarked, 0 when not; NaN when no frame passes `magmask`, as in
    /// the reference).
    pub fn forward(&self, magspec: &Tensor) -> candle_core::Result<Tensor> {
        let t = magspec.dim(2)?;
        if t < Self::MIN_FRAMES {
            candle_core::bail!(
                "the Perth decoder needs at least {} frames, got {t}",
                Self::MIN_FRAMES
            );
        }
        let mask = magmask(magspec)?;
        let subband = magspec.narrow(1, 0, self.subband)?;
        let slow_t = (t as f64 * 1.25) as usize;
        let fast_t = (t as f64 * 0.75) as usize;
        let slow = || branch(&self.slow, &lerp(&subband, slow_t)?, &mask);
        let normal = || branch(&self.normal, &subband, &mask);
        let fast = || branch(&self.fast, &lerp(&subband, fast_t)?, &mask);
        // the three branches are independent: run them side by side where the device orders
        // the work of several threads (chatterbox_cuda::ordered), else one after the other
        let ((slow, normal), fast) = if chatterbox_cuda::ordered(magspec.device()) {
            rayon::join(|| rayon::join(slow, normal), fast)
        } else {
            ((slow(), normal()), fast())
        };
        let ((slow_attn, slow_wm), (normal_attn, normal_wm)) = (slow?, normal?);
        let (fast_attn, fast_wm) = fast?;
        let attn = Tensor::cat(&[&slow_attn, &normal_attn, &fast_attn], 1)?; // (B, 3)
        let attn = candle_nn::ops::softmax(&attn, 1)?;
        let wmarks = Tensor::cat(&[&slow_wm, &normal_wm, &fast_wm], 1)?;
        (wmarks * attn)?.sum(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn lerp_plan_matches_torch_align_corners() {
        // torch.nn.functional.interpolate(torch.arange(4.)[None, None], size=5,
        // mode='linear', align_corners=True) = [0, 0.75, 1.5, 2.25, 3]
        let x = Tensor::new(&[[[0f32, 1.0, 2.0, 3.0]]], &Device::Cpu).unwrap();
        let y: Vec<f32> = lerp(&x, 5)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(y, vec![0.0, 0.75, 1.5, 2.25, 3.0]);
        let y: Vec<f32> = lerp(&x, 1)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(y, vec![0.0]);
    }

    #[test]
    fn nearest_plan_matches_torch() {
        // F.interpolate(arange(5), size=3, mode='nearest') picks [0, 1, 3];
        // size=6 picks [0, 0, 1, 2, 3, 4]; size=10 (2x) picks [0, 0, 1, 1, ...]
        assert_eq!(nearest_plan(5, 3), vec![0, 1, 3]);
        assert_eq!(nearest_plan(5, 6), vec![0, 0, 1, 2, 3, 4]);
        assert_eq!(nearest_plan(5, 10), vec![0, 0, 1, 1, 2, 2, 3, 3, 4, 4]);
    }
}
