//! [`SpeechModel`] for the pipeline's models (English, multilingual, Turbo, Nano): the
//! built-in voice is kept aside so a request's library voice never outlives the request.
use crate::model::{
    BatchItem, ChunkIter, ModelError, ModelId, NoBuiltinVoice, RequestBatch, SpeechChunk,
    SpeechModel,
};
use chatterbox_dsp::Audio;
use chatterbox_pipeline::{
    BatchOptions, BatchOutput, ChatterboxMultilingualTts, ChatterboxTts, ChatterboxTurboTts,
    Conditionals, Device, GenerateOptions, Variant,
};
use std::path::Path;

/// One of the pipeline's models.
#[derive(Debug)]
enum Inner {
    English(ChatterboxTts),
    Multilingual(ChatterboxMultilingualTts),
    Turbo(ChatterboxTurboTts),
}

/// Calls `$body` with `$m` bound to the model inside `$inner`, whatever its type.
macro_rules! with_model {
    ($inner:expr, $m:ident => $body:expr) => {
        match $inner {
            Inner::English($m) => $body,
            Inner::Multilingual($m) => $body,
            Inner::Turbo($m) => $body,
        }
    };
}

/// The rounds between those on which a batch on CUDA runs the chunks that can wait
/// ([`PipelineModel::with_chunk_grid`]). On an H200, Turbo's open loop at 10 and 20 requests a
/// second made half and a third of the flow calls with 10 (2 and 3.9 chunks a call), 15-40 %
/// more audio a second and first bytes 2-3x sooner at p95; 5 shared less (1.6 and 3.0).
pub const CHUNK_GRID: usize = 10;

/// A pipeline model served by a worker, with its built-in voice (`conds.pt`) kept aside.
#[derive(Debug)]
pub struct PipelineModel {
    inner: Inner,
    builtin: Option<Conditionals>,
    device: Device,
    /// Whether the model's current voice is the one asked for (false after restoring a
    /// built-in voice that the checkpoint does not have).
    voice_set: bool,
    /// Continuous batching, when on ([`PipelineModel::with_batching`]).
    batching: Option<BatchOptions>,
    /// Chunks per batched flow call ([`PipelineModel::with_chunks_per_call`]).
    chunks_per_call: usize,
    /// How far ahead a chunk counts as urgent ([`PipelineModel::with_horizon`]).
    horizon: Option<std::time::Duration>,
    /// Whether live streams start on schedules their batch's pace can keep
    /// ([`PipelineModel::with_paced_schedule`]).
    paced_schedule: bool,
    /// Every how many rounds the chunks that can wait run
    /// ([`PipelineModel::with_chunk_grid`]).
    chunk_grid: Option<usize>,
    /// Whether live streams' hops are fitted as their chunks are made
    /// ([`PipelineModel::with_hop_fitting`]).
    hop_fitting: bool,
    /// The round fitted hops plan on at least ([`PipelineModel::with_round_budget`]).
    round_budget: Option<std::time::Duration>,
    /// The last batch's measured pace, which the next one starts from.
    pace: std::sync::Mutex<chatterbox_pipeline::Pace>,
}

impl PipelineModel {
    fn new(inner: Inner) -> Self {
        let (builtin, device) =
            with_model!(&inner, m => (m.conditionals().cloned(), m.t3().device().clone()));
        let voice_set = builtin.is_some();
        // the batching measured on CUDA (docs/benchmarks.md); elsewhere a batch's audio equals
        // its requests' own, whatever the load
        let cuda = device.is_cuda();
        Self {
            inner,
            builtin,
            device,
            voice_set,
            batching: None,
            chunks_per_call: chatterbox_pipeline::CHUNKS_PER_CALL,
            horizon: None,
            paced_schedule: cuda,
            chunk_grid: cuda.then_some(CHUNK_GRID),
            hop_fitting: cuda,
            round_budget: cuda.then(crate::capacity::round_budget),
            pace: std::sync::Mutex::default(),
        }
    }

    /// Speaks up to `opts.slots` requests at once through one batched T3 decoder (see
    /// `chatterbox_pipeline::SpeechBatch`), instead of one request at a time. Worth it on a
    /// GPU, where a decode step costs about the same for one request as for dozens; the
    /// decoder preallocates its KV caches for `opts.slots × opts.positions`.
    pub fn with_batching(mut self, opts: BatchOptions) -> Self {
        self.batching = (opts.slots > 0).then_some(opts);
        self
    }

    /// With batching on, the chunks that fall due together share flow calls of up to `rows`
    /// chunks (`SpeechBatch::set_chunks_per_call`; 1: each its own call). Default:
    /// `chatterbox_pipeline::CHUNKS_PER_CALL`.
    pub fn with_chunks_per_call(mut self, rows: usize) -> Self {
        self.chunks_per_call = rows.max(1);
        self
    }

    /// With batching on, how far ahead of its listener a chunk counts as urgent
    /// (`SpeechBatch::set_horizon`; `None`, the default: every chunk runs as soon as it is
    /// due, most urgent first).
    pub fn with_horizon(mut self, horizon: Option<std::time::Duration>) -> Self {
        self.horizon = horizon;
        self
    }

    /// With batching on, whether a streamed request starts on a chunk schedule that the
    /// batch's measured pace can make before its listener runs out (a longer first chunk and
    /// slower growth under load: `SpeechBatch::set_paced_schedule`; the pace carries from one
    /// batch to the next). Default: on on CUDA (measured there, docs/benchmarks.md), off
    /// elsewhere (where a batch's audio then equals its requests' own, whatever the load).
    pub fn with_paced_schedule(mut self, on: bool) -> Self {
        self.paced_schedule = on;
        self
    }

    /// With batching on, chunks whose listeners can wait run only every `every`th round,
    /// sharing their flow calls (`SpeechBatch::set_chunk_grid`; a chunk whose listener would
    /// run out first runs at once). Default: [`CHUNK_GRID`] on CUDA (measured there,
    /// docs/benchmarks.md), `None` elsewhere (every chunk runs in the round it falls due).
    pub fn with_chunk_grid(mut self, every: Option<usize>) -> Self {
        self.chunk_grid = every;
        self
    }

    /// With batching on, whether a live stream's next hop is fitted, when its chunk before
    /// is made, to what its listener has left (`SpeechBatch::set_hop_fitting`). Default: on
    /// on CUDA (measured there, docs/benchmarks.md), off elsewhere.
    pub fn with_hop_fitting(mut self, on: bool) -> Self {
        self.hop_fitting = on;
        self
    }

    /// With batching on, the round fitted hops plan on at least
    /// (`SpeechBatch::set_round_budget`). Default: on CUDA [`crate::round_budget`], the longest
    /// mean round admission by capacity lets a batch reach, so that a long hop chosen in quiet
    /// rounds is still made in time when the load grows; `None` elsewhere.
    pub fn with_round_budget(mut self, budget: Option<std::time::Duration>) -> Self {
        self.round_budget = budget;
        self
    }
}

/// The exaggeration voices are analysed with (the request's own is applied when speaking).
const EXAGGERATION: f32 = 0.5;

/// A [`RequestBatch`] over the pipeline's `SpeechBatch`.
struct PipelineBatch<'a> {
    /// Where the batch's pace goes when it is dropped, for the next one.
    pace: &'a std::sync::Mutex<chatterbox_pipeline::Pace>,
    batch: chatterbox_pipeline::SpeechBatch<'a>,
    /// The model the batch borrows, for voice analyses between rounds.
    model: &'a Inner,
    builtin: Option<&'a Conditionals>,
    device: &'a Device,
    id: ModelId,
}

impl Drop for PipelineBatch<'_> {
    fn drop(&mut self) {
        *self.pace.lock().unwrap_or_else(|e| e.into_inner()) = self.batch.pace();
    }
}

impl RequestBatch for PipelineBatch<'_> {
    fn has_room(&self) -> bool {
        self.batch.len() < self.batch.options().slots
    }

    fn len(&self) -> usize {
        self.batch.len()
    }

    fn add(
        &mut self,
        voice: Option<&Path>,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<u64, ModelError> {
        let loaded;
        let conds = match voice {
            Some(p) => {
                loaded = Conditionals::load(p, self.device)?;
                &loaded
            }
            None => self
                .builtin
                .ok_or_else(|| Box::new(NoBuiltinVoice(self.id)))?,
        };
        Ok(self.batch.add(conds, text, opts)?)
    }

    fn set_live(&mut self, id: u64, live: bool) {
        self.batch.set_live(id, live);
    }

    fn step(&mut self, emit: &mut dyn FnMut(u64, BatchItem)) {
        self.batch.step_with(|id, o| {
            let item = match o {
                BatchOutput::Chunk(c) => {
                    if !c.captions.is_empty() {
                        emit(id, BatchItem::Timings(c.captions));
                    }
                    BatchItem::Audio {
                        truncated: !c.truncated.is_empty(),
                        samples: c.samples,
                        last: c.is_last,
                    }
                }
                BatchOutput::Failed(e) => BatchItem::Failed(Box::new(e)),
                _ => return,
            };
            emit(id, item);
        });
    }

    fn cancel(&mut self, id: u64) {
        self.batch.cancel(id);
    }

    fn timings(&self) -> Option<chatterbox_pipeline::BatchTimings> {
        Some(self.batch.timings())
    }

    fn expect_load(&mut self, round: Option<std::time::Duration>, streams: usize) {
        self.batch.set_expected_round(round);
        self.batch.set_expected_streams(streams);
    }

    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Option<Result<(), ModelError>> {
        // the analysis reads the model the batch borrows and leaves its voice alone
        Some(analyse(self.model, audio, path))
    }
}

/// Analyses `audio` with `model` and saves the voice to `path`; the model's own voice is left
/// as it was.
fn analyse(model: &Inner, audio: &Audio, path: &Path) -> Result<(), ModelError> {
    let conds = with_model!(model, m => m.conditionals_from_audio(audio, EXAGGERATION))?;
    Ok(conds.save(path)?)
}

impl From<ChatterboxTts> for PipelineModel {
    fn from(m: ChatterboxTts) -> Self {
        Self::new(Inner::English(m))
    }
}

impl From<ChatterboxMultilingualTts> for PipelineModel {
    fn from(m: ChatterboxMultilingualTts) -> Self {
        Self::new(Inner::Multilingual(m))
    }
}

impl From<ChatterboxTurboTts> for PipelineModel {
    fn from(m: ChatterboxTurboTts) -> Self {
        Self::new(Inner::Turbo(m))
    }
}

impl SpeechModel for PipelineModel {
    fn id(&self) -> ModelId {
        match with_model!(&self.inner, m => m.variant()) {
            Variant::English => ModelId::English,
            Variant::Multilingual => ModelId::Multilingual,
            Variant::Turbo => ModelId::Turbo,
            Variant::Nano => ModelId::Nano,
        }
    }

    fn default_options(&self) -> GenerateOptions {
        with_model!(&self.inner, m => m.default_options())
    }

    fn use_voice(&mut self, path: Option<&Path>) -> Result<(), ModelError> {
        let conds = match path {
            Some(p) => Some(Conditionals::load(p, &self.device)?),
            None => self.builtin.clone(),
        };
        // Without a built-in voice the model keeps the last one; `voice_set` makes streams
        // refuse it instead of speaking in a previous request's voice.
        self.voice_set = conds.is_some();
        if let Some(c) = conds {
            with_model!(&mut self.inner, m => m.set_conditionals(c));
        }
        Ok(())
    }

    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Result<(), ModelError> {
        analyse(&self.inner, audio, path)
    }

    fn stream<'a>(
        &'a self,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<ChunkIter<'a>, ModelError> {
        if !self.voice_set {
            return Err(Box::new(NoBuiltinVoice(self.id())));
        }
        // Words timed from T3's alignment heads run its decode eagerly, without the CUDA
        // graphs: on an H200 English generated 3.8x slower with them and its stream ran dry
        // (docs/benchmarks.md), so a GPU serves estimated words and keeps real time.
        let mut opts = opts.clone();
        opts.word_alignment &= !self.device.is_cuda();
        let opts = &opts;
        with_model!(&self.inner, m => {
            let s = m.stream(text, opts)?;
            Ok(Box::new(s.map(|c| {
                c.map(|c| SpeechChunk {
                    truncated: !c.truncated.is_empty(),
                    samples: c.samples,
                    captions: c.captions,
                })
                .map_err(ModelError::from)
            })))
        })
    }

    fn slots(&self) -> usize {
        self.batching.as_ref().map_or(1, |o| o.slots)
    }

    fn batch(&self) -> Option<Result<Box<dyn RequestBatch + '_>, ModelError>> {
        let opts = self.batching.clone()?;
        let batch = with_model!(&self.inner, m => m.batch(opts));
        Some(match batch {
            Ok(mut batch) => Ok(Box::new(PipelineBatch {
                batch: {
                    batch.set_chunks_per_call(self.chunks_per_call);
                    batch.set_horizon(self.horizon);
                    batch.set_paced_schedule(self.paced_schedule);
                    batch.set_chunk_grid(self.chunk_grid);
                    batch.set_hop_fitting(self.hop_fitting);
                    batch.set_round_budget(self.round_budget);
                    batch.set_pace(*self.pace.lock().unwrap_or_else(|e| e.into_inner()));
                    batch
                },
                pace: &self.pace,
                model: &self.inner,
                builtin: self.builtin.as_ref(),
                device: &self.device,
                id: self.id(),
            })),
            Err(e) => Err(Box::new(e)),
        })
    }
}
