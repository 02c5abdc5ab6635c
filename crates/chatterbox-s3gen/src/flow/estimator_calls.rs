//! The estimator calls of one solve (flow_matching.py `solve_euler`'s loop, upstream 5de7a54),
//! replayed as a CUDA graph on CUDA.
//!
//! A call of the full-size estimator is ~800 small kernels, and on its own the host needs
//! ~10 ms to queue them (H100 host, 2 x 700 frames), longer than the device runs them. On
//! CUDA a solve replays the graph its shape was captured in before (kept in
//! [`EstimatorGraphs`], see `estimator_graphs.rs`), or captures one at its first call: always
//! with at least [`MIN_GRAPH_STEPS`] steps, with fewer when its shape was seen before (a
//! capture costs about one eager call of host time). Each call writes its input, its time
//! embeddings and (at a solve's first call) the solve's context into the graph's buffers and
//! replays it. A replay repeats itself to the bit, and a kept graph gives what one captured for
//! the solve's own inputs gives; against eager calls the mel differs by bf16 rounding (on an
//! H200 up to 8.4e-3 of its peak after 6 steps: the GPU test `cuda_graphs_equal_eager_calls`).
//! Elsewhere, with graphs off, for an estimator whose calls are not captured
//! (`ConditionalDecoder::capturable`), or once a capture has failed, each call runs eagerly.
use super::decoder::{ConditionalDecoder, EstimatorContext, TimeConditioning};
use super::estimator_graphs::EstimatorGraphs;
#[cfg(feature = "cuda")]
use super::estimator_graphs::{Captured, Shape};
use crate::Result;
use candle_core::Tensor;

/// The fewest solver steps for which a shape seen for the first time is captured: the capture
/// costs about one eager call of host time, which fewer replays would not win back
/// (meanflow's 2 steps capture a shape from its second solve on).
pub const MIN_GRAPH_STEPS: usize = 4;

/// The calls of one solve: `call(x, step)` for `step` in `0..steps`, in any order.
pub(crate) struct EstimatorCalls<'a> {
    est: &'a ConditionalDecoder,
    ctx: &'a EstimatorContext,
    time: &'a TimeConditioning,
    /// The model's kept graphs when this solve may use them (CUDA, graphs on, no capture
    /// failed).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    graphs: Option<&'a EstimatorGraphs>,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    steps: usize,
    /// Whether this solve's first call chose to run eagerly (a shape seen for the first time
    /// with few steps): its later calls do too.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    eager: bool,
    /// The graph this solve replays, given back to `graphs` when it ends.
    #[cfg(feature = "cuda")]
    captured: Option<(Shape, Captured)>,
}

impl<'a> EstimatorCalls<'a> {
    /// The calls of a solve of `steps` steps; `graphs` (the model's kept graphs) asks for
    /// CUDA-graph replay, only taken on CUDA.
    pub(crate) fn new(
        est: &'a ConditionalDecoder,
        ctx: &'a EstimatorContext,
        time: &'a TimeConditioning,
        steps: usize,
        graphs: Option<&'a EstimatorGraphs>,
        device: &candle_core::Device,
    ) -> Self {
        let usable = cfg!(feature = "cuda") && device.is_cuda() && est.capturable(device);
        Self {
            est,
            ctx,
            time,
            graphs: graphs.filter(|g| usable && !g.failed()),
            steps,
            eager: false,
            #[cfg(feature = "cuda")]
            captured: None,
        }
    }

    /// The estimator on time-major `x (n, T, 80)` (the estimator's dtype) at time point `step`
    /// shared by the batch: `(n, T, 80)` in the estimator's dtype.
    pub(crate) fn call(&mut self, x: &Tensor, step: usize) -> Result<Tensor> {
        let tp = self.time.select(Some(step))?;
        #[cfg(feature = "cuda")]
        if let (Some(graphs), false) = (self.graphs, self.eager) {
            if self.captured.is_none() {
                let (mask, bias) = self.ctx.masks();
                let shape = Shape::new(x, mask, bias);
                match graphs.take(&shape) {
                    Some(c) => {
                        self.ctx.write_into(&c.ctx)?;
                        self.captured = Some((shape, c));
                    }
                    None if self.steps >= MIN_GRAPH_STEPS || graphs.seen(&shape) => {
                        return self.capture(graphs, shape, x, &tp);
                    }
                    None => {
                        self.eager = true;
                        return self.est.forward_btc(x, self.ctx, &tp);
                    }
                }
            }
            if let Some((_, c)) = &self.captured {
                c.x.slice_set(&x.contiguous()?, 0, 0)?;
                for (buf, row) in c.tp.iter().zip(&tp) {
                    buf.slice_set(&row.contiguous()?, 0, 0)?;
                }
                c.graph.launch()?;
                // a copy: the next replay overwrites the buffer
                return Ok(c.v.copy()?);
            }
        }
        self.est.forward_btc(x, self.ctx, &tp)
    }

    /// Runs the call on `x` and captures it in a graph with buffers of its own (kept for the
    /// rest of the solve and after it); eagerly from now on where the capture fails.
    #[cfg(feature = "cuda")]
    fn capture(
        &mut self,
        graphs: &'a EstimatorGraphs,
        shape: Shape,
        x: &Tensor,
        tp: &[Tensor],
    ) -> Result<Tensor> {
        let xb = owned(x)?;
        let tpb = tp
            .iter()
            .map(owned)
            .collect::<candle_core::Result<Vec<_>>>()?;
        let ctx = self.ctx.copy()?;
        let vb = Tensor::zeros(x.dims(), x.dtype(), x.device())?;
        let est = self.est;
        let mut step = || -> Result<()> {
            let v = est.forward_btc(&xb, &ctx, &tpb)?;
            vb.slice_set(&v, 0, 0)?;
            Ok(())
        };
        match chatterbox_cuda::capture(x.device(), &mut step)? {
            Ok(graph) => {
                tracing::debug!(shape = ?shape, "captured the flow estimator call");
                graphs.count_capture();
                let out = vb.copy()?;
                self.captured = Some((
                    shape,
                    Captured {
                        graph,
                        x: xb,
                        tp: tpb,
                        ctx,
                        v: vb,
                    },
                ));
                Ok(out)
            }
            Err(why) => {
                tracing::warn!("CUDA graph capture failed ({why}): the flow runs eagerly");
                graphs.mark_failed(why);
                self.graphs = None;
                // the step ran for real before the capture
                Ok(vb)
            }
        }
    }
}

#[cfg(feature = "cuda")]
impl Drop for EstimatorCalls<'_> {
    fn drop(&mut self) {
        if let (Some(graphs), Some((shape, c))) = (self.graphs, self.captured.take()) {
            graphs.put(shape, c);
        }
    }
}

/// A contiguous copy of `t` in a buffer of its own (a captured graph's input, rewritten in
/// place by later calls).
#[cfg(feature = "cuda")]
pub(crate) fn owned(t: &Tensor) -> candle_core::Result<Tensor> {
    if t.is_contiguous() {
        t.copy()
    } else {
        t.contiguous()
    }
}
