//! A fake model for the voice library tests: its voice files say which model analysed which
//! clip (so a test can check that a voice's clip and every model's file come from one upload),
//! its analyses can be held at a gate (to look at the library while an upload is under way),
//! and it can speak requests together in a batch (text `long` takes [`LONG_STEPS`] rounds,
//! any other text one), logging what it does in order.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

use crate::support::{RoundModel, Rounds};
use chatterbox_dsp::Audio;
use chatterbox_pipeline::GenerateOptions;
use chatterbox_server::{
    BatchItem, ChunkIter, DeviceModels, ModelError, ModelId, RequestBatch, SpeechModel,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Rounds (or chunks) of the text `long`.
pub const LONG_STEPS: usize = 40;
/// Samples per chunk.
const CHUNK: usize = 240;

/// What a voice file of `model` analysed from `clip` holds.
pub fn voice_text(model: ModelId, clip: &Audio) -> String {
    format!("fake-voice {} {}", model.name(), digest(clip))
}

/// A fingerprint of a clip: its rate, length and samples.
pub fn digest(a: &Audio) -> String {
    let h = a.samples.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, s| {
        (h ^ u64::from(s.to_bits())).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{}:{}:{h:016x}", a.sample_rate, a.samples.len())
}

/// A gate analyses wait at while it is closed (20 s at most).
#[derive(Clone, Default)]
pub struct Gate(Arc<GateState>);

#[derive(Default)]
struct GateState {
    closed: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    pub fn close(&self) {
        *self.0.closed.lock().unwrap() = true;
    }

    pub fn open(&self) {
        *self.0.closed.lock().unwrap() = false;
        self.0.changed.notify_all();
    }

    fn pass(&self) {
        let mut closed = self.0.closed.lock().unwrap();
        let t0 = Instant::now();
        while *closed && t0.elapsed() < Duration::from_secs(20) {
            closed = self
                .0
                .changed
                .wait_timeout(closed, Duration::from_millis(50))
                .unwrap()
                .0;
        }
    }
}

/// See the module docs.
#[derive(Clone)]
pub struct StoreFake {
    pub id: ModelId,
    /// Requests spoken at once; 1: one at a time (no batch).
    pub slots: usize,
    /// Whether its batch analyses voices between rounds (else it says it cannot).
    pub batch_analyses: bool,
    /// Sleep before each round or chunk.
    pub step_delay: Duration,
    /// Sleep of an analysis.
    pub analysis_delay: Duration,
    pub gate: Gate,
    /// `analysing:<model>`, `analysed:<model>`, `admitted:<text>`, `done:<text>`, in order.
    pub log: Arc<Mutex<Vec<String>>>,
    /// The voice file of the last request (`None`: built-in).
    pub last_voice: Arc<Mutex<Option<PathBuf>>>,
}

impl StoreFake {
    /// A model speaking one request at a time.
    pub fn new(id: ModelId) -> Self {
        Self {
            id,
            slots: 1,
            batch_analyses: true,
            step_delay: Duration::ZERO,
            analysis_delay: Duration::ZERO,
            gate: Gate::default(),
            log: Arc::default(),
            last_voice: Arc::default(),
        }
    }

    /// A model speaking up to `slots` requests at once.
    pub fn batching(id: ModelId, slots: usize) -> Self {
        Self {
            slots,
            ..Self::new(id)
        }
    }

    pub fn device(&self) -> DeviceModels {
        DeviceModels::loaded(self.id.name(), vec![Box::new(self.clone())])
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Where `entry` is in the log; a failing test (with the log) when it is not there.
    pub fn at(&self, entry: &str) -> usize {
        let log = self.log();
        log.iter()
            .position(|e| e == entry)
            .unwrap_or_else(|| panic!("no {entry} in {log:?}"))
    }

    /// Analyses done.
    pub fn analyses(&self) -> usize {
        let want = format!("analysed:{}", self.id.name());
        self.log().iter().filter(|e| **e == want).count()
    }

    fn push(&self, entry: String) {
        self.log.lock().unwrap().push(entry);
    }

    fn analyse(&self, audio: &Audio, path: &Path) -> Result<(), ModelError> {
        self.push(format!("analysing:{}", self.id.name()));
        std::thread::sleep(self.analysis_delay);
        self.gate.pass();
        if audio.samples.is_empty() {
            return Err("empty clip".into());
        }
        std::fs::write(path, voice_text(self.id, audio))?;
        self.push(format!("analysed:{}", self.id.name()));
        Ok(())
    }

    /// Checks a voice file is this model's.
    fn check_voice(&self, path: Option<&Path>) -> Result<(), ModelError> {
        if let Some(p) = path {
            let text = std::fs::read_to_string(p)?;
            let want = format!("fake-voice {} ", self.id.name());
            if !text.starts_with(&want) {
                return Err(
                    format!("{}: not a voice of {}: {text:?}", p.display(), self.id).into(),
                );
            }
        }
        *self.last_voice.lock().unwrap() = path.map(Path::to_path_buf);
        Ok(())
    }
}

fn steps(text: &str) -> usize {
    if text == "long" {
        LONG_STEPS
    } else {
        1
    }
}

fn chunk(i: usize) -> Vec<f32> {
    (0..CHUNK)
        .map(|j| ((i * CHUNK + j) as f32 * 0.05).sin() * 0.3)
        .collect()
}

impl SpeechModel for StoreFake {
    fn id(&self) -> ModelId {
        self.id
    }

    fn default_options(&self) -> GenerateOptions {
        GenerateOptions::english()
    }

    fn use_voice(&mut self, path: Option<&Path>) -> Result<(), ModelError> {
        self.check_voice(path)
    }

    fn save_voice(&mut self, audio: &Audio, path: &Path) -> Result<(), ModelError> {
        self.analyse(audio, path)
    }

    fn stream<'a>(
        &'a self,
        text: &str,
        _opts: &GenerateOptions,
    ) -> Result<ChunkIter<'a>, ModelError> {
        let n = steps(text);
        let text = text.to_string();
        self.push(format!("admitted:{text}"));
        Ok(Box::new((0..n).map(move |i| {
            std::thread::sleep(self.step_delay);
            if i + 1 == n {
                self.push(format!("done:{text}"));
            }
            Ok(chunk(i).into())
        })))
    }

    fn slots(&self) -> usize {
        self.slots.max(1)
    }

    fn batch(&self) -> Option<Result<Box<dyn RequestBatch + '_>, ModelError>> {
        Rounds::of(self)
    }
}

/// A [`StoreFake`]'s batch: one chunk per request and round.
impl RoundModel for StoreFake {
    /// Text, chunks made, chunks to make.
    type Request = (String, usize, usize);

    fn slots(&self) -> usize {
        self.slots
    }

    fn round_delay(&self) -> Duration {
        self.step_delay
    }

    fn admit(&self, voice: Option<&Path>, text: &str) -> Result<Self::Request, ModelError> {
        self.check_voice(voice)?;
        self.push(format!("admitted:{text}"));
        Ok((text.to_string(), 0, steps(text)))
    }

    fn round(&self, (text, made, n): &mut Self::Request) -> BatchItem {
        let last = *made + 1 == *n;
        let samples = chunk(*made);
        *made += 1;
        if last {
            self.push(format!("done:{text}"));
        }
        BatchItem::Audio {
            samples,
            last,
            truncated: false,
        }
    }

    fn save_voice_between_rounds(
        &self,
        audio: &Audio,
        path: &Path,
    ) -> Option<Result<(), ModelError>> {
        self.batch_analyses.then(|| self.analyse(audio, path))
    }
}
