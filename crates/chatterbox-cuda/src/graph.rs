//! Capturing a step of candle ops into a CUDA graph, to replay it without the host's per-op
//! launch cost.
//!
//! Recipe (candle 0.11.1 + cudarc 0.19): the step runs once for real while candle's
//! host-to-device parameter cache is held (every kernel gets loaded and each op's shape upload
//! cached), then a second run is captured, not executed, and instantiated. The step must
//! read its inputs from and write its outputs to buffers that outlive the graph (the graph
//! keeps their pointers); what it allocates and frees inside is the graph's own memory.
use candle_core::cuda_backend::cudarc::driver::{sys, CudaGraph, DriverError};

/// An instantiated graph. It is used only through `&mut` or `&` of its owner, never from two
/// threads at once, which is what the CUDA driver requires of graph objects.
pub struct Graph(CudaGraph);

// SAFETY: a graph may move to another thread; it is only ever launched through its owner
// (no shared access across threads), so calls on it are serialised as the driver requires.
unsafe impl Send for Graph {}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").finish_non_exhaustive()
    }
}

impl Graph {
    /// Replays the graph on the stream it was captured from.
    pub fn launch(&self) -> candle_core::Result<()> {
        self.0.launch().map_err(driver)
    }
}

fn driver(e: DriverError) -> candle_core::Error {
    candle_core::Error::Msg(format!("CUDA graph: {e:?}"))
}

/// Runs `step` once for real, then captures a second run of it into a graph without executing
/// it. `Ok(Err(why))` when the capture itself is not possible or fails (e.g. a device created
/// on its own stream with event tracking on): the step has run either way, and the caller goes
/// on eagerly. An error of the real run is returned as is.
pub fn capture<E: From<candle_core::Error>>(
    dev: &candle_core::Device,
    step: &mut dyn FnMut() -> Result<(), E>,
) -> Result<Result<Graph, String>, E> {
    let dev = dev.as_cuda_device()?.clone();
    let stream = dev.cuda_stream();
    let _cache = dev.enable_cuda_graph_htod_cache();
    step()?;
    // the capture begins after the real run's work has finished (its lazily loaded kernels
    // and cached uploads are in place, and a failure of it is not blamed on the capture)
    stream.synchronize().map_err(driver)?;
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    if let Err(e) = stream.begin_capture(mode) {
        return Ok(Err(format!("capture unavailable: {e:?}")));
    }
    // Always end the capture, even when the step failed inside it.
    let captured = step();
    let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    Ok(match (captured, graph) {
        (Ok(()), Ok(Some(g))) => {
            g.upload().map_err(driver)?;
            Ok(Graph(g))
        }
        (Err(_), _) => Err("the step failed while being captured".to_string()),
        (_, Err(e)) => Err(format!("{e:?}")),
        (_, Ok(None)) => Err("empty graph".to_string()),
    })
}
