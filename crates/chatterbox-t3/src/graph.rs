//! CUDA-graph replay of the decode step ([`DecodeStep::forward`] + [`DecodeStep::select`]), one
//! graph per attention-length bucket: the CUDA fast path of the loop in
//! chatterbox/models/t3/t3.py (upstream 5de7a54). Off CUDA, and whenever capture fails, the
//! step runs eagerly with the same buffers.
//!
//! Recipe (tested on candle 0.11.1 + cudarc 0.19): the first step of a bucket runs eagerly
//! while candle's host-to-device parameter cache is held (it warms every kernel and caches each
//! op's shape upload), then the same step is captured, not executed, and instantiated. Later
//! steps of that bucket write their inputs into the step's fixed buffers and replay the graph.
//! The caches, inputs and outputs never move, so the graph's baked-in pointers stay valid for
//! the whole generation.
use crate::decode::{AttentionSpan, DecodeStep};
use crate::sampling::{LogitsProcessorList, TokenPicker};
use crate::t3::T3;
use crate::Result;

/// Captured decode steps, keyed by attention bucket.
pub(crate) struct DecodeGraphs {
    /// Attention-length bucket (positions).
    bucket: usize,
    #[cfg(feature = "cuda")]
    graphs: Vec<(usize, cuda::Graph)>,
    /// Set after a failed capture: the rest of the generation runs eagerly.
    disabled: bool,
}

impl std::fmt::Debug for DecodeGraphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeGraphs")
            .field("bucket", &self.bucket)
            .field("disabled", &self.disabled)
            .finish_non_exhaustive()
    }
}

impl DecodeGraphs {
    /// Graphs over attention buckets of `bucket` positions, or `None` when `step` does not live
    /// on a CUDA device (or the crate was built without the `cuda` feature).
    pub(crate) fn for_step(step: &DecodeStep, bucket: usize) -> Option<Self> {
        if !cfg!(feature = "cuda") || !step.device().is_cuda() || bucket == 0 {
            return None;
        }
        Some(Self {
            bucket,
            #[cfg(feature = "cuda")]
            graphs: Vec::new(),
            disabled: false,
        })
    }

    /// The bucket size.
    pub(crate) fn bucket(&self) -> usize {
        self.bucket
    }

    /// Graphs captured so far.
    pub(crate) fn captured(&self) -> usize {
        #[cfg(feature = "cuda")]
        return self.graphs.len();
        #[cfg(not(feature = "cuda"))]
        0
    }

    /// Runs one step (forward at `span`, then select) from the inputs already written into
    /// `step`: by replaying the span's graph, capturing it first if needed, or eagerly once
    /// capture has failed.
    pub(crate) fn run(
        &mut self,
        step: &mut DecodeStep,
        model: &T3,
        span: AttentionSpan,
        processors: &LogitsProcessorList,
        picker: &TokenPicker,
    ) -> Result<()> {
        let eager = |step: &mut DecodeStep| -> Result<()> {
            step.forward(model, span)?;
            step.select(processors, picker)
        };
        let AttentionSpan::Bucket(len) = span else {
            return eager(step);
        };
        if self.disabled {
            return eager(step);
        }
        #[cfg(feature = "cuda")]
        {
            if let Some((_, g)) = self.graphs.iter().find(|(l, _)| *l == len) {
                return Ok(g.launch()?);
            }
            let dev = step.device().clone();
            match cuda::capture(&dev, &mut || eager(step))? {
                Some(g) => {
                    tracing::debug!(bucket = len, "captured a T3 decode graph");
                    self.graphs.push((len, g));
                }
                None => self.disabled = true,
            }
            Ok(())
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = len;
            eager(step)
        }
    }
}

#[cfg(feature = "cuda")]
pub(crate) mod cuda {
    use crate::Result;

    pub(crate) use chatterbox_cuda::Graph;

    /// [`chatterbox_cuda::capture`], logging why when the capture fails (the step has run
    /// either way; the caller decodes eagerly from then on).
    pub(crate) fn capture(
        dev: &candle_core::Device,
        eager: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Option<Graph>> {
        Ok(match chatterbox_cuda::capture(dev, eager)? {
            Ok(g) => Some(g),
            Err(why) => {
                tracing::warn!("CUDA graph capture failed ({why}): T3 decodes eagerly");
                None
            }
        })
    }
}
