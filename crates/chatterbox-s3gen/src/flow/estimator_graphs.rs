//! Captured estimator calls kept from one solve to the next (issue 43; no counterpart in the
//! reference, which runs each call eagerly).
//!
//! A captured call replays for any solve of the same shape: its graph reads `x`, the time
//! embeddings and the solve's context from buffers of its own, which each solve overwrites.
//! The batched server's flow calls repeat their shapes (rows are padded to a frame bucket on
//! CUDA, `rows.rs`), so meanflow's two steps, too few to pay for a capture within one solve
//! (about one eager call of host time, [`MIN_GRAPH_STEPS`](super::MIN_GRAPH_STEPS)), replay a
//! graph captured by an earlier call: a shape seen before is captured at its first step. At
//! most [`KEPT_GRAPHS`] are kept, the least recently used dropped first (each holds its own
//! device memory for the call's intermediates).
// Only CUDA builds capture; elsewhere the store is built and tested but never filled.
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]
#[cfg(feature = "cuda")]
use super::decoder::EstimatorContext;
use candle_core::{DType, Tensor};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Captured calls kept at most.
pub const KEPT_GRAPHS: usize = 48;

/// Shapes remembered as seen (for the capture of a solve of few steps).
const SEEN_SHAPES: usize = 256;

/// What a captured call depends on besides the values in its buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    x: Vec<usize>,
    dtype: DType,
    mask: bool,
    key_bias: bool,
}

impl Shape {
    pub(crate) fn new(x: &Tensor, mask: bool, key_bias: bool) -> Self {
        Self {
            x: x.dims().to_vec(),
            dtype: x.dtype(),
            mask,
            key_bias,
        }
    }
}

/// A captured call and the buffers its graph reads and writes.
#[cfg(feature = "cuda")]
pub(crate) struct Captured {
    pub graph: chatterbox_cuda::Graph,
    pub x: Tensor,
    pub tp: Vec<Tensor>,
    pub ctx: EstimatorContext,
    pub v: Tensor,
}

#[cfg(not(feature = "cuda"))]
pub(crate) enum Captured {}

struct Kept<T> {
    /// Most recently used last.
    graphs: Vec<(Shape, T)>,
    /// Most recently seen last.
    seen: VecDeque<Shape>,
}

/// Values kept by shape, the least recently used dropped beyond [`KEPT_GRAPHS`], and the
/// shapes seen lately.
pub(crate) struct GraphStore<T> {
    kept: Mutex<Kept<T>>,
    captured: AtomicUsize,
    /// Why a capture failed, once one has: no more are tried.
    failure: Mutex<Option<String>>,
}

/// The captured estimator calls of one flow model, shared by its clones.
pub(crate) type EstimatorGraphs = GraphStore<Captured>;

impl<T> Default for GraphStore<T> {
    fn default() -> Self {
        Self {
            kept: Mutex::new(Kept {
                graphs: Vec::new(),
                seen: VecDeque::new(),
            }),
            captured: AtomicUsize::new(0),
            failure: Mutex::new(None),
        }
    }
}

impl<T> std::fmt::Debug for GraphStore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EstimatorGraphs")
            .field("captured", &self.captured())
            .finish_non_exhaustive()
    }
}

impl<T> GraphStore<T> {
    /// Graphs captured so far.
    pub(crate) fn captured(&self) -> usize {
        self.captured.load(Ordering::Relaxed)
    }

    /// Graphs kept now.
    pub(crate) fn kept(&self) -> usize {
        self.lock().graphs.len()
    }

    /// Why captures are off for good (one failed: the device or a call cannot be captured).
    pub(crate) fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn failed(&self) -> bool {
        self.failure().is_some()
    }

    pub(crate) fn mark_failed(&self, why: String) {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    pub(crate) fn count_capture(&self) {
        self.captured.fetch_add(1, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept<T>> {
        // a panic elsewhere while holding it leaves the lists whole
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the captured call of `shape` out (a solve holds it until it ends: [`put`]).
    ///
    /// [`put`]: Self::put
    pub(crate) fn take(&self, shape: &Shape) -> Option<T> {
        let mut kept = self.lock();
        let i = kept.graphs.iter().position(|(s, _)| s == shape)?;
        Some(kept.graphs.remove(i).1)
    }

    /// Keeps `captured` as the most recently used, dropping the least recently used beyond
    /// [`KEPT_GRAPHS`].
    pub(crate) fn put(&self, shape: Shape, captured: T) {
        let mut kept = self.lock();
        kept.graphs.retain(|(s, _)| *s != shape);
        kept.graphs.push((shape, captured));
        let over = kept.graphs.len().saturating_sub(KEPT_GRAPHS);
        kept.graphs.drain(..over);
    }

    /// Records a sighting of `shape`; returns whether it was seen before.
    pub(crate) fn seen(&self, shape: &Shape) -> bool {
        let mut kept = self.lock();
        let before = match kept.seen.iter().position(|s| s == shape) {
            Some(i) => {
                kept.seen.remove(i);
                true
            }
            None => false,
        };
        kept.seen.push_back(shape.clone());
        if kept.seen.len() > SEEN_SHAPES {
            kept.seen.pop_front();
        }
        before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn shape(t: usize) -> Shape {
        let x = Tensor::zeros((2, t, 80), DType::F32, &Device::Cpu).unwrap();
        Shape::new(&x, true, true)
    }

    #[test]
    fn a_shape_is_seen_before_from_its_second_sighting() {
        let g = GraphStore::<usize>::default();
        assert!(!g.seen(&shape(64)));
        assert!(g.seen(&shape(64)));
        assert!(!g.seen(&shape(128)));
        // the masks are part of the shape
        let x = Tensor::zeros((2, 64, 80), DType::F32, &Device::Cpu).unwrap();
        assert!(!g.seen(&Shape::new(&x, false, false)));
        // only the newest SEEN_SHAPES are remembered
        for t in 0..SEEN_SHAPES {
            g.seen(&shape(1000 + t));
        }
        assert!(!g.seen(&shape(64)));
        assert!(g.seen(&shape(1000 + SEEN_SHAPES - 1)));
    }

    #[test]
    fn the_least_recently_used_is_dropped_beyond_the_limit() {
        let g = GraphStore::<usize>::default();
        for t in 0..KEPT_GRAPHS {
            g.put(shape(t), t);
        }
        // a solve takes 0 and puts it back: it is the most recently used now
        assert_eq!(g.take(&shape(0)), Some(0));
        assert_eq!(g.kept(), KEPT_GRAPHS - 1);
        g.put(shape(0), 0);
        g.put(shape(KEPT_GRAPHS), KEPT_GRAPHS);
        assert_eq!(g.kept(), KEPT_GRAPHS);
        assert_eq!(g.take(&shape(1)), None, "1 was the least recently used");
        assert_eq!(g.take(&shape(0)), Some(0));
        assert_eq!(g.take(&shape(KEPT_GRAPHS)), Some(KEPT_GRAPHS));
        // putting a shape again replaces it
        g.put(shape(2), 20);
        assert_eq!(g.take(&shape(2)), Some(20));
        assert_eq!(g.take(&shape(2)), None);
    }

    #[test]
    fn nothing_is_kept_before_a_capture() {
        let g = GraphStore::<usize>::default();
        assert!(g.take(&shape(64)).is_none());
        assert_eq!((g.kept(), g.captured(), g.failed()), (0, 0, false));
        g.count_capture();
        g.mark_failed("no capture here".into());
        assert_eq!((g.captured(), g.failed()), (1, true));
        assert_eq!(g.failure().as_deref(), Some("no capture here"));
    }
}
