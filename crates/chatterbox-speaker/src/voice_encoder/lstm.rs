//! Port of the VoiceEncoder's `nn.LSTM(num_mels, hidden, num_layers=3, batch_first=True)`
//! (chatterbox/models/voice_encoder/voice_encoder.py, upstream 5de7a54) in inference: only the
//! last hidden state of the top layer is needed.
//!
//! Each layer's input projection `x · W_ih^T + b_ih + b_hh` runs for all time steps as one
//! matrix product; only `h · W_hh^T` and the cell update are sequential. On the CPU (f32) the
//! recurrence runs in plain Rust: the sequences are split over the threads (they are
//! independent, so the threads never synchronise inside a layer), `W_hh^T` is packed once at
//! load time, and the gates are computed with vectorised sigmoid/tanh. Elsewhere it is candle
//! tensor ops, ~12 small ops per step (measured on the 2-core CPU: see the crate README).
//!
//! On CUDA in f32 each layer's recurrence is one kernel (`cuda_lstm`): the candle-op
//! recurrence is ~5 800 launches of tiny kernels for a 10 s clip (3 layers x 160 steps x ~12
//! ops; 61-63 ms on an H100). The host copies for the CPU kernels are made for f32 weights on
//! every device: on Metal the encoder runs the recurrence on the host by default.
use crate::kernels::{self, gemm_rows, gemm_rows_into, lstm_cell, PackedB};
use crate::weights::tensor;
use crate::Result;
use candle_core::{DType, Tensor, D};
use candle_nn::VarBuilder;
use rayon::prelude::*;

/// Weights of one layer, as tensors (any device).
#[derive(Debug, Clone)]
struct LstmLayer {
    /// `W_ih^T`, `(in, 4H)`.
    w_ih_t: Tensor,
    /// `W_hh^T`, `(H, 4H)`.
    w_hh_t: Tensor,
    /// `b_ih + b_hh`, `(4H,)`.
    bias: Tensor,
}

/// Host copies of one layer for the CPU kernels.
#[derive(Debug, Clone)]
struct LstmLayerCpu {
    in_dim: usize,
    /// `W_ih^T`, packed.
    w_ih: PackedB,
    /// `b_ih + b_hh`.
    bias: Vec<f32>,
    /// `W_hh^T`, packed.
    w_hh: PackedB,
}

/// A multi-layer unidirectional LSTM (PyTorch gate order `i, f, g, o`).
#[derive(Debug, Clone)]
pub(crate) struct Lstm {
    hidden: usize,
    layers: Vec<LstmLayer>,
    cpu: Option<Vec<LstmLayerCpu>>,
}

impl Lstm {
    /// Loads `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`, `bias_hh_l{k}` for
    /// `k < num_layers`. The host copies for the CPU kernels are made when `vb` is f32 (on
    /// any device).
    pub fn new(input: usize, hidden: usize, num_layers: usize, vb: VarBuilder) -> Result<Self> {
        let mut layers = Vec::with_capacity(num_layers);
        let mut cpu = Vec::with_capacity(num_layers);
        let on_cpu = vb.dtype() == DType::F32;
        for k in 0..num_layers {
            let in_dim = if k == 0 { input } else { hidden };
            let w_ih = tensor(&vb, &format!("weight_ih_l{k}"), &[4 * hidden, in_dim])?;
            let w_hh = tensor(&vb, &format!("weight_hh_l{k}"), &[4 * hidden, hidden])?;
            let b_ih = tensor(&vb, &format!("bias_ih_l{k}"), &[4 * hidden])?;
            let b_hh = tensor(&vb, &format!("bias_hh_l{k}"), &[4 * hidden])?;
            let bias = (b_ih + b_hh)?;
            if on_cpu {
                let f32_vec = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
                cpu.push(LstmLayerCpu {
                    in_dim,
                    w_ih: PackedB::from_weight(&f32_vec(&w_ih)?, 4 * hidden, in_dim),
                    bias: f32_vec(&bias)?,
                    w_hh: PackedB::from_weight(&f32_vec(&w_hh)?, 4 * hidden, hidden),
                });
            }
            layers.push(LstmLayer {
                w_ih_t: w_ih.t()?.contiguous()?,
                w_hh_t: w_hh.t()?.contiguous()?,
                bias,
            });
        }
        Ok(Self {
            hidden,
            layers,
            cpu: on_cpu.then_some(cpu),
        })
    }

    /// Whether the plain-Rust CPU kernels are available (the weights are f32; their host
    /// copies were made at load).
    pub fn has_cpu_kernels(&self) -> bool {
        self.cpu.is_some()
    }

    /// Last hidden state of the top layer, `(B, H)`, for `x` `(B, T, in)`, with candle ops
    /// (on CUDA in f32, each layer's recurrence is one kernel: `cuda_lstm`).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let h_dim = self.hidden;
        let mut input = x.clone();
        let mut h = Tensor::zeros((b, h_dim), x.dtype(), x.device())?;
        for (l, layer) in self.layers.iter().enumerate() {
            let last = l + 1 == self.layers.len();
            let in_dim = input.dim(D::Minus1)?;
            let xp = input
                .reshape((b * t, in_dim))?
                .matmul(&layer.w_ih_t)?
                .broadcast_add(&layer.bias)?
                .reshape((b, t, 4 * h_dim))?;
            #[cfg(feature = "cuda")]
            if super::cuda_lstm::applies(&xp, &layer.w_hh_t) {
                let out = super::cuda_lstm::layer(&xp, &layer.w_hh_t, !last)?;
                if last {
                    h = out;
                } else {
                    input = out;
                }
                continue;
            }
            h = Tensor::zeros((b, h_dim), x.dtype(), x.device())?;
            let mut c = h.clone();
            let mut outs = Vec::with_capacity(if last { 0 } else { t });
            for s in 0..t {
                let gates = xp.narrow(1, s, 1)?.squeeze(1)?;
                let gates = if s == 0 {
                    gates
                } else {
                    (gates + h.matmul(&layer.w_hh_t)?)?
                };
                let ifo = candle_nn::ops::sigmoid(&gates)?;
                let i = ifo.narrow(1, 0, h_dim)?;
                let f = ifo.narrow(1, h_dim, h_dim)?;
                let o = ifo.narrow(1, 3 * h_dim, h_dim)?;
                let g = gates.narrow(1, 2 * h_dim, h_dim)?.tanh()?;
                c = ((f * &c)? + (i * g)?)?;
                h = (o * c.tanh()?)?;
                if !last {
                    outs.push(h.clone());
                }
            }
            if !last {
                input = Tensor::stack(&outs, 1)?;
            }
        }
        Ok(h)
    }

    /// The same as [`Lstm::forward`] with the CPU kernels: `x` is `(b, t, in)` row-major f32;
    /// returns `(b, H)`. `None` when the weights are not on the CPU.
    pub fn forward_cpu(&self, x: &[f32], b: usize, t: usize) -> Option<Result<Vec<f32>>> {
        let layers = self.cpu.as_ref()?;
        Some(forward_cpu(layers, self.hidden, x, b, t))
    }
}

fn forward_cpu(
    layers: &[LstmLayerCpu],
    hidden: usize,
    x: &[f32],
    b: usize,
    t: usize,
) -> Result<Vec<f32>> {
    let threads = kernels::num_threads();
    let g = 4 * hidden;
    // Two buffers for all layers (one set per layer was ~30 MB of fresh buffers per call for a
    // 10 s clip; now ~11 MB): the projected inputs, and the hidden states, which a layer
    // overwrites once its projection has read them.
    let mut xp = vec![0f32; b * t * g];
    let mut states: Vec<f32> = if layers.len() > 1 {
        vec![0f32; b * t * hidden]
    } else {
        Vec::new()
    };
    let mut last_h = vec![0f32; b * hidden];
    for (l, layer) in layers.iter().enumerate() {
        let last = l + 1 == layers.len();
        let src: &[f32] = if l == 0 { x } else { &states };
        if src.len() != b * t * layer.in_dim {
            return Err(crate::error::invalid(
                "lstm input",
                format!("{} values, expected {b}x{t}x{}", src.len(), layer.in_dim),
            ));
        }
        // All input projections at once: xp (b*t, 4H) = src · W_ih^T + bias, rows spread over
        // the threads.
        let tasks = if threads == 1 { 1 } else { 4 * threads };
        let rows_per_task = (b * t).div_ceil(tasks).max(1);
        let in_dim = layer.in_dim;
        xp.par_chunks_mut(rows_per_task * g)
            .enumerate()
            .for_each(|(task, out)| {
                let r0 = task * rows_per_task;
                let m = out.len() / g;
                let row = |_: usize, r: usize| &src[r * in_dim..(r + 1) * in_dim];
                gemm_rows(r0, m, 1, in_dim, row, &layer.w_ih, |r, v| {
                    let o = &mut out[(r - r0) * g..(r - r0 + 1) * g];
                    for ((o, v), bias) in o.iter_mut().zip(v).zip(&layer.bias) {
                        *o = v + bias;
                    }
                });
            });
        // The recurrence: sequences split into one contiguous group per thread.
        let per = b.div_ceil(threads.min(b).max(1));
        let out: &mut [f32] = if last { &mut last_h } else { &mut states };
        let out_len = if last { hidden } else { t * hidden };
        out.par_chunks_mut(per * out_len)
            .zip(xp.par_chunks(per * t * g))
            .for_each(|(out, xp)| recur(xp, t, hidden, &layer.w_hh, out, !last));
    }
    Ok(last_h)
}

/// Runs the recurrence of one layer for the sequences whose projected inputs are `xp`
/// (`rows x t x 4H`). Writes every hidden state (`rows x t x H`) when `all`, else the last
/// (`rows x H`).
fn recur(xp: &[f32], t: usize, hidden: usize, w_hh: &PackedB, out: &mut [f32], all: bool) {
    let g = 4 * hidden;
    let rows = xp.len() / (t * g);
    let ldc = w_hh.ldc();
    let mut h = vec![0f32; rows * hidden];
    let mut c = vec![0f32; rows * hidden];
    // rows x ldc (4H rounded up to whole panels; the same for every hidden size that is a
    // multiple of 4)
    let mut gates = vec![0f32; rows * ldc];
    for s in 0..t {
        for r in 0..rows {
            let xp_row = &xp[(r * t + s) * g..(r * t + s + 1) * g];
            gates[r * ldc..r * ldc + g].copy_from_slice(xp_row);
        }
        if s > 0 {
            // gates = xp + h · W_hh^T, accumulated in place
            let row = |_: usize, r: usize| &h[r * hidden..(r + 1) * hidden];
            gemm_rows_into(0, rows, 1, hidden, row, w_hh, &mut gates);
        }
        for r in 0..rows {
            let (hr, cr) = (
                &mut h[r * hidden..(r + 1) * hidden],
                &mut c[r * hidden..(r + 1) * hidden],
            );
            lstm_cell(&gates[r * ldc..r * ldc + g], cr, hr);
            if all {
                out[(r * t + s) * hidden..(r * t + s + 1) * hidden].copy_from_slice(hr);
            }
        }
    }
    if !all {
        out.copy_from_slice(&h);
    }
}
