//! Token-level streaming of a whole text (issue 21; no counterpart in the chatterbox reference,
//! whose `generate` returns the whole waveform): T3's speech tokens go into a
//! [`StreamingSynth`] as they are drawn, so the first audio is ready after the first chunk of
//! tokens (`hops[0] + 3`), not after the whole sentence.
//!
//! Per variant, as `generate` post-processes T3's tokens (tts.py, mtl_tts.py, tts_turbo.py at
//! upstream 5de7a54):
//! * every variant: ids outside S3Gen's vocabulary (`>= 6561`, the start/stop tokens among them)
//!   are not synthesised; T3 stops after its stop token. `drop_invalid_tokens` would also drop
//!   the tokens *before* a start-of-speech token drawn mid-sentence; a stream cannot take back
//!   audio already handed out, so it drops only the start token itself.
//! * Multilingual: the last token's audio (~40 ms before the stop token) is cut from the
//!   sentence's last chunk, to the length `generate` gives.
//! * Turbo and Nano: three silence tokens (`S3GEN_SIL`) follow the sentence's last token.
//! * Long text: the sentence chunks of `generate` (`max_chunk_chars`), each streamed in turn and
//!   joined with the same linear crossfade, itself streamed.
//!
//! A sentence whose tokens stop at [`GenerateOptions::max_new_tokens`] instead of T3's stop
//! token is spoken as far as its tokens go and reported in [`AudioChunk::truncated`] (and
//! [`SpeechStream::truncations`]): its speech is cut, usually mid-word.
//!
//! With one seed a stream draws the same speech tokens (T3's sampling is seeded per sentence
//! as in `generate`) and the same CFM noise as `generate`; the audio differs where the flow
//! made a chunk's frames before the look-ahead tokens that `generate` had, and at HiFT's joins
//! (see [`StreamingSynth`]).
use super::core::{TtsCore, SPEECH_VOCAB_SIZE};
use super::schedule::HopPacer;
use crate::captions::{SentenceTiming, Timeline};
use crate::checkpoint::Variant;
use crate::crossfade::Crossfader;
use crate::draws::SeededDraws;
use crate::options::GenerateOptions;
use crate::progress::Progress;
use crate::s3gen::{S3GenOptions, S3GEN_SIL, S3GEN_SR, SAMPLES_PER_TOKEN};
use crate::stream_synth::{FlowJob, StreamChunk, StreamingSynth, VocodeJob};
use crate::watermark::StreamWatermarker;
use crate::{PipelineError, Result};
use candle_core::Tensor;
use chatterbox_t3::{BatchDecoder, BatchEvent, RequestId, Sampling, TokenStream};
use chatterbox_text::Language;
use std::collections::VecDeque;

/// Audio a [`SpeechStream`] hands out: 24 kHz samples that are final.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AudioChunk {
    /// 0 for the first chunk of the stream.
    pub index: usize,
    /// The text chunk (sentence group) the samples end in, from 0.
    pub sentence: usize,
    /// Position of `samples[0]` in the whole output, in samples.
    pub sample_offset: usize,
    /// 24 kHz mono samples (never empty, except possibly in the last chunk).
    pub samples: Vec<f32>,
    /// Whether this is the last chunk: the stream ends after it.
    pub is_last: bool,
    /// The text chunks cut at the token cap whose speech ended since the previous chunk
    /// (usually empty): each such text chunk is reported once, in the chunk that holds the
    /// end of its audio (or, when the crossfade held all of that back, in the next chunk; the
    /// last chunk reports any still due).
    pub truncated: Vec<Truncation>,
    /// The timings of the text chunks whose speech ended since the previous chunk (usually
    /// empty), as [`crate::SpeechReport::captions`] gives them for the whole output. Times
    /// count from the stream's first sample; a sentence's timing comes with the chunk made
    /// when its audio ended, so its end can lie up to half a crossfade past this chunk's
    /// samples (or, when the crossfade held all of them back, it comes in the next chunk).
    /// At a [`GenerateOptions::speed`] other than 1 the times are those of the stretched
    /// output, and the stretcher holds back about 60 ms of input, so the end can lie that
    /// much further (divided by the speed) past the chunk's samples.
    pub captions: Vec<SentenceTiming>,
}

/// A text chunk whose speech T3 cut at [`GenerateOptions::max_new_tokens`]: it drew that many
/// tokens without drawing its stop token, so the speech ends where the cap fell (usually
/// mid-word), not where the text ends. Raise the cap or split the text into shorter chunks
/// ([`GenerateOptions::max_chunk_chars`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Truncation {
    /// The text chunk (as [`AudioChunk::sentence`]), from 0.
    pub sentence: usize,
    /// Its text, as the sentence splitting gave it.
    pub text: String,
    /// The speech tokens drawn for it: the cap (Turbo draws one more than `max_new_tokens`,
    /// as the reference's `inference_turbo` does).
    pub tokens: usize,
}

impl Truncation {
    pub(crate) fn new(sentence: usize, text: &str, tokens: usize) -> Self {
        Self {
            sentence,
            text: text.to_string(),
            tokens,
        }
    }
}

/// The progress callback of a stream.
type ProgressFn<'a> = Box<dyn FnMut(&Progress) + Send + 'a>;

/// Where a sentence's speech tokens come from.
enum Tokens<'a> {
    /// The stream's own T3 generation, stepped by `next()`.
    Own(Box<TokenStream<'a>>),
    /// A request of a [`BatchDecoder`]: its driver ([`super::SpeechBatch`]) pushes the tokens.
    Batched {
        id: RequestId,
        queue: VecDeque<u32>,
        ended: bool,
        /// Whether the request ended on T3's stop token (known once `ended`).
        stopped_on_eos: bool,
    },
}

impl Tokens<'_> {
    /// Whether the sentence's tokens ended on T3's stop token (once they have ended).
    fn stopped_on_eos(&self) -> bool {
        match self {
            Tokens::Own(ts) => ts.stopped_on_eos(),
            Tokens::Batched { stopped_on_eos, .. } => *stopped_on_eos,
        }
    }
}

/// What one step of a stream did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// It made progress (a token consumed, a sentence ended, the stream finished).
    Ran,
    /// It waits for tokens of its batched request.
    Blocked,
    /// It needs its next sentence admitted into the batch.
    NeedsSentence,
    /// A chunk is due: it waits for its flow output ([`SpeechStream::flow_job`],
    /// [`SpeechStream::supply_flow`]).
    Flow,
    /// A chunk's mel is made: it waits for its HiFT output ([`SpeechStream::vocode_job`],
    /// [`SpeechStream::supply_vocoded`]).
    Vocode,
}

/// One text chunk being spoken.
struct Sentence<'a> {
    index: usize,
    text: String,
    tokens: Tokens<'a>,
    synth: StreamingSynth<'a, SeededDraws>,
    /// Tokens T3 has drawn.
    drawn: usize,
    /// Tokens handed to the synthesiser.
    pushed: usize,
    /// Tokens outside S3Gen's vocabulary (not synthesised).
    skipped: usize,
    /// Samples of its audio given to the crossfader so far.
    faded: usize,
    /// T3 stopped at `max_new_tokens` without its stop token.
    cut: bool,
    /// Batched: T3 has stopped and the synthesiser's last chunks are being made; holds their
    /// audio until the final chunk (`end_sentence` takes it all at once).
    ending: Option<Vec<f32>>,
    /// Batched: the flow output of the chunk due, handed in by the driver.
    flow_out: Option<Tensor>,
    /// Batched: the output of the synthesiser's pending HiFT call, handed in by the driver.
    vocode_out: Option<(Tensor, Tensor)>,
    /// With [`GenerateOptions::word_alignment`] (own tokens of the English or multilingual
    /// model): the text position T3's alignment attended for each token synthesised.
    positions: Option<Vec<usize>>,
}

impl Sentence<'_> {
    /// Hands speech tokens to the synthesiser. `batched`: the chunks they complete wait for
    /// the driver's flow and HiFT calls (no audio yet); own tokens: the chunks run at once,
    /// and their audio is returned.
    fn push(&mut self, tokens: &[u32], batched: bool) -> Result<Vec<f32>> {
        self.pushed += tokens.len();
        if batched {
            self.synth.push(tokens)?;
            Ok(Vec::new())
        } else {
            self.synth.push_tokens(tokens)
        }
    }
}

/// A text being spoken, as an iterator of [`AudioChunk`]s (created by the models' `stream`).
///
/// Each `next()` runs T3 decode steps until the next chunk of audio is final (then the flow
/// and HiFT on it), so the work happens as the caller pulls. Dropping the stream stops the
/// generation at once (no step runs after the last `next()`) and frees its buffers. After an
/// error the stream ends.
pub struct SpeechStream<'a> {
    core: &'a TtsCore,
    reference: crate::s3gen::S3GenRef,
    cond_emb: Tensor,
    /// Whether sentences are generated by a batch decoder (see [`Tokens::Batched`]).
    batched: bool,
    opts: GenerateOptions,
    language: Option<Language>,
    texts: Vec<String>,
    /// Samples of silence before each text chunk, and after the last (markup pauses).
    silence: Vec<usize>,
    next_text: usize,
    seed: u64,
    sentence: Option<Sentence<'a>>,
    fader: Crossfader,
    /// Where each segment given to `fader` lies in the output.
    timeline: Timeline,
    ready: VecDeque<AudioChunk>,
    /// Plays the audio [`GenerateOptions::speed`] times faster (none at speed 1), before the
    /// watermark.
    stretch: Option<chatterbox_dsp::TimeStretcher>,
    /// Watermarks each chunk with the audio before it as context.
    marker: StreamWatermarker,
    chunks: usize,
    emitted: usize,
    done: bool,
    progress: Option<ProgressFn<'a>>,
    /// Every text chunk cut at the token cap so far.
    cuts: Vec<Truncation>,
    /// Those of `cuts` not yet reported in a chunk.
    cuts_due: Vec<Truncation>,
    /// Every sentence timing so far.
    captions: Vec<SentenceTiming>,
    /// Those of `captions` not yet handed out in a chunk.
    captions_due: Vec<SentenceTiming>,
    /// Batched, live, in a batch that fits each hop: chooses each sentence's next hop when a
    /// chunk is made ([`super::schedule::fitted_hop`]).
    pacer: Option<HopPacer>,
    /// Hops [`Self::pacer`] chose shorter than planned, not yet counted by the batch.
    fitted: u64,
}

impl<'a> SpeechStream<'a> {
    pub(crate) fn new(core: &'a TtsCore, text: &str, opts: &GenerateOptions) -> Result<Self> {
        let conds = core.conds.as_ref().ok_or(PipelineError::NoConditionals)?;
        Self::with_conditionals(core, conds, text, opts, false)
    }

    /// A stream in the voice of `conds`; with `batched`, its sentences' tokens come from a
    /// batch decoder ([`super::SpeechBatch`]).
    pub(crate) fn with_conditionals(
        core: &'a TtsCore,
        conds: &crate::Conditionals,
        text: &str,
        opts: &GenerateOptions,
        batched: bool,
    ) -> Result<Self> {
        opts.validate()?;
        opts.stream
            .validate(core.s3gen.flow().config().token_mel_ratio)?;
        let language = core.language(opts)?;
        let plan = crate::plan::plan(text, opts.lexicon.as_deref(), |t| core.text_chunks(t, opts))?;
        let cond_emb = if core.is_turbo() {
            core.t3.prepare_conditioning(&conds.t3)?
        } else {
            let cond = conds.with_exaggeration(opts.exaggeration);
            core.t3.prepare_conditioning(&cond.t3)?
        };
        let fade = (opts.crossfade_ms as usize * S3GEN_SR as usize) / 1000;
        Ok(Self {
            core,
            reference: conds.gen.clone(),
            cond_emb,
            batched,
            opts: opts.clone(),
            language,
            texts: plan.texts,
            silence: plan.silence,
            next_text: 0,
            seed: opts.seed.unwrap_or_else(rand::random),
            sentence: None,
            fader: Crossfader::new(fade),
            timeline: Timeline::new(fade),
            ready: VecDeque::new(),
            stretch: opts.stretcher()?,
            marker: core.watermark.stream(S3GEN_SR),
            chunks: 0,
            emitted: 0,
            done: false,
            progress: None,
            cuts: Vec::new(),
            cuts_due: Vec::new(),
            captions: Vec::new(),
            captions_due: Vec::new(),
            pacer: None,
            fitted: 0,
        })
    }

    /// Reports [`Progress`] events (text chunks started and finished, tokens drawn) to
    /// `progress` as the stream runs.
    pub fn with_progress(mut self, progress: impl FnMut(&Progress) + Send + 'a) -> Self {
        self.progress = Some(Box::new(progress));
        self
    }

    /// The seed in use (drawn at creation when the options had none).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Text chunks the text was split into.
    pub fn sentences(&self) -> usize {
        self.texts.len()
    }

    /// Samples handed out so far.
    pub fn samples_emitted(&self) -> usize {
        self.emitted
    }

    /// The text chunks cut at [`GenerateOptions::max_new_tokens`] so far (each also reported
    /// once in [`AudioChunk::truncated`]).
    pub fn truncations(&self) -> &[Truncation] {
        &self.cuts
    }

    /// The timings of the text chunks whose speech has ended so far (each also handed out
    /// once in [`AudioChunk::captions`]).
    pub fn captions(&self) -> &[SentenceTiming] {
        &self.captions
    }

    fn report(&mut self, p: &Progress) {
        if let Some(f) = self.progress.as_mut() {
            f(p);
        }
    }

    /// Queues `samples` as a chunk (empty ones only when last), through the stretcher at a
    /// speed other than 1.
    fn emit(&mut self, samples: Vec<f32>, is_last: bool) -> Result<()> {
        let samples = match self.stretch.as_mut() {
            None => samples,
            Some(s) if is_last => {
                let mut out = s.process(&samples)?;
                out.extend(s.finish()?);
                out
            }
            Some(s) => s.process(&samples)?,
        };
        if samples.is_empty() && !is_last {
            return Ok(());
        }
        let samples = self.marker.push(samples)?;
        let sentence = self.next_text.saturating_sub(1);
        self.ready.push_back(AudioChunk {
            index: self.chunks,
            sentence,
            sample_offset: self.emitted,
            is_last,
            samples,
            truncated: std::mem::take(&mut self.cuts_due),
            captions: std::mem::take(&mut self.captions_due),
        });
        self.chunks += 1;
        self.emitted += self.ready.back().map_or(0, |c| c.samples.len());
        Ok(())
    }

    /// Starts the next text chunk: its text tokens, T3's prefill, a fresh synthesiser. With a
    /// batch decoder the request is queued in it instead (prefilled with the others queued,
    /// at the driver's next `admit_queued`).
    pub(crate) fn start_sentence(&mut self, batch: Option<&mut BatchDecoder<'a>>) -> Result<()> {
        let core = self.core;
        let index = self.next_text;
        let text = self.texts[index].clone();
        self.next_text += 1;
        let total = self.texts.len();
        self.report(&Progress::ChunkStarted {
            index,
            total,
            chars: text.chars().count(),
        });
        let ids = core.text.text_tokens(&text, self.language)?;
        let sampling = if self.opts.greedy {
            Sampling::Greedy
        } else {
            Sampling::Seeded(self.seed.wrapping_add(index as u64))
        };
        let tokens = match batch {
            None => Tokens::Own(Box::new(core.token_stream(
                &self.cond_emb,
                &ids,
                &self.opts,
                sampling,
            )?)),
            Some(b) => {
                let id = core.queue(b, &self.cond_emb, &ids, &self.opts, sampling)?;
                Tokens::Batched {
                    id,
                    queue: VecDeque::new(),
                    ended: false,
                    stopped_on_eos: false,
                }
            }
        };
        let s3opts = S3GenOptions {
            n_cfm_timesteps: self.opts.n_cfm_timesteps.or(core.is_turbo().then_some(2)),
        };
        let synth = StreamingSynth::new(
            &core.s3gen,
            &self.reference,
            self.opts.stream.clone(),
            s3opts,
            SeededDraws::new(self.seed.wrapping_add(index as u64)),
        )?;
        self.sentence = Some(Sentence {
            index,
            text,
            tokens,
            synth,
            drawn: 0,
            pushed: 0,
            skipped: 0,
            faded: 0,
            cut: false,
            ending: None,
            flow_out: None,
            vocode_out: None,
            positions: None,
        });
        Ok(())
    }

    /// The batch request of the sentence being spoken (`None` between sentences or when the
    /// stream generates its own tokens).
    pub(crate) fn batch_request(&self) -> Option<RequestId> {
        match self.sentence.as_ref().map(|s| &s.tokens) {
            Some(Tokens::Batched { id, .. }) => Some(*id),
            _ => None,
        }
    }

    /// Hands a batch event of this stream's request to it (tokens queue up; an end or a
    /// failure ends the sentence's tokens).
    pub(crate) fn deliver(&mut self, event: BatchEvent) -> Result<()> {
        let Some(Sentence {
            tokens:
                Tokens::Batched {
                    queue,
                    ended,
                    stopped_on_eos,
                    ..
                },
            ..
        }) = self.sentence.as_mut()
        else {
            return Ok(());
        };
        match event {
            BatchEvent::Token { token, .. } => queue.push_back(token),
            BatchEvent::Finished {
                stopped_on_eos: eos,
                ..
            } => {
                *ended = true;
                *stopped_on_eos = eos;
            }
            BatchEvent::Failed { error, .. } => {
                *ended = true;
                return Err(error.into());
            }
        }
        Ok(())
    }

    /// Runs steps until the stream waits (for tokens or a batch slot) or has ended: the
    /// batched driver's `next()`. Chunks made are queued for [`SpeechStream::take_ready`].
    pub(crate) fn pump(&mut self) -> Result<Step> {
        loop {
            if self.done {
                return Ok(Step::Ran);
            }
            match self.step() {
                Ok(Step::Ran) => continue,
                Ok(other) => return Ok(other),
                Err(e) => {
                    self.done = true;
                    self.sentence = None;
                    return Err(e);
                }
            }
        }
    }

    /// The chunks made so far and not yet taken.
    pub(crate) fn take_ready(&mut self) -> impl Iterator<Item = AudioChunk> + '_ {
        self.ready.drain(..)
    }

    /// Whether the last chunk has been made (it may still wait in [`Self::take_ready`]).
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Sets the chunk schedule of the sentences it starts from now on (one already started
    /// keeps its own); `schedule` must be valid for the model (a paced one always is: its
    /// hops are at least the first of a valid schedule).
    pub(crate) fn set_schedule(&mut self, schedule: crate::StreamSchedule) {
        self.opts.stream = schedule;
    }

    /// Sets (or, `None`, clears) what chooses the current sentence's next hop each time it
    /// makes a chunk.
    pub(crate) fn set_pacer(&mut self, pacer: Option<HopPacer>) {
        self.pacer = pacer;
    }

    /// Hops the pacer chose shorter than planned since the last call.
    pub(crate) fn take_fitted_hops(&mut self) -> u64 {
        std::mem::take(&mut self.fitted)
    }

    /// With a pacer, right after a chunk went out: the hop of the current sentence's next
    /// chunk, shortened where its listener would run out before the planned one is made.
    fn fit_next_hop(&mut self) -> Result<()> {
        let emitted = self.samples_emitted();
        let (Some(pacer), Some(s)) = (self.pacer, self.sentence.as_mut()) else {
            return Ok(());
        };
        let synth = &mut s.synth;
        let planned = synth.next_hop();
        let hop = pacer.next_hop(
            std::time::Instant::now(),
            planned,
            synth.pending_tokens(),
            synth.lookahead(),
            emitted,
            S3GEN_SR,
        );
        if hop < planned {
            synth.set_next_hop(hop)?;
            self.fitted += 1;
        }
        Ok(())
    }

    /// The chunk schedule of the sentences it starts.
    pub(crate) fn schedule(&self) -> &crate::StreamSchedule {
        &self.opts.stream
    }

    /// The audio one speech token makes for the listener: 40 ms at speed 1.
    pub(crate) fn token_audio(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(
            SAMPLES_PER_TOKEN as f64 / f64::from(S3GEN_SR) / f64::from(self.opts.speed),
        )
    }

    /// The flow call this stream waits for (after [`Self::pump`] returned [`Step::Flow`]).
    pub(crate) fn flow_job(&mut self) -> Result<Option<FlowJob>> {
        match self.sentence.as_mut() {
            Some(s) if s.flow_out.is_none() => s.synth.next_flow(),
            _ => Ok(None),
        }
    }

    /// Hands in the output of [`Self::flow_job`]'s call; the next [`Self::pump`] uses it.
    pub(crate) fn supply_flow(&mut self, feat: Tensor) {
        if let Some(s) = self.sentence.as_mut() {
            s.flow_out = Some(feat);
        }
    }

    /// The HiFT call this stream waits for (after [`Self::pump`] returned [`Step::Vocode`]).
    pub(crate) fn vocode_job(&self) -> Option<&VocodeJob> {
        let s = self.sentence.as_ref()?;
        if s.vocode_out.is_some() {
            return None;
        }
        s.synth.pending_vocode()
    }

    /// Hands in the output (`wav`, `source`) of [`Self::vocode_job`]'s call.
    pub(crate) fn supply_vocoded(&mut self, out: (Tensor, Tensor)) {
        if let Some(s) = self.sentence.as_mut() {
            s.vocode_out = Some(out);
        }
    }

    /// One T3 step of the current sentence, and the audio it completes.
    fn step(&mut self) -> Result<Step> {
        let Some(s) = self.sentence.as_mut() else {
            let pause = self.silence.get(self.next_text).copied().unwrap_or(0);
            if pause > 0 {
                // exact silence between the fades around it (as `generate` puts it)
                if let Some(p) = self.silence.get_mut(self.next_text) {
                    *p = 0;
                }
                let text_follows = self.next_text < self.texts.len();
                let len = self.timeline.silence_len(pause, text_follows);
                self.timeline.push(len);
                let out = self.fader.push(vec![0.0; len]);
                self.emit(out, false)?;
                return Ok(Step::Ran);
            }
            if self.next_text < self.texts.len() {
                if self.batched {
                    return Ok(Step::NeedsSentence);
                }
                self.start_sentence(None)?;
                return Ok(Step::Ran);
            }
            let rest = self.fader.finish();
            self.emit(rest, true)?;
            self.done = true;
            return Ok(Step::Ran);
        };
        if self.batched {
            // the chunk due comes before the next token (as `push_tokens` runs it at once):
            // its flow call, then its HiFT call, both run by the driver
            if let Some(feat) = s.flow_out.take() {
                s.synth.vocode_job(&feat)?;
                return Ok(Step::Vocode);
            }
            if s.synth.pending_vocode().is_some() {
                let Some((wav, source)) = s.vocode_out.take() else {
                    return Ok(Step::Vocode);
                };
                let chunk = s.synth.vocoded(&wav, &source)?;
                match s.ending.as_mut() {
                    None => {
                        s.faded += chunk.audio.len();
                        let out = self.fader.push_part(&chunk.audio);
                        self.emit(out, false)?;
                        self.fit_next_hop()?;
                    }
                    Some(audio) if !chunk.is_last => audio.extend(chunk.audio),
                    Some(_) => {
                        let audio = s.ending.take().unwrap_or_default();
                        self.end_sentence(audio, chunk)?;
                    }
                }
                return Ok(Step::Ran);
            }
            if s.synth.is_due() {
                return Ok(Step::Flow);
            }
        }
        let next = match &mut s.tokens {
            Tokens::Own(ts) => {
                let t = ts.next().transpose()?;
                if let (Some(_), Some(&p)) = (t, ts.text_positions().and_then(<[usize]>::last)) {
                    // kept for the tokens synthesised (below)
                    s.positions.get_or_insert_with(Vec::new).push(p);
                }
                t
            }
            Tokens::Batched { queue, ended, .. } => match queue.pop_front() {
                Some(t) => Some(t),
                None if *ended => None,
                None => return Ok(Step::Blocked),
            },
        };
        match next {
            Some(t) => {
                s.drawn += 1;
                let (chunk, generated) = (s.index, s.drawn);
                let audio = if t < SPEECH_VOCAB_SIZE {
                    s.push(&[t], self.batched)?
                } else {
                    if t != self.core.t3.config().stop_speech_token {
                        s.skipped += 1;
                    }
                    // not synthesised: its text position goes too
                    if let Some(p) = s.positions.as_mut() {
                        p.pop();
                    }
                    Vec::new()
                };
                s.faded += audio.len();
                let max = self.opts.max_new_tokens;
                self.report(&Progress::Tokens {
                    chunk,
                    generated: generated.min(max),
                    max,
                });
                let out = self.fader.push_part(&audio);
                self.emit(out, false)?;
            }
            None => {
                // cut at the cap: all its tokens drawn and none of them the stop token (Turbo
                // may also stop early when every logit is -inf: not a cut)
                s.cut = !s.tokens.stopped_on_eos() && s.drawn >= self.core.token_limit(&self.opts);
                let variant = self.core.variant;
                if s.skipped > 0 && variant == Variant::Multilingual {
                    tracing::warn!("dropping speech tokens outside S3Gen's vocabulary");
                }
                // the audio of the chunks made since T3 stopped (batched: none yet)
                let audio = if matches!(variant, Variant::Turbo | Variant::Nano) {
                    s.push(&[S3GEN_SIL; 3], self.batched)?
                } else {
                    Vec::new()
                };
                no_speech_check(s)?;
                if self.batched {
                    // the final chunk is made by the driver's calls; `ending` collects its audio
                    s.synth.end()?;
                    s.ending = Some(audio);
                } else {
                    let last = s.synth.finish_chunk()?;
                    self.end_sentence(audio, last)?;
                }
            }
        }
        Ok(Step::Ran)
    }

    /// The sentence's last chunk is made (`audio`: the chunks' audio since T3 stopped, before
    /// `last`): the variant's ending, the crossfade's segment end.
    fn end_sentence(&mut self, mut audio: Vec<f32>, last: StreamChunk) -> Result<()> {
        let Some(s) = self.sentence.take() else {
            return Ok(());
        };
        let before = last.sample_offset;
        let mut last = last.audio;
        if self.core.variant == Variant::Multilingual {
            // Drop the final speech token's audio, as `generate` does.
            let keep = s.pushed.saturating_sub(1).max(1) * SAMPLES_PER_TOKEN;
            last.truncate(keep.saturating_sub(before));
        }
        audio.extend(last);
        let samples = s.synth.emitted();
        let mut out = self.fader.push_part(&audio);
        out.extend(self.fader.end_segment());
        let more_follows = self.next_text < self.texts.len()
            || self.silence.get(self.next_text).is_some_and(|&p| p > 0);
        let mut timing =
            self.timeline
                .sentence(s.index, &s.text, s.faded + audio.len(), more_follows);
        if let Some(mut positions) = s.positions {
            if self.core.variant == Variant::Multilingual {
                // the last token's audio was cut
                positions.truncate(s.pushed.saturating_sub(1).max(1));
            }
            self.core
                .chunk_alignment(&s.text, self.language, positions)?
                .time_words(&mut timing);
        }
        if let Some(speed) = self.opts.stretch_speed() {
            timing = timing.at_speed(speed);
        }
        self.captions.push(timing.clone());
        self.captions_due.push(timing);
        if s.cut {
            tracing::info!(
                chunk = s.index,
                tokens = s.drawn,
                "the text chunk's speech was cut at max_new_tokens (no stop token drawn)"
            );
            let cut = Truncation::new(s.index, &s.text, s.drawn);
            self.cuts.push(cut.clone());
            // reported with the chunk that ends the sentence's audio
            self.cuts_due.push(cut);
        }
        self.emit(out, false)?;
        tracing::debug!(
            chunk = s.index,
            speech_tokens = s.pushed,
            samples,
            truncated = s.cut,
            "streamed a text chunk"
        );
        let total = self.texts.len();
        self.report(&Progress::ChunkFinished {
            index: s.index,
            total,
            samples,
        });
        Ok(())
    }
}

/// A sentence that ends without a token to synthesise is an error naming it.
fn no_speech_check(s: &Sentence<'_>) -> Result<()> {
    if s.pushed == 0 {
        return Err(PipelineError::NoSpeechTokens {
            chunk: s.index,
            text: s.text.clone(),
        });
    }
    Ok(())
}

impl Iterator for SpeechStream<'_> {
    type Item = Result<AudioChunk>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(c) = self.ready.pop_front() {
                return Some(Ok(c));
            }
            if self.done {
                return None;
            }
            match self.step() {
                Ok(Step::Ran) => {}
                Ok(_) => {
                    // a batched stream is driven by its SpeechBatch, never pulled on its own
                    self.done = true;
                    return Some(Err(PipelineError::InvalidInput {
                        what: "stream",
                        reason: "a batched stream is read through its SpeechBatch".into(),
                    }));
                }
                Err(e) => {
                    self.done = true;
                    self.sentence = None;
                    return Some(Err(e));
                }
            }
        }
    }
}
