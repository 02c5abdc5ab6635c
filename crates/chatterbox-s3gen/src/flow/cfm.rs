//! The flow-matching solver. Port of chatterbox/models/s3gen/flow_matching.py
//! `CausalConditionalCFM` (`forward`, `solve_euler`, `basic_euler`; upstream 5de7a54).
//!
//! * Standard checkpoints: cosine schedule `t = 1 - cos(linspace(0, 1, n + 1) pi / 2)`, Euler
//!   steps with classifier-free guidance computed as one batch of `2 B` (the second half with
//!   `mu`, `spks` and `cond` zeroed), `v = (1 + w) v_cond - w v_uncond`.
//! * Meanflow checkpoints: linear schedule, no guidance, the estimator also sees the step's end
//!   time `r`.
//!
//! The initial noise (`torch.randn_like(mu)` in the reference) is an argument. The state `x`,
//! the guidance mix and the Euler update are f32 whatever the estimator's dtype: only the
//! estimator call runs in half precision when its weights do. Nothing inside the step loop
//! reads back from the device; on CUDA the estimator calls replay a captured graph
//! ([`set_cuda_graphs`](CausalConditionalCFM::set_cuda_graphs)).

use super::config::{CfmConfig, TimeScheduler};
use super::decoder::{ConditionalDecoder, EstimatorContext};
use super::estimator_calls::EstimatorCalls;
use super::estimator_graphs::EstimatorGraphs;
use super::mask::masks_from_tensor;
use super::ops::KeyBias;
use crate::{Result, S3GenError};
use candle_core::{DType, Tensor};

/// `torch.linspace(0, 1, n + 1)` in f32 (the kernel's two-sided formula), then the schedule.
pub fn t_span(n_timesteps: usize, scheduler: TimeScheduler) -> Vec<f32> {
    let steps = n_timesteps + 1;
    let step = 1.0f32 / n_timesteps.max(1) as f32;
    let halfway = steps / 2;
    (0..steps)
        .map(|i| {
            let t = if i < halfway {
                step * i as f32
            } else {
                1.0f32 - step * (steps - i - 1) as f32
            };
            match scheduler {
                TimeScheduler::Linear => t,
                TimeScheduler::Cosine => 1.0f32 - ((t * 0.5f32) * std::f32::consts::PI).cos(),
            }
        })
        .collect()
}

/// `CausalConditionalCFM` around its estimator.
#[derive(Debug, Clone)]
pub struct CausalConditionalCFM {
    estimator: ConditionalDecoder,
    cfg: CfmConfig,
    cuda_graphs: bool,
    /// The captured estimator calls, kept across solves (shared by clones, which share the
    /// estimator).
    graphs: std::sync::Arc<EstimatorGraphs>,
}

/// The solver's masks for `B` rows: multiplier `(B, T, 1)` and attention bias `(B, 1, 1, T)`;
/// `None` when nothing is padded.
pub(crate) type SolverMasks = Option<(Tensor, KeyBias)>;

impl CausalConditionalCFM {
    /// A solver around `estimator`.
    pub fn new(cfg: &CfmConfig, estimator: ConditionalDecoder) -> Self {
        Self {
            estimator,
            cfg: cfg.clone(),
            // CHATTERBOX_FLOW_GRAPHS=0: eager calls (an A/B switch for benchmarks)
            cuda_graphs: std::env::var("CHATTERBOX_FLOW_GRAPHS").map_or(true, |v| v != "0"),
            graphs: Default::default(),
        }
    }

    /// On CUDA, replay each solve's estimator calls as a CUDA graph: one kept from an earlier
    /// solve of the same shape, or one captured at its first step (solves of at least
    /// [`MIN_GRAPH_STEPS`](super::MIN_GRAPH_STEPS) steps, or of a shape seen before; see
    /// `estimator_graphs.rs`). The numbers of eager calls up to bf16 rounding (the GPU test's
    /// `REPLAY_TOL`), without the host's per-kernel cost. Default: on, unless the environment
    /// sets `CHATTERBOX_FLOW_GRAPHS=0`. Ignored elsewhere.
    pub fn set_cuda_graphs(&mut self, on: bool) {
        self.cuda_graphs = on;
    }

    /// Whether CUDA graphs are on (see [`set_cuda_graphs`](Self::set_cuda_graphs)).
    pub fn cuda_graphs(&self) -> bool {
        self.cuda_graphs
    }

    /// CUDA graphs captured so far, one per shape (0 when running eagerly; a solve of a shape
    /// whose graph is kept replays it).
    pub fn cuda_graphs_captured(&self) -> usize {
        self.graphs.captured()
    }

    /// Why CUDA graphs are off for good, once a capture has failed (the flow then runs
    /// eagerly); `None` while they work.
    pub fn cuda_graphs_failure(&self) -> Option<String> {
        self.graphs.failure()
    }

    /// CUDA graphs kept now (at most [`KEPT_GRAPHS`](super::KEPT_GRAPHS)).
    pub fn cuda_graphs_kept(&self) -> usize {
        self.graphs.kept()
    }

    /// The estimator.
    pub fn estimator(&self) -> &ConditionalDecoder {
        &self.estimator
    }

    /// Whether the estimator is a meanflow one (linear schedule, no guidance).
    pub fn meanflow(&self) -> bool {
        self.estimator.config().meanflow
    }

    /// The time points of an `n_timesteps` solve (`n_timesteps + 1` values from 0 to 1).
    pub fn time_points(&self, n_timesteps: usize) -> Vec<f32> {
        let scheduler = if self.meanflow() {
            TimeScheduler::Linear
        } else {
            self.cfg.t_scheduler
        };
        t_span(n_timesteps, scheduler)
    }

    /// `forward(mu, mask, n_timesteps, spks=spks, cond=cond, noised_mels=...)` with the initial
    /// noise given: `mu`, `cond`, `noise (B, 80, T)`, `mask (B, 1, T)`, `spks (B, 80)`, and
    /// optionally `noised_mels (B, 80, T')` replacing the last `T'` frames of the noise. Returns
    /// the mel `(B, 80, T)` in f32.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        mu: &Tensor,
        mask: &Tensor,
        n_timesteps: usize,
        spks: &Tensor,
        cond: &Tensor,
        noise: &Tensor,
        noised_mels: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (mul, bias) = masks_from_tensor(mask, self.estimator.dtype())?;
        self.solve(
            mu,
            Some((mul, KeyBias::new(bias)?)),
            n_timesteps,
            spks,
            cond,
            noise,
            noised_mels,
        )
    }

    /// [`forward`](Self::forward) with the masks already built (`None`: no padding).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn solve(
        &self,
        mu: &Tensor,
        masks: SolverMasks,
        n_timesteps: usize,
        spks: &Tensor,
        cond: &Tensor,
        noise: &Tensor,
        noised_mels: Option<&Tensor>,
    ) -> Result<Tensor> {
        if n_timesteps == 0 {
            return Err(S3GenError::InvalidInput {
                what: "n_timesteps",
                reason: "the solver needs at least one step".into(),
            });
        }
        let (b, c, t) = mu.dims3()?;
        if noise.dims() != [b, c, t] {
            return Err(S3GenError::InvalidInput {
                what: "noise",
                reason: format!("expected shape {:?}, got {:?}", [b, c, t], noise.dims()),
            });
        }
        let z = match noised_mels {
            None => noise.to_dtype(DType::F32)?,
            Some(nm) => {
                let (nb, nc, nt) = nm.dims3()?;
                if nb != b || nc != c || nt > t {
                    return Err(S3GenError::InvalidInput {
                        what: "noised_mels",
                        reason: format!("expected ({b}, {c}, <= {t}), got {:?}", nm.dims()),
                    });
                }
                Tensor::cat(
                    &[
                        &noise.narrow(2, 0, t - nt)?.to_dtype(DType::F32)?,
                        &nm.to_dtype(DType::F32)?,
                    ],
                    2,
                )?
            }
        };
        let _span = tracing::debug_span!("cfm_solve", n_timesteps, batch = b, frames = t).entered();
        let ts = self.time_points(n_timesteps);
        let dev = mu.device();
        let t_now = Tensor::from_vec(ts[..n_timesteps].to_vec(), n_timesteps, dev)?;
        // time-major f32 state
        let mut x = z.transpose(1, 2)?.contiguous()?;
        let est = &self.estimator;
        let dt_est = est.dtype();
        if self.meanflow() {
            let r = Tensor::from_vec(ts[1..].to_vec(), n_timesteps, dev)?;
            let time = est.time_conditioning(&t_now, Some(&r))?;
            let (mask, bias) = split(masks);
            let ctx = est.context(mu, spks, cond, mask, bias)?;
            let mut calls = EstimatorCalls::new(est, &ctx, &time, n_timesteps, self.graphs(), dev);
            for i in 0..n_timesteps {
                let v = calls.call(&x.to_dtype(dt_est)?, i)?;
                x = euler(&x, &v, ts[i + 1] - ts[i])?;
            }
        } else {
            let time = est.time_conditioning(&t_now, None)?;
            let ctx = self.cfg_context(mu, spks, cond, masks)?;
            let w = self.cfg.inference_cfg_rate;
            let mut calls = EstimatorCalls::new(est, &ctx, &time, n_timesteps, self.graphs(), dev);
            for i in 0..n_timesteps {
                let x_in = Tensor::cat(&[&x, &x], 0)?.to_dtype(dt_est)?;
                let v = calls.call(&x_in, i)?.to_dtype(DType::F32)?;
                let v_cond = v.narrow(0, 0, b)?;
                let v_uncond = v.narrow(0, b, b)?;
                let v = (v_cond.affine(1.0 + w, 0.0)? - v_uncond.affine(w, 0.0)?)?;
                x = euler(&x, &v, ts[i + 1] - ts[i])?;
            }
        }
        Ok(x.transpose(1, 2)?.contiguous()?)
    }

    /// The kept graphs the estimator calls of a solve use, with graphs on.
    fn graphs(&self) -> Option<&EstimatorGraphs> {
        self.cuda_graphs.then_some(&*self.graphs)
    }

    /// The guidance batch: rows `0..B` conditional, rows `B..2B` with `mu`, `spks` and `cond`
    /// zeroed; both halves share `x`, the masks and `t`.
    fn cfg_context(
        &self,
        mu: &Tensor,
        spks: &Tensor,
        cond: &Tensor,
        masks: SolverMasks,
    ) -> Result<EstimatorContext> {
        let double0 =
            |x: &Tensor| -> candle_core::Result<Tensor> { Tensor::cat(&[x, &x.zeros_like()?], 0) };
        let (mask, bias) = match masks {
            Some((m, b)) => (Some(Tensor::cat(&[&m, &m], 0)?), Some(b.doubled()?)),
            None => (None, None),
        };
        self.estimator
            .context(&double0(mu)?, &double0(spks)?, &double0(cond)?, mask, bias)
    }
}

fn split(masks: SolverMasks) -> (Option<Tensor>, Option<KeyBias>) {
    match masks {
        Some((m, b)) => (Some(m), Some(b)),
        None => (None, None),
    }
}

/// `x + dt * v` in f32 (`v` is cast to f32 first).
fn euler(x: &Tensor, v: &Tensor, dt: f32) -> candle_core::Result<Tensor> {
    x + v.to_dtype(DType::F32)?.affine(f64::from(dt), 0.0)?
}
