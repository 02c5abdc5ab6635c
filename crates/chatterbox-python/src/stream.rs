//! `stream(text)`'s Python iterator. The pipeline's `SpeechStream` borrows its model, so it
//! lives on a thread of its own that owns a reference to the model; each `__next__` asks it
//! for one chunk and waits without the GIL (Ctrl-C raises at once, see `worker`). The stream
//! runs only when pulled, as in Rust: the thread computes the next chunk only when asked, and
//! dropping (or exhausting, or interrupting) the iterator stops it.
use crate::error::{Error, Result};
use crate::model::Tts;
use crate::worker;
use chatterbox_pipeline::{GenerateOptions, StreamWatermarker, Watermarker, S3GEN_SR};
use numpy::PyArray1;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};

/// What the stream's thread answers a request with: samples, or `None` at the end.
type Reply = Option<Result<Vec<f32>>>;

/// An iterator of 24 kHz NumPy chunks (float32), watermarked as the pipeline's stream is.
#[pyclass(module = "chatterbox_rs._native", frozen)]
pub struct ChunkIter {
    /// Asks the thread for the next chunk; `None` once the stream has ended.
    requests: Mutex<Option<SyncSender<()>>>,
    /// The thread's answers.
    replies: Mutex<Receiver<Reply>>,
    /// A `__next__` is waiting (a second thread reading the same stream is refused).
    busy: AtomicBool,
}

impl ChunkIter {
    /// Starts the stream's thread (it waits for the first `__next__` before doing anything).
    pub fn start(
        model: Arc<Tts>,
        watermark: Option<Arc<dyn Watermarker>>,
        text: String,
        opts: GenerateOptions,
    ) -> Result<Self> {
        let (req_tx, req_rx) = sync_channel::<()>(1);
        let (tx, rx) = sync_channel::<Reply>(1);
        worker::spawn("chatterbox-stream", move || {
            let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                serve(&model, watermark, &text, &opts, &req_rx, &tx)
            }));
            if let Err(p) = served {
                let _ = tx.send(Some(Err(Error::Runtime(format!(
                    "internal error (a bug in chatterbox_rs): {}",
                    worker::panic_message(p.as_ref())
                )))));
            }
        })?;
        Ok(Self {
            requests: Mutex::new(Some(req_tx)),
            replies: Mutex::new(rx),
            busy: AtomicBool::new(false),
        })
    }

    fn finish(&self) {
        *self.requests.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The stream's thread: one chunk per request, empty chunks skipped, until the end, an error
/// or the iterator's going away.
fn serve(
    model: &Tts,
    watermark: Option<Arc<dyn Watermarker>>,
    text: &str,
    opts: &GenerateOptions,
    requests: &Receiver<()>,
    replies: &SyncSender<Reply>,
) {
    if requests.recv().is_err() {
        return;
    }
    let mut stream = match model.stream(text, opts) {
        Ok(s) => s,
        Err(e) => {
            let _ = replies.send(Some(Err(e.into())));
            return;
        }
    };
    let mut marker = StreamWatermarker::new(watermark, S3GEN_SR);
    loop {
        let reply = loop {
            match stream.next() {
                None => break None,
                Some(Err(e)) => break Some(Err(e.into())),
                Some(Ok(c)) if c.samples.is_empty() => {
                    if c.is_last {
                        break None;
                    }
                }
                Some(Ok(c)) => break Some(marker.push(c.samples).map_err(Error::from)),
            }
        };
        let more = matches!(reply, Some(Ok(_)));
        if replies.send(reply).is_err() || !more || requests.recv().is_err() {
            return;
        }
    }
}

#[pymethods]
impl ChunkIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArray1<f32>>>> {
        let Some(req) = self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return Ok(None);
        };
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(Error::Runtime(
                "this stream is being read by another thread at the same time".into(),
            )
            .into());
        }
        let got = if req.send(()).is_err() {
            Ok(None)
        } else {
            worker::wait(py, &self.replies)
        };
        self.busy.store(false, Ordering::Release);
        match got {
            Ok(Some(Some(Ok(samples)))) => Ok(Some(PyArray1::from_vec(py, samples))),
            Ok(Some(None)) | Ok(None) => {
                self.finish();
                Ok(None)
            }
            Ok(Some(Some(Err(e)))) | Err(e) => {
                self.finish();
                Err(e.into())
            }
        }
    }
}
