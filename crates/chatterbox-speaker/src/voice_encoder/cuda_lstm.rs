//! The recurrence of one layer of the VoiceEncoder's `nn.LSTM` (chatterbox/models/
//! voice_encoder/voice_encoder.py, upstream 5de7a54) as one CUDA kernel for all time steps,
//! compiled once per process with NVRTC.
//!
//! Candle's ops run a step as ~12 launches (the `h · W_hhᵀ` product, the gate activations,
//! the cell update), ~5 800 for a 10 s clip (61-63 ms on an H100). Here one block per
//! sequence keeps `h` in shared memory and `c` in registers over all steps: each of its `4H`
//! threads computes one gate, `xp[t] + h · W_hhᵀ[:, j]` (the input projection `xp` of all
//! steps comes from one GEMM beforehand), then the first `H` threads update their cell. The
//! f32 products are summed in another order than candle's GEMM.
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, CustomOp2, DType, Layout, Shape, Tensor};
use chatterbox_cuda::{contiguous_view, Ptx};

/// Most threads a block may have: `4H` gates each.
const MAX_THREADS: usize = 1024;

const SOURCE: &str = include_str!("cuda_lstm.cu");

/// The PTX of [`SOURCE`], compiled on first use.
pub(crate) static PTX: Ptx = Ptx::new(SOURCE, None, "VoiceEncoder LSTM kernel");

/// Whether [`layer`] takes `xp` (`[B, T, 4H]`) and `w_hh_t` (`[H, 4H]`): f32 on CUDA,
/// contiguous, `4H` at most 1024 threads, and the kernel compiled (a failure is logged once;
/// the caller then runs candle's ops).
pub(super) fn applies(xp: &Tensor, w_hh_t: &Tensor) -> bool {
    let shaped = xp.device().is_cuda()
        && xp.dtype() == DType::F32
        && w_hh_t.dtype() == DType::F32
        && xp.is_contiguous()
        && w_hh_t.is_contiguous()
        && matches!((xp.dims(), w_hh_t.dims()),
            (&[b, t, g], &[hd, g2]) if b > 0 && t > 0 && hd > 0 && g == 4 * hd && g2 == g
                && g <= MAX_THREADS);
    shaped
        && PTX.available(xp.device(), |e| {
            tracing::warn!("{e}: the VoiceEncoder's LSTM runs candle's ops")
        })
}

struct Layer {
    /// Write every hidden state (`[B, T, H]`), else only the last (`[B, H]`).
    all: bool,
}

impl CustomOp2 for Layer {
    chatterbox_cuda::cuda_only_op!(2, "ve-lstm-layer");

    fn cuda_fwd(
        &self,
        xs: &CudaStorage,
        xl: &Layout,
        ws: &CudaStorage,
        wl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (b, t, g) = xl.shape().dims3()?;
        let (hd, g2) = wl.shape().dims2()?;
        if b == 0 || t == 0 || g != 4 * hd || g2 != g || g > MAX_THREADS || t > u32::MAX as usize {
            candle_core::bail!(
                "ve-lstm-layer: inputs {:?}, W_hh^T {:?}",
                xl.shape(),
                wl.shape()
            )
        }
        let x = contiguous_view::<f32>(xs, xl, "ve-lstm-layer: projected inputs")?;
        let w = contiguous_view::<f32>(ws, wl, "ve-lstm-layer: W_hh^T")?;
        let dev: &CudaDevice = &xs.device;
        let func = PTX.function(dev, "ve_lstm_layer")?;
        let (n, shape) = if self.all {
            (b * t * hd, Shape::from((b, t, hd)))
        } else {
            (b * hd, Shape::from((b, hd)))
        };
        // SAFETY: the kernel writes every element (each block its sequence's hidden states).
        let out = unsafe { dev.alloc::<f32>(n)? };
        let (steps, hidden, all) = (t as u32, hd as u32, i32::from(self.all));
        let mut builder = func.builder();
        builder.arg(&x);
        builder.arg(&w);
        builder.arg(&out);
        builder.arg(&steps);
        builder.arg(&hidden);
        builder.arg(&all);
        let cfg = LaunchConfig {
            grid_dim: (b as u32, 1, 1),
            block_dim: (g as u32, 1, 1),
            shared_mem_bytes: (5 * hd * 4) as u32,
        };
        // SAFETY: block `b` reads its `t x 4H` projected inputs and all of `W_hh^T` (`H x 4H`,
        // both checked above) and writes its `t x H` (or `H`) outputs; `5H` floats of shared
        // memory (at most 5 KiB for 4H <= 1024).
        unsafe { builder.launch(cfg) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), shape))
    }
}

/// The recurrence of one layer over the projected inputs `xp` (`[B, T, 4H]`) with `W_hhᵀ`
/// `w_hh_t` (`[H, 4H]`), from zero states: every hidden state `[B, T, H]` when `all`, else
/// the last `[B, H]`. See [`applies`].
pub(super) fn layer(xp: &Tensor, w_hh_t: &Tensor, all: bool) -> candle_core::Result<Tensor> {
    xp.apply_op2_no_bwd(w_hh_t, &Layer { all })
}

#[cfg(test)]
mod tests {
    use super::super::lstm::Lstm;
    use candle_core::{DType, Tensor};
    use candle_nn::VarBuilder;
    use std::collections::HashMap;

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn cuda_recurrence_matches_the_host_kernels() -> crate::Result<()> {
        let dev = chatterbox_cuda::open(0)?;
        let (input, hidden, layers, b, t) = (40usize, 256usize, 3usize, 7usize, 160usize);
        let mut w = HashMap::new();
        for k in 0..layers {
            let in_dim = if k == 0 { input } else { hidden };
            let a = 1.0 / (hidden as f32).sqrt();
            for (name, shape) in [
                (format!("weight_ih_l{k}"), vec![4 * hidden, in_dim]),
                (format!("weight_hh_l{k}"), vec![4 * hidden, hidden]),
                (format!("bias_ih_l{k}"), vec![4 * hidden]),
                (format!("bias_hh_l{k}"), vec![4 * hidden]),
            ] {
                w.insert(name, Tensor::rand(-a, a, shape, &dev)?);
            }
        }
        let lstm = Lstm::new(
            input,
            hidden,
            layers,
            VarBuilder::from_tensors(w, DType::F32, &dev),
        )?;
        assert!(lstm.has_cpu_kernels());
        let x = Tensor::rand(0f32, 1.0, (b, t, input), &dev)?;
        let got = lstm.forward(&x)?.flatten_all()?.to_vec1::<f32>()?;
        let host = x.flatten_all()?.to_vec1::<f32>()?;
        let want = lstm.forward_cpu(&host, b, t).expect("host copies")?;
        assert_eq!(got.len(), b * hidden);
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0f32, f32::max);
        eprintln!("CUDA recurrence against the host kernels: max |diff| {worst:.2e}");
        assert!(worst < 1e-5, "max |diff| {worst:.2e}");
        // the hidden states really vary (not all saturated or zero)
        let spread = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(spread > 1e-2 && spread < 1.0, "{spread}");
        Ok(())
    }
}
