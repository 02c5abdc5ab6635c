//! The estimator calls of one solve (flow_matching.py `solve_euler`'s loop, upstream 5de7a54),
//! replayed as a CUDA graph on CUDA.
//!
//! A call of the full-size estimator is ~800 small kernels, and on its own the host needs
//! ~10 ms to queue them (H100 host, 2 x 700 frames), longer than the device runs them. On
//! CUDA the first call of a solve runs eagerly and is then captured once; each later step
//! writes its input and its time embeddings into the captured call's buffers and replays
//! the graph. Every call computes exactly what the eager call computes (the same kernels on
//! the same values). Elsewhere, with graphs off, for solves of fewer than
//! [`MIN_GRAPH_STEPS`] steps, or once a capture has failed, each call runs eagerly.
use super::decoder::{ConditionalDecoder, EstimatorContext, TimeConditioning};
use crate::Result;
use candle_core::Tensor;
use std::sync::atomic::AtomicUsize;

/// The fewest solver steps for which a graph is captured: the capture costs about one eager
/// call of host time, which fewer replays would not win back (meanflow's 2 steps).
pub const MIN_GRAPH_STEPS: usize = 4;

/// The calls of one solve: `call(x, step)` for `step` in `0..steps`, in any order.
pub(crate) struct EstimatorCalls<'a> {
    est: &'a ConditionalDecoder,
    ctx: &'a EstimatorContext,
    time: &'a TimeConditioning,
    /// Whether to capture (CUDA, graphs on, enough steps, no failure yet).
    graphs: bool,
    /// Counts the captures.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    captured_count: Option<&'a AtomicUsize>,
    #[cfg(feature = "cuda")]
    captured: Option<Captured>,
}

/// A captured call and the buffers its graph reads and writes.
#[cfg(feature = "cuda")]
struct Captured {
    graph: chatterbox_cuda::Graph,
    x: Tensor,
    tp: Vec<Tensor>,
    v: Tensor,
}

impl<'a> EstimatorCalls<'a> {
    /// The calls of a solve of `steps` steps; `graphs` (a capture counter) asks for
    /// CUDA-graph replay, only taken on CUDA with at least [`MIN_GRAPH_STEPS`] steps.
    pub(crate) fn new(
        est: &'a ConditionalDecoder,
        ctx: &'a EstimatorContext,
        time: &'a TimeConditioning,
        steps: usize,
        graphs: Option<&'a AtomicUsize>,
        device: &candle_core::Device,
    ) -> Self {
        Self {
            est,
            ctx,
            time,
            graphs: cfg!(feature = "cuda")
                && graphs.is_some()
                && device.is_cuda()
                && steps >= MIN_GRAPH_STEPS,
            captured_count: graphs,
            #[cfg(feature = "cuda")]
            captured: None,
        }
    }

    /// The estimator on time-major `x (n, T, 80)` (the estimator's dtype) at time point `step`
    /// shared by the batch: `(n, T, 80)` in the estimator's dtype.
    pub(crate) fn call(&mut self, x: &Tensor, step: usize) -> Result<Tensor> {
        let tp = self.time.select(Some(step))?;
        if !self.graphs {
            return self.est.forward_btc(x, self.ctx, &tp);
        }
        #[cfg(feature = "cuda")]
        {
            if let Some(c) = &self.captured {
                c.x.slice_set(x, 0, 0)?;
                for (buf, row) in c.tp.iter().zip(&tp) {
                    buf.slice_set(row, 0, 0)?;
                }
                c.graph.launch()?;
                // a copy: the next replay overwrites the buffer
                return Ok(c.v.copy()?);
            }
            let xb = x.copy()?;
            let tpb = tp
                .iter()
                .map(Tensor::copy)
                .collect::<candle_core::Result<Vec<_>>>()?;
            let (n, t, c) = x.dims3()?;
            let vb = Tensor::zeros((n, t, c), x.dtype(), x.device())?;
            let (est, ctx) = (self.est, self.ctx);
            let mut step = || -> Result<()> {
                let v = est.forward_btc(&xb, ctx, &tpb)?;
                vb.slice_set(&v, 0, 0)?;
                Ok(())
            };
            match chatterbox_cuda::capture(x.device(), &mut step)? {
                Ok(graph) => {
                    tracing::debug!(frames = t, rows = n, "captured the flow estimator call");
                    if let Some(count) = self.captured_count {
                        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    self.captured = Some(Captured {
                        graph,
                        x: xb,
                        tp: tpb,
                        v: vb.clone(),
                    });
                    return Ok(vb.copy()?);
                }
                Err(why) => {
                    tracing::warn!("CUDA graph capture failed ({why}): the flow runs eagerly");
                    self.graphs = false;
                }
            }
            // the step ran for real before the capture
            Ok(vb)
        }
        #[cfg(not(feature = "cuda"))]
        self.est.forward_btc(x, self.ctx, &tp)
    }
}
