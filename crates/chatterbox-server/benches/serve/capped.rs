//! The served model with its `max_new_tokens` capped at a value the bench sets between phases
//! (what `ServerConfig::max_new_tokens` does, without reloading the model), or per request:
//! the open-loop phase's requests each have their own length, found by their seed.
use chatterbox_pipeline::{Audio, GenerateOptions};
use chatterbox_server::{
    BatchItem, ChunkIter, ModelError, ModelId, PipelineModel, RequestBatch, SpeechModel,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The token caps: one for every request, and the caps of the requests whose seeds the bench
/// registered (the open-loop phase's mixed lengths; each request sends its own seed).
#[derive(Debug)]
pub struct Caps {
    shared: AtomicUsize,
    by_seed: Mutex<HashMap<u64, usize>>,
}

impl Caps {
    /// `tokens` for every request.
    pub fn new(tokens: usize) -> Self {
        Self {
            shared: AtomicUsize::new(tokens),
            by_seed: Mutex::new(HashMap::new()),
        }
    }

    /// Sets the cap of the requests whose seed has none of its own.
    pub fn set(&self, tokens: usize) {
        self.shared.store(tokens, Ordering::Release);
    }

    /// Sets the cap of the requests sent with `seed`.
    pub fn set_for(&self, seed: u64, tokens: usize) {
        self.by_seed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(seed, tokens);
    }

    /// The cap of a request of these options (at least 1).
    fn of(&self, opts: &GenerateOptions) -> usize {
        let own = opts.seed.and_then(|s| {
            let caps = self.by_seed.lock().unwrap_or_else(PoisonError::into_inner);
            caps.get(&s).copied()
        });
        own.unwrap_or_else(|| self.shared.load(Ordering::Acquire))
            .max(1)
    }
}

/// The served model, its `max_new_tokens` capped by [`Caps`], which the bench changes between
/// phases.
pub struct Capped {
    /// The model.
    pub inner: PipelineModel,
    /// The caps.
    pub cap: Arc<Caps>,
}

impl SpeechModel for Capped {
    fn id(&self) -> ModelId {
        self.inner.id()
    }
    fn default_options(&self) -> GenerateOptions {
        self.inner.default_options()
    }
    fn use_voice(&mut self, path: Option<&Path>) -> Result<(), ModelError> {
        self.inner.use_voice(path)
    }
    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Result<(), ModelError> {
        self.inner.save_voice(audio, path)
    }
    fn stream<'a>(
        &'a self,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<ChunkIter<'a>, ModelError> {
        self.inner.stream(text, &capped(opts, &self.cap))
    }
    fn slots(&self) -> usize {
        self.inner.slots()
    }
    fn batch(&self) -> Option<Result<Box<dyn RequestBatch + '_>, ModelError>> {
        Some(self.inner.batch()?.map(|inner| {
            Box::new(CappedBatch {
                inner,
                cap: self.cap.clone(),
            }) as Box<dyn RequestBatch + '_>
        }))
    }
}

/// `opts` with `max_new_tokens` at most its cap in `caps`.
fn capped(opts: &GenerateOptions, caps: &Caps) -> GenerateOptions {
    let mut o = opts.clone();
    o.max_new_tokens = o.max_new_tokens.min(caps.of(opts));
    o
}

/// [`Capped`]'s batch: the same cap on what is added.
struct CappedBatch<'a> {
    inner: Box<dyn RequestBatch + 'a>,
    cap: Arc<Caps>,
}

impl RequestBatch for CappedBatch<'_> {
    fn has_room(&self) -> bool {
        self.inner.has_room()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn add(
        &mut self,
        voice: Option<&Path>,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<u64, ModelError> {
        self.inner.add(voice, text, &capped(opts, &self.cap))
    }
    fn step(&mut self, emit: &mut dyn FnMut(u64, BatchItem)) {
        self.inner.step(emit)
    }
    fn cancel(&mut self, id: u64) {
        self.inner.cancel(id)
    }
    fn set_live(&mut self, id: u64, live: bool) {
        self.inner.set_live(id, live)
    }
    fn timings(&self) -> Option<chatterbox_pipeline::BatchTimings> {
        self.inner.timings()
    }
    fn expect_load(&mut self, round: Option<std::time::Duration>, streams: usize) {
        // `CHATTERBOX_SERVE_EXPECT=0`: the batch plans on its measured pace alone; another
        // number scales the forecast round (an experiment's knob)
        static SCALE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
        let scale = *SCALE.get_or_init(|| {
            std::env::var("CHATTERBOX_SERVE_EXPECT")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1.0)
        });
        if scale > 0.0 {
            self.inner
                .expect_load(round.map(|r| r.mul_f64(scale)), streams);
        }
    }
    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Option<Result<(), ModelError>> {
        self.inner.save_voice(audio, path)
    }
}
