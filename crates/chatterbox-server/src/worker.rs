//! A device worker: a thread that loads its models, then takes jobs from the queues of the
//! models it holds, one at a time. A speech job pulls the model's stream chunk by chunk and
//! stops as soon as the client has gone (its channel is closed) or the deadline has passed.
//!
//! A model that batches ([`SpeechModel::batch`]) is served differently: its first speech job
//! opens a batch, and the worker keeps adding that model's queued speech jobs while the batch
//! has room and, with [`ServerConfig::capacity_admission`](crate::ServerConfig) (the default),
//! while its measured costs say every seated stream keeps ahead of its listener ([`Capacity`];
//! a job that does not fit waits at the head of the queue), stepping all of them together, until
//! the batch and the queue are empty. Each request tells the batch whether it is played as it
//! arrives ([`RequestBatch::set_live`]), for the order of its audio work, and the round the
//! requests it holds (seated and queued) are expected to bring ([`RequestBatch::expect_load`]:
//! their number and [`Capacity`]'s round for it), which the streams it starts are paced for. A voice
//! job taken meanwhile is analysed between two rounds by the batch
//! ([`RequestBatch::save_voice`]), and admissions go on; only a batch that cannot analyse
//! makes it wait until the running requests are done (the batch borrows the model). Other
//! models of the same worker wait for the batch to empty.
//!
//! A library voice that a model has no conditionals for yet (uploaded while the model was not
//! loaded) gets them derived from the voice's clip when a request first uses it, here on the
//! worker, and stored for the next time (see [`crate::voices::derive`]).
//!
//! Every model error (and every panic's message) is looked at for a sticky CUDA error
//! ([`crate::engine::sticky_cuda_error`]): after one the device is unusable, so the worker
//! records the fault, answers the requests it holds with 503 and stops serving its models; it
//! then answers 503 to what is queued for a model no healthy worker holds, until shutdown. A
//! job that panics is counted and answered (its channel closes), the gauges are kept right
//! (a request counts as running only while a guard for it lives), and the worker goes on.
use crate::capacity::Capacity;
use crate::engine::{sticky_cuda_error, sticky_cuda_error_in, Fault, Loader, Shared};
use crate::error::ApiError;
use crate::job::{Event, Job, SpeechJob, VoiceJob, Work};
use crate::model::{BatchItem, ModelError, ModelId, NoBuiltinVoice, RequestBatch, SpeechModel};
use crate::voices::{self, DeriveError, StoreError, VoiceFile};
use chatterbox_dsp::Audio;
use chatterbox_pipeline::PipelineError;
use crossbeam_channel::{Receiver, Select};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::PoisonError;
use std::time::{Duration, Instant};

/// How often an idle worker looks at the shutdown flag.
const IDLE_POLL: Duration = Duration::from_millis(50);

/// A job counted in the `running` gauge while this lives (a panic unwinding through the job
/// drops it too).
struct RunningGuard<'a>(&'a AtomicUsize);

impl<'a> RunningGuard<'a> {
    fn new(running: &'a AtomicUsize) -> Self {
        running.fetch_add(1, Ordering::AcqRel);
        Self(running)
    }
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A worker's own health: notes the sticky CUDA errors its models report.
struct Health<'a> {
    shared: &'a Shared,
    index: usize,
    label: &'a str,
}

impl Health<'_> {
    /// Records `fault` (the first one stays).
    fn set(&self, fault: Fault, detail: &str) {
        let Some(h) = self.shared.health.get(self.index) else {
            return;
        };
        if h.set_fault(fault) {
            tracing::error!(
                device = self.label,
                error = fault.name(),
                detail,
                "the device failed and cannot recover: its worker stops serving; restart the server"
            );
        }
    }

    /// Notes a model error: a sticky CUDA error faults the worker.
    fn check(&self, e: &(dyn std::error::Error + 'static)) {
        if let Some(code) = sticky_cuda_error(e) {
            self.set(Fault::Device(code), &e.to_string());
        }
    }

    /// Notes a panic: counted, and a sticky CUDA error in its message faults the worker.
    fn panicked(&self, payload: &(dyn std::any::Any + Send)) {
        self.shared.panics.fetch_add(1, Ordering::AcqRel);
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if let Some(code) = sticky_cuda_error_in(&msg) {
            self.set(Fault::Device(code), &msg);
        }
    }

    /// Records that the worker's models did not load.
    fn set_load_failed(&self) {
        if let Some(h) = self.shared.health.get(self.index) {
            h.set_fault(Fault::Load);
        }
    }

    /// Whether the worker has stopped serving (its device failed).
    fn failed(&self) -> bool {
        self.shared
            .health
            .get(self.index)
            .is_some_and(|h| h.fault().is_some())
    }

    /// The API error of a model error (see [`classify`]), noting a sticky CUDA error.
    fn classify(&self, e: &ModelError, param: Option<&str>) -> ApiError {
        self.check(e.as_ref());
        classify(e, param)
    }
}

/// The worker thread's body (`index`: the worker's, in the engine's order of devices).
pub(crate) fn run(index: usize, label: &str, loader: Loader, shared: &Shared) {
    let t0 = Instant::now();
    let health = Health {
        shared,
        index,
        label,
    };
    let loaded = std::panic::catch_unwind(AssertUnwindSafe(loader));
    let models = match loaded {
        Ok(Ok(models)) => models,
        Ok(Err(e)) => return load_failed(&health, &e.to_string()),
        Err(_) => {
            shared.panics.fetch_add(1, Ordering::AcqRel);
            return load_failed(&health, "the loader panicked");
        }
    };
    let mut by_id: BTreeMap<ModelId, Box<dyn SpeechModel>> = BTreeMap::new();
    for m in models {
        by_id.insert(m.id(), m);
    }
    {
        let mut order = shared
            .loaded
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for (id, m) in &by_id {
            if !order.contains(id) {
                order.push(*id);
            }
            if let Some(q) = shared.queues.get(id) {
                q.workers.fetch_add(m.slots().max(1), Ordering::AcqRel);
            }
        }
    }
    shared.started.fetch_add(1, Ordering::AcqRel);
    let names: Vec<&str> = by_id.keys().map(|m| m.name()).collect();
    tracing::info!(device = label, models = ?names, secs = t0.elapsed().as_secs_f32(), "worker ready");

    let ids: Vec<ModelId> = by_id.keys().copied().collect();
    // each batched model's measured costs, kept from one batch to the next
    let mut capacity: BTreeMap<ModelId, Capacity> = BTreeMap::new();
    while !health.failed() {
        let mut sel = Select::new();
        let mut rxs = Vec::with_capacity(ids.len());
        for id in &ids {
            if let Some(q) = shared.queues.get(id) {
                sel.recv(&q.rx);
                rxs.push((*id, &q.rx));
            }
        }
        let job = match sel.select_timeout(IDLE_POLL) {
            Ok(op) => {
                let i = op.index();
                let (id, rx) = rxs[i];
                op.recv(rx).ok().map(|j| (id, j))
            }
            Err(_) => None,
        };
        let Some((id, job)) = job else {
            if shared.stopping.load(Ordering::Acquire) && rxs.iter().all(|(_, rx)| rx.is_empty()) {
                break;
            }
            continue;
        };
        let Some(model) = by_id.get_mut(&id) else {
            continue;
        };
        let rx = rxs
            .iter()
            .find(|(m, _)| *m == id)
            .map(|(_, rx)| (*rx).clone());
        let mut next = Some(job);
        while let Some(mut job) = next.take() {
            if health.failed() {
                refuse(job, id);
                continue;
            }
            let batched = matches!(job.work, Work::Speech(_)) && model.slots() > 1;
            let done = std::panic::catch_unwind(AssertUnwindSafe(|| match (batched, &rx) {
                (true, Some(rx)) => {
                    // a voice to derive is derived now, while no batch holds the model
                    if let Work::Speech(s) = &mut job.work {
                        let m = &mut **model;
                        match prepare_voice(s.voice.as_deref(), id, &health, &mut |a, p| {
                            m.save_voice(a, p)
                        }) {
                            Prepared::Ready(v) => s.voice = v,
                            Prepared::Failed(e) => {
                                let _ = s.tx.send(Event::Error(e));
                                return None;
                            }
                            Prepared::Defer => {
                                let _ = s.tx.send(Event::Error(ApiError::internal(
                                    "the voice could not be analysed",
                                )));
                                return None;
                            }
                        }
                    }
                    let c = capacity.entry(id).or_default();
                    serve_batch(model.as_ref(), job, rx, &health, c)
                }
                _ => {
                    let _running = RunningGuard::new(&shared.running);
                    work(model.as_mut(), job, &health);
                    None
                }
            }));
            match done {
                Ok(deferred) => next = deferred,
                Err(payload) => {
                    health.panicked(payload.as_ref());
                    tracing::error!(device = label, model = %id, "a job panicked; the worker goes on");
                }
            }
        }
    }
    if health.failed() {
        retire(&by_id, &health);
    }
    tracing::info!(device = label, "worker stopped");
}

fn load_failed(health: &Health<'_>, why: &str) {
    tracing::error!(
        device = health.label,
        error = why,
        "loading the models failed"
    );
    health.set_load_failed();
    health.shared.failed.fetch_add(1, Ordering::AcqRel);
    health.shared.started.fetch_add(1, Ordering::AcqRel);
}

/// Answers a job that a failed device cannot do: 503 (its slot is released with it).
fn refuse(job: Job, model: ModelId) {
    let e = || ApiError::device_failed(model);
    match job.work {
        Work::Speech(s) => {
            let _ = s.tx.send(Event::Error(e()));
        }
        Work::Voice(v) => {
            let _ = v.reply.send(Err(e()));
        }
    }
}

/// After its device failed: the worker's models are no longer admitted from it, and what is
/// queued for a model that no healthy worker holds is answered 503, until shutdown.
fn retire(models: &BTreeMap<ModelId, Box<dyn SpeechModel>>, health: &Health<'_>) {
    let shared = health.shared;
    for (id, m) in models {
        if let Some(q) = shared.queues.get(id) {
            q.workers.fetch_sub(m.slots().max(1), Ordering::AcqRel);
        }
    }
    loop {
        let orphans: Vec<(ModelId, &Receiver<Job>)> = models
            .keys()
            .filter_map(|id| {
                let q = shared.queues.get(id)?;
                (q.workers.load(Ordering::Acquire) == 0).then_some((*id, &q.rx))
            })
            .collect();
        for (id, rx) in &orphans {
            while let Ok(job) = rx.try_recv() {
                refuse(job, *id);
            }
        }
        if shared.stopping.load(Ordering::Acquire) {
            break;
        }
        std::thread::sleep(IDLE_POLL);
    }
}

/// Does one job (its slot is released when `job` is dropped at the end).
fn work(model: &mut dyn SpeechModel, job: Job, health: &Health<'_>) {
    match job.work {
        Work::Speech(s) => speak(model, s, health),
        Work::Voice(v) => analyse(model, v, health),
    }
}

fn analyse(model: &mut dyn SpeechModel, job: VoiceJob, health: &Health<'_>) {
    let r = model
        .save_voice(&job.audio, &job.path)
        .map_err(|e| health.classify(&e, Some("file")));
    let _ = job.reply.send(r);
}

fn speak(model: &mut dyn SpeechModel, job: SpeechJob, health: &Health<'_>) {
    let t0 = Instant::now();
    let id = job.id;
    let send = |e: Event| job.tx.send(e).is_ok();
    if job.tx.is_closed() {
        tracing::info!(request = id, "client left while queued");
        return;
    }
    if Instant::now() >= job.deadline {
        send(Event::Error(ApiError::timeout()));
        return;
    }
    let id_model = model.id();
    let voice = match prepare_voice(job.voice.as_deref(), id_model, health, &mut |a, p| {
        model.save_voice(a, p)
    }) {
        Prepared::Ready(v) => v,
        Prepared::Failed(e) => {
            send(Event::Error(e));
            return;
        }
        Prepared::Defer => {
            send(Event::Error(ApiError::internal(
                "the voice could not be analysed",
            )));
            return;
        }
    };
    if let Err(e) = model.use_voice(voice.as_deref()) {
        send(Event::Error(health.classify(&e, Some("voice"))));
        return;
    }
    let mut opts = model.default_options();
    job.overrides.apply(&mut opts);
    opts.lexicon = job.lexicon.clone();
    opts.word_alignment = job.word_timings;
    if let Some(cap) = job.max_new_tokens {
        opts.max_new_tokens = opts.max_new_tokens.min(cap.max(1));
    }
    let mut stream = match model.stream(&job.text, &opts) {
        Ok(s) => s,
        Err(e) => {
            send(Event::Error(health.classify(&e, None)));
            return;
        }
    };
    let (mut samples, mut chunks, mut truncated) = (0usize, 0usize, false);
    loop {
        if job.tx.is_closed() {
            tracing::info!(request = id, chunks, "client left: generation stopped");
            return;
        }
        if Instant::now() >= job.deadline {
            tracing::warn!(
                request = id,
                chunks,
                "request timed out: generation stopped"
            );
            send(Event::Error(ApiError::timeout()));
            return;
        }
        match stream.next() {
            Some(Ok(chunk)) => {
                samples += chunk.samples.len();
                chunks += 1;
                truncated |= chunk.truncated;
                if !chunk.captions.is_empty() && !send(Event::Timings(chunk.captions)) {
                    tracing::info!(request = id, chunks, "client left: generation stopped");
                    return;
                }
                if !send(Event::Audio(chunk.samples)) {
                    tracing::info!(request = id, chunks, "client left: generation stopped");
                    return;
                }
            }
            Some(Err(e)) => {
                let e = health.classify(&e, None);
                tracing::warn!(request = id, error = %e, "generation failed");
                send(Event::Error(e));
                return;
            }
            None => break,
        }
    }
    drop(stream);
    let secs = t0.elapsed().as_secs_f64();
    let audio_secs = samples as f64 / f64::from(crate::model::SAMPLE_RATE);
    tracing::info!(
        request = id,
        model = %model.id(),
        chars = job.text.chars().count(),
        audio_secs,
        secs,
        truncated,
        "generated"
    );
    send(Event::Done { truncated });
}

/// A request in a batch: its job (the admission slot is released when it is dropped), what
/// it has had so far, and its place in the `running` gauge.
struct Running<'a> {
    job: Job,
    started: Instant,
    samples: usize,
    /// Whether a sentence of its speech was cut at `max_new_tokens`.
    truncated: bool,
    _running: RunningGuard<'a>,
}

impl Running<'_> {
    fn speech(&self) -> Option<&SpeechJob> {
        match &self.job.work {
            Work::Speech(s) => Some(s),
            Work::Voice(_) => None,
        }
    }
}

/// Serves `first` and the model's queued speech jobs as one batch (see the module docs) until
/// both are empty; returns a job the batch could not take (a voice job, or a speech job whose
/// voice must be analysed, when the batch cannot analyse), for the caller to do next.
fn serve_batch(
    model: &dyn SpeechModel,
    first: Job,
    rx: &Receiver<Job>,
    health: &Health<'_>,
    capacity: &mut Capacity,
) -> Option<Job> {
    let shared = health.shared;
    let mut batch = match model.batch() {
        Some(Ok(b)) => b,
        Some(Err(e)) => {
            health.check(e.as_ref());
            tracing::error!(error = %e, "could not open a batch");
            if let Work::Speech(s) = &first.work {
                let _ = s.tx.send(Event::Error(ApiError::internal(format!(
                    "generation failed: {e}"
                ))));
            }
            return None;
        }
        None => return Some(first),
    };
    let mut running: BTreeMap<u64, Running<'_>> = BTreeMap::new();
    // A job the batch cannot take now (it waits for the batch to drain; no job is admitted
    // meanwhile), and a speech job taken while the batch was full (the next to join).
    let mut deferred: Option<Job> = None;
    let mut pending = Some(first);
    loop {
        // Between two rounds: speech jobs join while there is room, and voice jobs at the
        // head of the queue are analysed now, room or not.
        while deferred.is_none() {
            let job = match pending.take() {
                Some(j) => j,
                None => match rx.try_recv() {
                    Ok(j) => j,
                    Err(_) => break,
                },
            };
            let job = match job {
                Job {
                    work: Work::Voice(v),
                    _slot,
                } => {
                    let r = {
                        let _running = RunningGuard::new(&shared.running);
                        batch_analyse(batch.as_mut(), &v.audio, &v.path, health)
                    };
                    match r {
                        Err(e) if e.is::<AnalysisDeferred>() => {
                            deferred = Some(Job {
                                work: Work::Voice(v),
                                _slot,
                            });
                        }
                        r => {
                            let _ = v
                                .reply
                                .send(r.map_err(|e| health.classify(&e, Some("file"))));
                        }
                    }
                    continue;
                }
                job => job,
            };
            if !batch.has_room() || !fits(capacity, &running, &job, shared.by_capacity) {
                pending = Some(job);
                break;
            }
            match admit(batch.as_mut(), model, job, health) {
                Admission::Admitted(rid, job) => {
                    batch.set_live(rid, playback(&job).is_some());
                    running.insert(
                        rid,
                        Running {
                            job,
                            started: Instant::now(),
                            samples: 0,
                            truncated: false,
                            _running: RunningGuard::new(&shared.running),
                        },
                    );
                }
                Admission::Deferred(job) => deferred = Some(job),
                Admission::Answered => {}
            }
        }
        if running.is_empty() {
            if let Some(t) = batch.timings() {
                tracing::info!(
                    model = %model.id(),
                    rounds = t.rounds,
                    mean_decoding = t.decoded as f64 / t.rounds.max(1) as f64,
                    admit_s = t.admit.as_secs_f64(),
                    decode_s = t.decode.as_secs_f64(),
                    audio_s = t.audio.as_secs_f64(),
                    flow_s = t.flow.as_secs_f64(),
                    vocoder_s = t.vocoder.as_secs_f64(),
                    flow_calls = t.flow_calls,
                    chunks_per_flow_call = t.flow_chunks as f64 / t.flow_calls.max(1) as f64,
                    vocoder_calls = t.vocoder_calls,
                    chunks_per_vocoder_call =
                        t.vocoder_chunks as f64 / t.vocoder_calls.max(1) as f64,
                    paced_sentences = t.paced_sentences,
                    fitted_hops = t.fitted_hops,
                    "batch drained"
                );
            }
            // (a job still pending found no room in an empty batch: it opens the next one)
            return deferred.or(pending);
        }
        // Clients gone and deadlines passed leave before the step.
        let now = Instant::now();
        let gone: Vec<u64> = running
            .iter()
            .filter_map(|(rid, r)| {
                let s = r.speech()?;
                if s.tx.is_closed() {
                    tracing::info!(request = s.id, "client left: generation stopped");
                    Some(*rid)
                } else if now >= s.deadline {
                    tracing::warn!(request = s.id, "request timed out: generation stopped");
                    let _ = s.tx.send(Event::Error(ApiError::timeout()));
                    Some(*rid)
                } else {
                    None
                }
            })
            .collect();
        for rid in gone {
            batch.cancel(rid);
            running.remove(&rid);
        }
        if running.is_empty() {
            continue;
        }
        // Each chunk goes to its client as soon as the batch has made it; requests that
        // ended or whose client left are settled after the round.
        let mut ended: Vec<(u64, bool)> = Vec::new();
        let seated = running.len();
        // The round the requests held now will bring once all are seated (a crowd still in
        // the queue included): streams that start now are paced for it, not for the quieter
        // rounds before it.
        let waiting = usize::from(pending.is_some()) + rx.len();
        batch.expect_load(
            capacity.expected_round(seated, waiting, model.slots(), shared.by_capacity),
            crate::capacity::held(seated, waiting, model.slots()),
        );
        let round = Instant::now();
        let work_before = batch.timings().map(|t| t.audio);
        let mut made = 0usize;
        batch.step(&mut |rid, item| {
            let Some(r) = running.get_mut(&rid) else {
                return;
            };
            if let BatchItem::Audio {
                samples, truncated, ..
            } = &item
            {
                r.samples += samples.len();
                r.truncated |= *truncated;
                made += samples.len();
            }
            let r = &*r;
            let Some(s) = r.speech() else { return };
            match item {
                BatchItem::Timings(t) => {
                    // a client gone is noticed with the audio that follows
                    let _ = s.tx.send(Event::Timings(t));
                }
                BatchItem::Audio { samples, last, .. } => {
                    let sent = samples.is_empty() || s.tx.send(Event::Audio(samples)).is_ok();
                    if last {
                        tracing::info!(
                            request = s.id,
                            model = %model.id(),
                            audio_secs = r.samples as f64 / f64::from(crate::model::SAMPLE_RATE),
                            secs = r.started.elapsed().as_secs_f64(),
                            truncated = r.truncated,
                            "generated"
                        );
                        let _ = s.tx.send(Event::Done {
                            truncated: r.truncated,
                        });
                        ended.push((rid, false));
                    } else if !sent {
                        ended.push((rid, true));
                    }
                }
                BatchItem::Failed(e) => {
                    let e = health.classify(&e, None);
                    tracing::warn!(request = s.id, error = %e, "generation failed");
                    let _ = s.tx.send(Event::Error(e));
                    ended.push((rid, false));
                }
            }
        });
        // the round's flow and HiFT work (a batch that does not say counts it all as the
        // round's own part)
        let audio_work = match (work_before, batch.timings()) {
            (Some(before), Some(after)) => after.audio.saturating_sub(before),
            _ => Duration::ZERO,
        };
        capacity.observe(
            seated,
            round.elapsed(),
            audio_work,
            Duration::from_secs_f64(made as f64 / f64::from(crate::model::SAMPLE_RATE)),
        );
        if let Some(n) = capacity.streams(model.slots()) {
            shared
                .batch_capacity
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert((health.index, model.id()), n);
        }
        for (rid, cancel) in ended {
            if cancel {
                batch.cancel(rid);
            }
            running.remove(&rid);
        }
        if health.failed() {
            // the device is gone: nothing in the batch can finish, nothing may join it
            let e = || ApiError::device_failed(model.id());
            for r in running.values() {
                if let Some(s) = r.speech() {
                    let _ = s.tx.send(Event::Error(e()));
                }
            }
            for job in [deferred, pending].into_iter().flatten() {
                refuse(job, model.id());
            }
            return None;
        }
    }
}

/// Whether `job` is played as it arrives and at what speed (`None`: a whole file, or not a
/// speech job).
fn playback(job: &Job) -> Option<f32> {
    match &job.work {
        Work::Speech(s) if s.live => Some(s.overrides.speed.unwrap_or(1.0)),
        _ => None,
    }
}

/// Whether `job` may join the batch of `running` now by its measured capacity
/// ([`Capacity::admits`], at the speed of its fastest live stream): always without
/// `by_capacity`, and for a whole file while no live stream is seated (nobody's playback can
/// suffer then).
fn fits(
    capacity: &Capacity,
    running: &BTreeMap<u64, Running<'_>>,
    job: &Job,
    by_capacity: bool,
) -> bool {
    if !by_capacity {
        return true;
    }
    let speeds = running
        .values()
        .filter_map(|r| playback(&r.job))
        .chain(playback(job));
    let Some(speed) = speeds.reduce(f32::max) else {
        return true;
    };
    capacity.admits(running.len(), speed)
}

/// What became of a speech job offered to a batch.
enum Admission {
    /// It joined the batch under this id.
    Admitted(u64, Job),
    /// Its voice must be analysed and the batch cannot now: it waits for the batch to drain.
    Deferred(Job),
    /// It was answered (its error sent, or its client had gone).
    Answered,
}

/// Adds a speech job to the batch (deriving its voice's conditionals first if the model has
/// none yet), or answers it with its error.
fn admit(
    batch: &mut dyn RequestBatch,
    model: &dyn SpeechModel,
    mut job: Job,
    health: &Health<'_>,
) -> Admission {
    let Work::Speech(s) = &mut job.work else {
        return Admission::Answered;
    };
    if s.tx.is_closed() {
        tracing::info!(request = s.id, "client left while queued");
        return Admission::Answered;
    }
    if Instant::now() >= s.deadline {
        let _ = s.tx.send(Event::Error(ApiError::timeout()));
        return Admission::Answered;
    }
    match prepare_voice(s.voice.as_deref(), model.id(), health, &mut |a, p| {
        batch_analyse(batch, a, p, health)
    }) {
        Prepared::Ready(v) => s.voice = v,
        Prepared::Failed(e) => {
            let _ = s.tx.send(Event::Error(e));
            return Admission::Answered;
        }
        Prepared::Defer => return Admission::Deferred(job),
    }
    let mut opts = model.default_options();
    s.overrides.apply(&mut opts);
    opts.lexicon = s.lexicon.clone();
    if let Some(cap) = s.max_new_tokens {
        opts.max_new_tokens = opts.max_new_tokens.min(cap.max(1));
    }
    match batch.add(s.voice.as_deref(), &s.text, &opts) {
        Ok(rid) => Admission::Admitted(rid, job),
        Err(e) => {
            let param = if e.downcast_ref::<NoBuiltinVoice>().is_some() || s.voice.is_some() {
                Some("voice")
            } else {
                None
            };
            let _ = s.tx.send(Event::Error(health.classify(&e, param)));
            Admission::Answered
        }
    }
}

/// A batch that cannot analyse a voice now ([`RequestBatch::save_voice`] said `None`).
#[derive(Debug, thiserror::Error)]
#[error("the batch cannot analyse a voice")]
struct AnalysisDeferred;

/// A voice analysis by the batch, between rounds; a panic inside fails this analysis alone.
fn batch_analyse(
    batch: &mut dyn RequestBatch,
    audio: &Audio,
    path: &Path,
    health: &Health<'_>,
) -> Result<(), ModelError> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| batch.save_voice(audio, path))) {
        Ok(Some(r)) => r,
        Ok(None) => Err(Box::new(AnalysisDeferred)),
        Err(payload) => {
            health.panicked(payload.as_ref());
            tracing::error!("a voice analysis panicked");
            Err("the voice analysis failed".into())
        }
    }
}

/// A speech job's voice, made ready for its model.
enum Prepared {
    /// The file to load (`None`: the built-in voice).
    Ready(Option<PathBuf>),
    /// The voice must be analysed, and that cannot be done now.
    Defer,
    /// The request's error.
    Failed(ApiError),
}

/// Makes a speech job's voice ready for `model`: a library voice that the model has no
/// conditionals for yet gets them derived from its clip by `analyse` and stored.
fn prepare_voice(
    voice: Option<&Path>,
    model: ModelId,
    health: &Health<'_>,
    analyse: &mut dyn FnMut(&Audio, &Path) -> Result<(), ModelError>,
) -> Prepared {
    let Some(path) = voice else {
        return Prepared::Ready(None);
    };
    // twice at most: a voice replaced during the derivation is looked up again
    for _ in 0..2 {
        let d = match voices::voice_file(path, model) {
            VoiceFile::Ready(p) => return Prepared::Ready(Some(p)),
            VoiceFile::Derive(d) => d,
        };
        let t0 = Instant::now();
        match voices::derive(&d, analyse) {
            Ok(p) => {
                tracing::info!(
                    model = %model,
                    voice = %d.clip.display(),
                    secs = t0.elapsed().as_secs_f64(),
                    "voice analysed for the model on first use"
                );
                return Prepared::Ready(Some(p));
            }
            Err(DeriveError::Store(StoreError::Gone)) => continue,
            Err(DeriveError::Analysis(e)) if e.is::<AnalysisDeferred>() => return Prepared::Defer,
            Err(DeriveError::Analysis(e)) => {
                tracing::warn!(model = %model, voice = %d.clip.display(), error = %e, "the voice cannot be analysed for the model");
                return Prepared::Failed(health.classify(&e, Some("voice")));
            }
            Err(DeriveError::Store(e)) => {
                return Prepared::Failed(ApiError::internal(format!(
                    "cannot prepare the voice for model {model}: {e}"
                )))
            }
        }
    }
    Prepared::Failed(ApiError::not_found(
        Some("voice"),
        "voice_not_found",
        "the voice was replaced or deleted while it was being prepared",
    ))
}

/// The API error of a model error: bad input is a 400, a text chunk the model gave no speech
/// for is the 500 [`ApiError::no_speech`], anything else a generic 500.
pub(crate) fn classify(e: &ModelError, param: Option<&str>) -> ApiError {
    if let Some(n) = e.downcast_ref::<NoBuiltinVoice>() {
        return ApiError::invalid("voice", n.to_string());
    }
    if let Some(p) = e.downcast_ref::<PipelineError>() {
        if let PipelineError::NoSpeechTokens { chunk, .. } = p {
            return ApiError::no_speech(*chunk);
        }
        let bad_input = matches!(
            p,
            PipelineError::InvalidInput { .. }
                | PipelineError::Text(_)
                | PipelineError::Dsp(_)
                | PipelineError::ReferenceTooShort { .. }
                | PipelineError::SilentAudio { .. }
                | PipelineError::NoConditionals
        );
        if bad_input {
            let param = match p {
                PipelineError::Text(_) => "language",
                _ => param.unwrap_or("input"),
            };
            return ApiError::invalid(param, p.to_string());
        }
    }
    ApiError::internal(format!("generation failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_without_speech_is_the_no_speech_500() {
        let e: ModelError = Box::new(PipelineError::NoSpeechTokens {
            chunk: 1,
            text: "Well done!".into(),
        });
        let a = classify(&e, None);
        assert_eq!(a.code, Some("no_speech"));
        assert!(!a.body().to_string().contains("Well done"));
        // anything else the model says stays a generic 500
        let e: ModelError = "cuda error".into();
        let a = classify(&e, None);
        assert!(a.is_internal() && a.code.is_none());
    }
}
