//! A device worker: a thread that loads its models, then takes jobs from the queues of the
//! models it holds, one at a time. A speech job pulls the model's stream chunk by chunk and
//! stops as soon as the client has gone (its channel is closed) or the deadline has passed.
use crate::engine::{Loader, Shared};
use crate::error::ApiError;
use crate::job::{Event, Job, SpeechJob, VoiceJob, Work};
use crate::model::{ModelError, ModelId, NoBuiltinVoice, SpeechModel};
use chatterbox_pipeline::PipelineError;
use crossbeam_channel::Select;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

/// How often an idle worker looks at the shutdown flag.
const IDLE_POLL: Duration = Duration::from_millis(50);

/// The worker thread's body.
pub(crate) fn run(label: &str, loader: Loader, shared: &Shared) {
    let t0 = Instant::now();
    let loaded = std::panic::catch_unwind(AssertUnwindSafe(loader));
    let models = match loaded {
        Ok(Ok(models)) => models,
        Ok(Err(e)) => return failed(label, shared, &e.to_string()),
        Err(_) => return failed(label, shared, "the loader panicked"),
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
        for id in by_id.keys() {
            if !order.contains(id) {
                order.push(*id);
            }
            if let Some(q) = shared.queues.get(id) {
                q.workers.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
    shared.started.fetch_add(1, Ordering::AcqRel);
    let names: Vec<&str> = by_id.keys().map(|m| m.name()).collect();
    tracing::info!(device = label, models = ?names, secs = t0.elapsed().as_secs_f32(), "worker ready");

    let ids: Vec<ModelId> = by_id.keys().copied().collect();
    loop {
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
        shared.running.fetch_add(1, Ordering::AcqRel);
        let done = std::panic::catch_unwind(AssertUnwindSafe(|| work(model.as_mut(), job)));
        shared.running.fetch_sub(1, Ordering::AcqRel);
        if done.is_err() {
            tracing::error!(device = label, model = %id, "a job panicked; the worker goes on");
        }
    }
    tracing::info!(device = label, "worker stopped");
}

fn failed(label: &str, shared: &Shared, why: &str) {
    tracing::error!(device = label, error = why, "loading the models failed");
    shared.failed.fetch_add(1, Ordering::AcqRel);
    shared.started.fetch_add(1, Ordering::AcqRel);
}

/// Does one job (its slot is released when `job` is dropped at the end).
fn work(model: &mut dyn SpeechModel, job: Job) {
    match job.work {
        Work::Speech(s) => speak(model, s),
        Work::Voice(v) => analyse(model, v),
    }
}

fn analyse(model: &mut dyn SpeechModel, job: VoiceJob) {
    let r = model
        .save_voice(&job.audio, &job.path)
        .map_err(|e| classify(&e, Some("file")));
    let _ = job.reply.send(r);
}

fn speak(model: &mut dyn SpeechModel, job: SpeechJob) {
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
    if let Err(e) = model.use_voice(job.voice.as_deref()) {
        send(Event::Error(classify(&e, Some("voice"))));
        return;
    }
    let mut opts = model.default_options();
    job.overrides.apply(&mut opts);
    if let Some(cap) = job.max_new_tokens {
        opts.max_new_tokens = opts.max_new_tokens.min(cap.max(1));
    }
    let mut stream = match model.stream(&job.text, &opts) {
        Ok(s) => s,
        Err(e) => {
            send(Event::Error(classify(&e, None)));
            return;
        }
    };
    let (mut samples, mut chunks) = (0usize, 0usize);
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
            Some(Ok(audio)) => {
                samples += audio.len();
                chunks += 1;
                if !send(Event::Audio(audio)) {
                    tracing::info!(request = id, chunks, "client left: generation stopped");
                    return;
                }
            }
            Some(Err(e)) => {
                let e = classify(&e, None);
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
        "generated"
    );
    send(Event::Done);
}

/// The API error of a model error: bad input is a 400, anything else a 500.
pub(crate) fn classify(e: &ModelError, param: Option<&str>) -> ApiError {
    if let Some(n) = e.downcast_ref::<NoBuiltinVoice>() {
        return ApiError::invalid("voice", n.to_string());
    }
    if let Some(p) = e.downcast_ref::<PipelineError>() {
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
