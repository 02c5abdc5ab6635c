//! The engine: one worker thread per device, each owning its models, and in front of them a
//! queue per model with a bounded admission count. A request beyond
//! `workers holding the model + queue_capacity` is refused at once (429) instead of waiting.
use crate::error::{ApiError, ServerError};
use crate::job::{Job, Slot, Work};
use crate::model::{ModelError, ModelId, SpeechModel};
use crate::worker;
use chatterbox_pipeline::DeviceMemory;
use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

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
    admitted: Arc<AtomicUsize>,
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
    pub(crate) fn start(devices: Vec<DeviceModels>, capacity: usize) -> Result<Self, ServerError> {
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
                    admitted: Arc::new(AtomicUsize::new(0)),
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
                .spawn(move || worker::run(&label, d.loader, &shared))
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

    /// Jobs being worked on.
    pub fn running(&self) -> usize {
        self.shared.running.load(Ordering::Acquire)
    }

    /// The memory of each device that reports it, by label.
    pub fn device_memory(&self) -> Vec<(String, DeviceMemory)> {
        self.probes
            .iter()
            .filter_map(|(label, probe)| Some((label.clone(), probe()?)))
            .collect()
    }

    /// Queues `work` for a worker holding `model`: 429 when the model's admission count is
    /// full, 404 when no worker holds it, 503 while loading.
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
                ApiError::unavailable("the models are still loading")
            } else {
                ApiError::not_found(
                    Some("model"),
                    "model_not_found",
                    format!("model {model} is not loaded on this server"),
                )
            });
        }
        let Some(slot) = Slot::try_take(&q.admitted, workers + self.capacity) else {
            return Err(ApiError::queue_full(retry_after));
        };
        q.tx.send(Job { work, _slot: slot })
            .map_err(|_| ApiError::unavailable("the server is shutting down"))
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
