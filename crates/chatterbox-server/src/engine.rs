//! The engine: one worker thread per device, each owning its models, and in front of them a
//! queue per model with a bounded admission count. A request beyond
//! `workers holding the model + queue_capacity` is refused at once (429) instead of waiting,
//! with `Retry-After` the queue's expected wait at the pace it has kept (see
//! [`crate::queue_wait`]).
//!
//! Each worker has a health ([`WorkerHealth`]): it serves until a fault stops it. A CUDA
//! error that leaves the device's context unusable ([`sticky_cuda_error`]: every later call
//! would fail the same way, and only a new process recovers) stops the worker for good: its
//! models are no longer admitted from it, requests for a model that no healthy worker holds
//! get 503, and `/ready` answers 503 naming the device.
use crate::admission::{Admission, Slot};
use crate::error::{ApiError, ServerError};
use crate::job::{Job, Work};
use crate::model::{ModelError, ModelId, SpeechModel};
use crate::worker;
use chatterbox_pipeline::DeviceMemory;
use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// Loads a device's models, on that device's worker thread.
pub type Loader = Box<dyn FnOnce() -> Result<Vec<Box<dyn SpeechModel>>, ModelError> + Send>;

/// Reads a device's memory for `/metrics` (see [`chatterbox_pipeline::device_memory`]).
pub type MemoryProbe = Arc<dyn Fn() -> Option<DeviceMemory> + Send + Sync>;

/// The models of one device (a GPU, or the CPU): a worker thread owns them.
pub struct DeviceModels {
    label: String,
    loader: Loader,
    memory: Option<MemoryProbe>,
}

impl DeviceModels {
    /// Models loaded by `loader` on the worker thread when the server starts (`/ready`
    /// answers 200 once every device has loaded).
    pub fn new(
        label: impl Into<String>,
        loader: impl FnOnce() -> Result<Vec<Box<dyn SpeechModel>>, ModelError> + Send + 'static,
    ) -> Self {
        Self {
            label: label.into(),
            loader: Box::new(loader),
            memory: None,
        }
    }

    /// Reports the device's memory in `/metrics` (`chatterbox_device_memory_*_bytes`), read
    /// by `probe` at each scrape; e.g. `move || chatterbox_pipeline::device_memory(&device)`.
    pub fn with_memory_probe(
        mut self,
        probe: impl Fn() -> Option<DeviceMemory> + Send + Sync + 'static,
    ) -> Self {
        self.memory = Some(Arc::new(probe));
        self
    }

    /// Models already loaded.
    pub fn loaded(label: impl Into<String>, models: Vec<Box<dyn SpeechModel>>) -> Self {
        Self::new(label, move || Ok(models))
    }
}

impl std::fmt::Debug for DeviceModels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceModels")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// Per model: its queue, how many workers hold it, and its admission count.
#[derive(Debug)]
pub(crate) struct ModelQueue {
    tx: Sender<Job>,
    pub(crate) rx: Receiver<Job>,
    pub(crate) workers: AtomicUsize,
    admission: Arc<Admission>,
}

/// CUDA errors after which the device's context is unusable: every later call fails the same
/// way, and only a new process recovers ("sticky" errors, as the CUDA documentation describes
/// them). Each by its driver API name (`CUDA_ERROR_*`, as cudarc and candle print it) and its
/// runtime API name.
const STICKY_CUDA_ERRORS: [(&str, &str); 10] = [
    ("CUDA_ERROR_ILLEGAL_ADDRESS", "cudaErrorIllegalAddress"),
    ("CUDA_ERROR_LAUNCH_FAILED", "cudaErrorLaunchFailure"),
    (
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "cudaErrorIllegalInstruction",
    ),
    (
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "cudaErrorMisalignedAddress",
    ),
    (
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "cudaErrorHardwareStackError",
    ),
    ("CUDA_ERROR_ECC_UNCORRECTABLE", "cudaErrorECCUncorrectable"),
    (
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        "cudaErrorInvalidAddressSpace",
    ),
    ("CUDA_ERROR_INVALID_PC", "cudaErrorInvalidPc"),
    ("CUDA_ERROR_LAUNCH_TIMEOUT", "cudaErrorLaunchTimeout"),
    ("CUDA_ERROR_ASSERT", "cudaErrorAssert"),
];

/// The sticky CUDA error named in `text` (its driver API name), if any.
pub(crate) fn sticky_cuda_error_in(text: &str) -> Option<&'static str> {
    STICKY_CUDA_ERRORS
        .iter()
        .find(|(driver, runtime)| text.contains(driver) || text.contains(runtime))
        .map(|(driver, _)| *driver)
}

/// The sticky CUDA error behind `e` (anywhere in its chain of sources), if any: after it the
/// worker's device is unusable. Recognised by the error's text, which is all that crosses
/// the model's boxed errors.
pub(crate) fn sticky_cuda_error(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    if let Some(code) = sticky_cuda_error_in(&format!("{e:?}")) {
        return Some(code);
    }
    let mut source = Some(e);
    while let Some(e) = source {
        if let Some(code) = sticky_cuda_error_in(&e.to_string()) {
            return Some(code);
        }
        source = e.source();
    }
    None
}

/// Why a worker stopped serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Its models failed to load (its device never served).
    Load,
    /// Its device failed with this sticky CUDA error ([`sticky_cuda_error`]).
    Device(&'static str),
}

impl Fault {
    /// The `error` label of `chatterbox_worker_fault_info`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Load => "load_failed",
            Self::Device(code) => code,
        }
    }
}

/// A device worker's health, as `/ready` and `/metrics` report it.
#[derive(Debug)]
pub(crate) struct WorkerHealth {
    /// The device's label.
    pub(crate) label: String,
    fault: Mutex<Option<Fault>>,
}

impl WorkerHealth {
    fn new(label: String) -> Self {
        Self {
            label,
            fault: Mutex::new(None),
        }
    }

    /// Why the worker stopped serving (`None` while it serves or loads).
    pub(crate) fn fault(&self) -> Option<Fault> {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the worker's fault; the first one stays. Returns whether this one was the
    /// first.
    pub(crate) fn set_fault(&self, fault: Fault) -> bool {
        let mut f = self.fault.lock().unwrap_or_else(PoisonError::into_inner);
        if f.is_some() {
            return false;
        }
        *f = Some(fault);
        true
    }
}

/// State the workers and the handlers share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) queues: BTreeMap<ModelId, ModelQueue>,
    /// Models in the order the workers loaded them (the first is the default).
    pub(crate) loaded: RwLock<Vec<ModelId>>,
    /// Workers that have finished loading (successfully or not).
    pub(crate) started: AtomicUsize,
    /// Workers that failed to load.
    pub(crate) failed: AtomicUsize,
    /// Jobs being worked on.
    pub(crate) running: AtomicUsize,
    /// Set at shutdown: workers leave once their queues are empty.
    pub(crate) stopping: AtomicBool,
    /// Each worker's health, by worker index.
    pub(crate) health: Vec<WorkerHealth>,
    /// Jobs (and loaders) that panicked on a worker.
    pub(crate) panics: AtomicU64,
    /// Whether batches seat requests by measured capacity (else while they have room).
    pub(crate) by_capacity: bool,
    /// By worker index and model, the live streams its batches' measured costs keep fed
    /// (`Capacity::streams`), once measured.
    pub(crate) batch_capacity: Mutex<BTreeMap<(usize, ModelId), usize>>,
}

/// The device workers and their queues.
pub struct Engine {
    shared: Arc<Shared>,
    workers: usize,
    capacity: usize,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The devices that report their memory, by label.
    probes: Vec<(String, MemoryProbe)>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("workers", &self.workers)
            .field("capacity", &self.capacity)
            .field("probes", &self.probes.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Starts a worker thread per device; each loads its models, then serves its queues.
    /// Starts a worker per device; `capacity` requests beyond the workers' may wait in each
    /// model's queue, and `by_capacity` seats batched requests by measured capacity
    /// ([`crate::ServerConfig::capacity_admission`]).
    pub(crate) fn start(
        devices: Vec<DeviceModels>,
        capacity: usize,
        by_capacity: bool,
    ) -> Result<Self, ServerError> {
        if devices.is_empty() {
            return Err(ServerError::Config("no device to serve from".into()));
        }
        let queues = ModelId::ALL
            .into_iter()
            .map(|m| {
                let (tx, rx) = crossbeam_channel::unbounded();
                let q = ModelQueue {
                    tx,
                    rx,
                    workers: AtomicUsize::new(0),
                    admission: Arc::new(Admission::default()),
                };
                (m, q)
            })
            .collect();
        let shared = Arc::new(Shared {
            queues,
            loaded: RwLock::new(Vec::new()),
            started: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            health: devices
                .iter()
                .map(|d| WorkerHealth::new(d.label.clone()))
                .collect(),
            panics: AtomicU64::new(0),
            by_capacity,
            batch_capacity: Mutex::new(BTreeMap::new()),
        });
        let workers = devices.len();
        let probes = devices
            .iter()
            .filter_map(|d| Some((d.label.clone(), d.memory.clone()?)))
            .collect();
        let mut threads = Vec::with_capacity(workers);
        for (i, d) in devices.into_iter().enumerate() {
            let shared = shared.clone();
            let label = d.label.clone();
            let t = std::thread::Builder::new()
                .name(format!("tts-worker-{i}"))
                .spawn(move || worker::run(i, &label, d.loader, &shared))
                .map_err(ServerError::Thread)?;
            threads.push(t);
        }
        Ok(Self {
            shared,
            workers,
            capacity,
            threads: Mutex::new(threads),
            probes,
        })
    }

    /// Whether every worker has loaded its models (and at least one model is served).
    pub fn is_ready(&self) -> bool {
        self.shared.started.load(Ordering::Acquire) == self.workers && !self.models().is_empty()
    }

    /// Whether some worker is still loading.
    pub fn is_loading(&self) -> bool {
        self.shared.started.load(Ordering::Acquire) < self.workers
    }

    /// The models served, the default first.
    pub fn models(&self) -> Vec<ModelId> {
        self.shared
            .loaded
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Jobs admitted and not yet started.
    pub fn queue_depth(&self) -> usize {
        self.shared.queues.values().map(|q| q.rx.len()).sum()
    }

    /// Per worker (its index and device label) and batched model, the live streams its
    /// measured costs keep fed; pairs not measured yet are left out.
    pub(crate) fn batch_capacity(&self) -> Vec<(usize, String, ModelId, usize)> {
        let by = self
            .shared
            .batch_capacity
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        by.iter()
            .filter_map(|(&(i, m), &n)| Some((i, self.shared.health.get(i)?.label.clone(), m, n)))
            .collect()
    }

    /// Per model served, how long the requests admitted for it need at the pace measured
    /// (what a 429's `Retry-After` is made from); models not measured yet are left out.
    pub(crate) fn expected_waits(&self) -> Vec<(ModelId, Duration)> {
        self.models()
            .into_iter()
            .filter_map(|m| Some((m, self.shared.queues.get(&m)?.admission.expected_wait()?)))
            .collect()
    }

    /// Jobs being worked on.
    pub fn running(&self) -> usize {
        self.shared.running.load(Ordering::Acquire)
    }

    /// Each worker's device label and, when it has stopped serving, why.
    pub(crate) fn worker_health(&self) -> Vec<(String, Option<Fault>)> {
        self.shared
            .health
            .iter()
            .map(|h| (h.label.clone(), h.fault()))
            .collect()
    }

    /// The devices that failed with a sticky CUDA error, and the error.
    pub(crate) fn device_faults(&self) -> Vec<(String, &'static str)> {
        self.shared
            .health
            .iter()
            .filter_map(|h| match h.fault()? {
                Fault::Device(code) => Some((h.label.clone(), code)),
                Fault::Load => None,
            })
            .collect()
    }

    /// Jobs (and model loaders) that panicked on a worker so far.
    pub(crate) fn panics(&self) -> u64 {
        self.shared.panics.load(Ordering::Acquire)
    }

    /// The memory of each device that reports it, by label.
    pub fn device_memory(&self) -> Vec<(String, DeviceMemory)> {
        self.probes
            .iter()
            .filter_map(|(label, probe)| Some((label.clone(), probe()?)))
            .collect()
    }

    /// Queues `work` for a worker holding `model`: 429 when the model's admission count is
    /// full (`Retry-After`: the queue's expected wait, at least `retry_after`, which is also
    /// the answer before the queue's pace has been measured), 404 when no worker holds it,
    /// 503 while loading or when every worker that held it has failed.
    pub(crate) fn submit(
        &self,
        model: ModelId,
        work: Work,
        retry_after: u64,
    ) -> Result<(), ApiError> {
        let Some(q) = self.shared.queues.get(&model) else {
            return Err(ApiError::internal("no queue for the model"));
        };
        let workers = q.workers.load(Ordering::Acquire);
        if workers == 0 {
            return Err(if self.is_loading() {
                ApiError::loading()
            } else if self.models().contains(&model) {
                ApiError::device_failed(model)
            } else {
                ApiError::not_found(
                    Some("model"),
                    "model_not_found",
                    format!("model {model} is not loaded on this server"),
                )
            });
        }
        let slot = Slot::try_take(&q.admission, workers + self.capacity, retry_after)
            .map_err(|full| ApiError::queue_full(full.retry_after))?;
        q.tx.send(Job { work, _slot: slot })
            .map_err(|_| ApiError::draining())
    }

    /// Stops the workers once their queues are empty and waits for them (blocking).
    pub(crate) fn join(&self) {
        self.shared.stopping.store(true, Ordering::Release);
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for t in threads {
            if t.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
    }
}

/// What a request for `model` is told once the devices serving it have failed.
pub(crate) fn device_failed(model: ModelId) -> String {
    format!("the device serving model {model} has failed; the server must be restarted")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("T3 step failed")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error(
        "DriverError(CUDA_ERROR_ILLEGAL_ADDRESS, \"an illegal memory access was encountered\")"
    )]
    struct Inner;

    #[test]
    fn sticky_cuda_errors_are_recognised_by_name_anywhere_in_the_chain() {
        assert_eq!(
            sticky_cuda_error(&Outer(Inner)),
            Some("CUDA_ERROR_ILLEGAL_ADDRESS")
        );
        assert_eq!(
            sticky_cuda_error_in("cuda error: cudaErrorLaunchFailure: unspecified launch failure"),
            Some("CUDA_ERROR_LAUNCH_FAILED")
        );
        for (driver, runtime) in STICKY_CUDA_ERRORS {
            assert_eq!(sticky_cuda_error_in(&format!("x {driver} y")), Some(driver));
            assert_eq!(sticky_cuda_error_in(runtime), Some(driver));
        }
        // errors that leave the context usable are not faults
        for text in [
            "CUDA_ERROR_OUT_OF_MEMORY",
            "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
            "CUDA_ERROR_INVALID_VALUE",
            "shape mismatch",
        ] {
            assert_eq!(sticky_cuda_error_in(text), None, "{text}");
        }
        let io = std::io::Error::other("disk full");
        assert_eq!(sticky_cuda_error(&io), None);
    }

    #[test]
    fn the_first_fault_stays() {
        let h = WorkerHealth::new("cuda:0".into());
        assert_eq!(h.fault(), None);
        assert!(h.set_fault(Fault::Device("CUDA_ERROR_ASSERT")));
        assert!(!h.set_fault(Fault::Load));
        assert_eq!(h.fault(), Some(Fault::Device("CUDA_ERROR_ASSERT")));
        assert_eq!(Fault::Load.name(), "load_failed");
    }
}
