//! Many texts spoken at once (issue 27; no counterpart in the chatterbox reference, which
//! speaks one text per call): each is a [`SpeechStream`] whose sentences' speech tokens come
//! from one [`BatchDecoder`] shared by all, so T3 reads its weights once per step for every
//! stream instead of once per stream. The chunks that fall due in a round go through the flow
//! together (`inference_rows`: padded to the longest and masked, up to
//! [`SpeechBatch::chunks_per_call`] per call; earliest deadline first, see [`super::schedule`]:
//! a stream's deadline is when its listener runs out of audio), each call's
//! chunks then through HiFT together, chunks of one length per call (HiFT's convolutions see
//! past a row's end, so it takes no padding), and out ([`SpeechBatch::step_with`]) before the
//! next flow call.
//!
//! The streams' host work (their chunk jobs and draws, joining and watermarking their audio)
//! runs on rayon's threads when the model's device orders the work of all threads
//! ([`chatterbox_cuda::ordered`]: the CPU, Metal, a CUDA device from [`chatterbox_cuda::open`],
//! which every chatterbox binary uses), and on the calling thread otherwise. A CUDA device
//! from candle's `Device::new_cuda` gives each thread its own stream: work issued from rayon's
//! threads would race the flow and HiFT calls (batched streams failed with NaN mels that way,
//! and may give wrong audio with no error). No device wait orders anything here.
//!
//! A stream's tokens and CFM noise are those of the same stream on its own (same seed: the
//! decoder gives each request its own stream's draws), whatever the other streams are; its
//! audio equals the solo stream's up to the float rounding of the padded flow call (exactly,
//! with `chunks_per_call` 1). Where the flow replays kept CUDA graphs
//! (`CausalMaskedDiffWithXvec::replays_graphs`) and calls may be shared, a call of one chunk
//! is padded too, so that its shape repeats.

use super::core::TtsCore;
use super::schedule::{self, Due, HopPacer, Pace, Playout};
use super::stream::{AudioChunk, SpeechStream, Step};
use crate::conditionals::Conditionals;
use crate::options::GenerateOptions;
use crate::s3gen::S3GEN_SR;
use crate::stream_synth::{vocode_batch, FlowJob, StreamSchedule, VocodeJob};
use crate::{PipelineError, Result};
use chatterbox_t3::{BatchDecoder, BatchEvent, BatchOptions};
use rayon::prelude::*;
use std::time::{Duration, Instant};

/// A stream's handle in a [`SpeechBatch`].
pub type StreamId = u64;

/// What a [`SpeechBatch::step`] produced for one stream.
#[derive(Debug)]
#[non_exhaustive]
pub enum BatchOutput {
    /// Audio; the stream has left the batch after its chunk with `is_last`.
    Chunk(AudioChunk),
    /// The stream failed and has left the batch.
    Failed(PipelineError),
}

/// Where a [`SpeechBatch`]'s time went, summed over its rounds (wall time on the calling
/// thread). On a GPU a part ends when its work is enqueued, not done: device work shows in the
/// first part that reads a result back (the T3 step's tokens, a stream's audio).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct BatchTimings {
    /// Rounds run ([`SpeechBatch::step`] calls that decoded).
    pub rounds: u64,
    /// Decode steps' rows summed over rounds (requests decoding per round, summed).
    pub decoded: u64,
    /// Admissions: text front end, T3 prefill and first draw of each sentence.
    pub admit: Duration,
    /// The batched T3 decode steps.
    pub decode: Duration,
    /// Audio: the flow calls, each stream's HiFT and watermark on the chunks that fell due.
    pub audio: Duration,
    /// The flow calls' part of `audio` (to the end of their host work).
    pub flow: Duration,
    /// The HiFT calls' part of `audio`, likewise.
    pub vocoder: Duration,
    /// Flow calls run (each on up to [`SpeechBatch::chunks_per_call`] chunks).
    pub flow_calls: u64,
    /// Chunks those calls made.
    pub flow_chunks: u64,
    /// HiFT calls run (each on up to [`SpeechBatch::chunks_per_call`] chunks of one shape).
    pub vocoder_calls: u64,
    /// Chunks those calls made.
    pub vocoder_chunks: u64,
    /// Sentences started on a paced schedule ([`SpeechBatch::set_paced_schedule`]).
    pub paced_sentences: u64,
    /// Hops chosen shorter than planned when the chunk before them was made
    /// ([`SpeechBatch::set_hop_fitting`]).
    pub fitted_hops: u64,
}

struct Entry<'a> {
    id: StreamId,
    stream: SpeechStream<'a>,
    playout: Playout,
    /// The chunk schedule it was added with (a paced one replaces it per sentence).
    schedule: StreamSchedule,
}

/// What running a stream's host work gave: its step, its flow job when it waits for one, and
/// the chunks it made.
type Pumped = (
    Result<Step>,
    Option<Result<Option<FlowJob>>>,
    Vec<AudioChunk>,
);

/// Streams spoken together: see the module docs. Created by the models' `batch`.
pub struct SpeechBatch<'a> {
    core: &'a TtsCore,
    decoder: BatchDecoder<'a>,
    /// In the order they joined: the first waiting stream gets the next free slot.
    streams: Vec<Entry<'a>>,
    next_id: StreamId,
    timings: BatchTimings,
    chunks_per_call: usize,
    /// How far ahead a chunk counts as urgent (see [`SpeechBatch::set_horizon`]).
    horizon: Option<Duration>,
    /// Whether live sentences start on a paced schedule (see
    /// [`SpeechBatch::set_paced_schedule`]).
    paced: bool,
    /// Every how many rounds the chunks that can wait run (see
    /// [`SpeechBatch::set_chunk_grid`]).
    chunk_grid: Option<usize>,
    /// Whether live streams' hops are fitted as their chunks are made (see
    /// [`SpeechBatch::set_hop_fitting`]).
    hop_fitting: bool,
    /// The longest mean round the caller lets the batch reach (see
    /// [`SpeechBatch::set_round_budget`]).
    round_budget: Option<Duration>,
    /// The measured round and call times the paced schedules are planned on.
    pace: Pace,
    /// The round expected once the requests the caller holds are seated (see
    /// [`SpeechBatch::set_expected_round`]).
    expected_round: Option<Duration>,
    /// The streams the caller expects to hold soon (see [`SpeechBatch::set_expected_streams`]).
    expected_streams: usize,
    /// When the last round started (`None` after a round that left the batch empty).
    last_round: Option<Instant>,
    /// Whether the streams' host work may run on rayon's threads (see the module docs).
    parallel: bool,
}

/// Chunks one flow or HiFT call makes at most by default (see [`SpeechBatch::set_chunks_per_call`]).
pub const CHUNKS_PER_CALL: usize = 16;

impl std::fmt::Debug for SpeechBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpeechBatch")
            .field("streams", &self.streams.len())
            .field("decoder", &self.decoder)
            .finish_non_exhaustive()
    }
}

impl<'a> SpeechBatch<'a> {
    pub(crate) fn new(core: &'a TtsCore, opts: BatchOptions) -> Result<Self> {
        Ok(Self {
            core,
            decoder: BatchDecoder::new(&core.t3, opts)?,
            streams: Vec::new(),
            next_id: 0,
            timings: BatchTimings::default(),
            chunks_per_call: CHUNKS_PER_CALL,
            horizon: None,
            paced: false,
            chunk_grid: None,
            hop_fitting: false,
            round_budget: None,
            pace: Pace::default(),
            expected_round: None,
            expected_streams: 0,
            last_round: None,
            parallel: chatterbox_cuda::ordered(core.t3.device()),
        })
    }

    /// Chunks one flow call (and one HiFT call) makes at most.
    pub fn chunks_per_call(&self) -> usize {
        self.chunks_per_call
    }

    /// Sets [`chunks_per_call`](Self::chunks_per_call) (at least 1; 1 runs each stream's flow and HiFT
    /// alone, exactly as the stream on its own). Default: [`CHUNKS_PER_CALL`].
    pub fn set_chunks_per_call(&mut self, rows: usize) {
        self.chunks_per_call = rows.max(1);
    }

    /// How far ahead of its listener a chunk counts as urgent.
    pub fn horizon(&self) -> Option<Duration> {
        self.horizon
    }

    /// Sets [`horizon`](Self::horizon): a round runs every flow call led by a chunk whose
    /// listener runs out of audio within it, and at most one call of work that can wait (chunks
    /// of streams further ahead, and of streams kept whole), so that the next T3 step is not
    /// held behind it. `None`: every chunk due runs in the round it falls due (most urgent
    /// first all the same), the default: on an H200 a horizon of 1 s gave Turbo's streams at
    /// 16 and 64 clients smaller playback margins than none (docs/benchmarks.md). Only when
    /// chunks run, not what they hold, depends on it.
    pub fn set_horizon(&mut self, horizon: Option<Duration>) {
        self.horizon = horizon;
    }

    /// Whether live sentences start on a paced schedule.
    pub fn paced_schedule(&self) -> bool {
        self.paced
    }

    /// Sets [`paced_schedule`](Self::paced_schedule): a live stream's sentence that starts in
    /// a batch whose measured pace cannot make its schedule's growing chunks in time (each
    /// chunk made while the one before it plays) starts on hops it can: a longer first chunk
    /// and slower growth (see [`super::schedule`]). Its first audio comes later; the chunks
    /// after it come before its listener runs out, as far as the pace holds. Streams kept
    /// whole keep their schedule. Off by default: a stream's audio then depends only on its
    /// own inputs (paced, also on the batch's pace when each sentence started).
    pub fn set_paced_schedule(&mut self, on: bool) {
        self.paced = on;
    }

    /// Every how many rounds the chunks that can wait run; see [`SpeechBatch::set_chunk_grid`].
    pub fn chunk_grid(&self) -> Option<usize> {
        self.chunk_grid
    }

    /// Sets [`chunk_grid`](Self::chunk_grid): while streams decode, a chunk that falls due runs
    /// at once only when its listener would run out before the next `every`th round has run
    /// its calls (at the measured pace, see [`super::schedule::grid_wait`]); the others wait
    /// for that round and share its calls. Streams arriving one by one fall due in different
    /// rounds, each chunk a flow call of its own, which costs about as much as one of several
    /// chunks; on the grid they share them. Chunks keep their tokens: only when they run
    /// depends on it. `None` (the default) or `Some(1)`: every chunk runs in the round it falls
    /// due; so does every chunk of a batch of one stream, of a round that decoded nothing, and
    /// of a batch whose pace is not measured yet.
    pub fn set_chunk_grid(&mut self, every: Option<usize>) {
        self.chunk_grid = every.filter(|&n| n > 1);
    }

    /// Whether live streams' hops are fitted as their chunks are made; see
    /// [`SpeechBatch::set_hop_fitting`].
    pub fn hop_fitting(&self) -> bool {
        self.hop_fitting
    }

    /// Sets [`hop_fitting`](Self::hop_fitting): when a live stream makes a chunk, its next hop
    /// is its plan unless its listener, with the audio left to play, would run out before it
    /// is made at the batch's round (the measured mean, or the
    /// [expected](SpeechBatch::set_expected_round) one or the
    /// [budget](SpeechBatch::set_round_budget) where longer) and calls; then it is
    /// as long as that allows, never shorter than the schedule's first hop
    /// ([`super::schedule::fitted_hop`]). A stream planned before a crowd arrived then grows
    /// more slowly instead of running dry. Off by default; a fitted stream's audio equals that
    /// of the stream on its own with the hops it was given.
    pub fn set_hop_fitting(&mut self, on: bool) {
        self.hop_fitting = on;
    }

    /// The longest mean round the caller lets the batch reach; see
    /// [`SpeechBatch::set_round_budget`].
    pub fn round_budget(&self) -> Option<Duration> {
        self.round_budget
    }

    /// Sets [`round_budget`](Self::round_budget) (say, a server that seats requests only while
    /// its forecast round stays within a budget): [fitted hops](SpeechBatch::set_hop_fitting)
    /// plan on it where the measured and expected rounds are shorter, so that a long hop
    /// chosen in quiet rounds is still made in time when the load grows as far as the caller
    /// allows. `None` (the default): the measured and expected rounds alone.
    pub fn set_round_budget(&mut self, budget: Option<Duration>) {
        self.round_budget = budget;
    }

    /// The batch's measured pace, to hand to the next batch ([`SpeechBatch::set_pace`]).
    pub fn pace(&self) -> Pace {
        self.pace
    }

    /// Starts from `pace` (an earlier batch's) instead of nothing measured.
    pub fn set_pace(&mut self, pace: Pace) {
        self.pace = pace;
    }

    /// The round the caller expects once the requests it holds have joined (say, a server
    /// with a crowd in its queue, from its rounds' times against their sizes); see
    /// [`SpeechBatch::set_expected_round`].
    pub fn expected_round(&self) -> Option<Duration> {
        self.expected_round
    }

    /// Sets [`expected_round`](Self::expected_round): with a paced schedule, a live sentence
    /// that starts while it is longer than the measured mean round plans on it instead. A
    /// crowd arriving together is then paced for the rounds it brings, not the quieter ones
    /// before it (whose pace its first streams would otherwise outrun). `None` (the default):
    /// the measured pace alone.
    pub fn set_expected_round(&mut self, round: Option<Duration>) {
        self.expected_round = round;
    }

    /// The live streams the caller expects the batch to hold soon; see
    /// [`SpeechBatch::set_expected_streams`].
    pub fn expected_streams(&self) -> usize {
        self.expected_streams
    }

    /// Sets [`expected_streams`](Self::expected_streams) (say, a server's seated and queued
    /// requests): a paced schedule allows each chunk to wait for the flow calls of as many
    /// chunks as the batch holds live streams, or this many where more, since streams that
    /// start together fall due together. 0 (the default): those in the batch.
    pub fn set_expected_streams(&mut self, streams: usize) {
        self.expected_streams = streams;
    }

    /// Marks stream `id` as kept whole (`live` false: its audio is not played as it arrives,
    /// so it has no deadline and its chunks go after those of every live stream) or live (the
    /// default). Returns whether the stream is in the batch.
    pub fn set_live(&mut self, id: StreamId, live: bool) -> bool {
        match self.streams.iter_mut().find(|e| e.id == id) {
            Some(e) => {
                e.playout.live = live;
                true
            }
            None => false,
        }
    }

    /// Adds `text` spoken in the voice of `conds` with `opts` (checked now: bad input is an
    /// error here, not later). It starts at the next [`SpeechBatch::step`] with a free slot.
    pub fn add(
        &mut self,
        conds: &Conditionals,
        text: &str,
        opts: &GenerateOptions,
    ) -> Result<StreamId> {
        let stream = SpeechStream::with_conditionals(self.core, conds, text, opts, true)?;
        let id = self.next_id;
        self.next_id += 1;
        self.streams.push(Entry {
            id,
            schedule: opts.stream.clone(),
            stream,
            playout: Playout::new(Instant::now()),
        });
        Ok(id)
    }

    /// Streams not yet finished (decoding, or waiting for a slot).
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Whether no stream is left.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Streams whose sentence is decoding in a slot now.
    pub fn decoding(&self) -> usize {
        self.decoder.active()
    }

    /// Whether a stream added now would find a free slot at the next step.
    pub fn has_room(&self) -> bool {
        self.decoder.has_room()
    }

    /// Where the time went so far.
    pub fn timings(&self) -> BatchTimings {
        self.timings
    }

    /// The T3 decoder's options.
    pub fn options(&self) -> &BatchOptions {
        self.decoder.options()
    }

    /// Runs rounds until every stream has finished; returns each stream's audio (its chunks
    /// joined: what [`SpeechStream`] gives on its own) or its error, in the order the streams
    /// were added.
    pub fn finish_all(&mut self) -> Vec<(StreamId, Result<Vec<f32>>)> {
        let mut audio: Vec<(StreamId, Result<Vec<f32>>)> = self
            .streams
            .iter()
            .map(|e| (e.id, Ok(Vec::new())))
            .collect();
        while !self.is_empty() {
            for (id, o) in self.step() {
                let Some((_, slot)) = audio.iter_mut().find(|(i, _)| *i == id) else {
                    continue;
                };
                match (o, slot.as_mut()) {
                    (BatchOutput::Chunk(c), Ok(samples)) => samples.extend(c.samples),
                    (BatchOutput::Failed(e), _) => *slot = Err(e),
                    _ => {}
                }
            }
        }
        audio
    }

    /// Drops a stream (its client went away): its slot is free at once. Returns whether it
    /// was in the batch.
    pub fn cancel(&mut self, id: StreamId) -> bool {
        let Some(i) = self.streams.iter().position(|e| e.id == id) else {
            return false;
        };
        let e = self.streams.remove(i);
        if let Some(r) = e.stream.batch_request() {
            self.decoder.cancel(r);
        }
        true
    }

    /// One round: streams that need their next sentence join the decoder while slots are
    /// free (in the order they were added), one batched T3 step runs, and every stream turns
    /// the tokens it got into audio where a chunk is due. Returns each stream's chunks and
    /// failures; a stream leaves after its last chunk or its failure.
    pub fn step(&mut self) -> Vec<(StreamId, BatchOutput)> {
        let mut out = Vec::new();
        self.step_with(|id, o| out.push((id, o)));
        out
    }

    /// [`SpeechBatch::step`], handing each chunk to `emit` as soon as it is made: the round's
    /// flow calls run one after the other, streams that have not spoken yet first (their
    /// first audio), each call followed by the HiFT calls of its chunks, whose audio `emit`
    /// gets before the next flow call starts.
    pub fn step_with(&mut self, mut emit: impl FnMut(StreamId, BatchOutput)) {
        let mut out = Vec::new();
        let mut failed: Vec<StreamId> = Vec::new();
        let t0 = Instant::now();
        let rows_before = self.decoder.active();
        if let Some(last) = self.last_round.replace(t0) {
            self.pace.observe_round(rows_before, t0 - last);
        }
        // Admissions, first come first served: every stream that needs its next sentence
        // queues it while slots are free, then one prefill call admits as many as its budget
        // holds (the rest next round, so running streams wait one call per round).
        // Streams that start together fall due together: a chunk may wait for the calls of
        // every live stream's chunk before its own, which a paced schedule allows for.
        let live = self.streams.iter().filter(|e| e.playout.live).count();
        let live = live.max(self.expected_streams);
        let queued_calls = live.div_ceil(self.chunks_per_call).max(1) as u32;
        for i in 0..self.streams.len() {
            if !self.decoder.has_room() {
                break;
            }
            let e = &mut self.streams[i];
            if e.stream.batch_request().is_some() {
                continue;
            }
            let r = match e.stream.pump() {
                Ok(Step::NeedsSentence) => {
                    if self.paced {
                        let paced = plan(&self.pace, self.expected_round, queued_calls, e);
                        self.timings.paced_sentences += u64::from(paced);
                    }
                    e.stream.start_sentence(Some(&mut self.decoder))
                }
                Ok(_) => Ok(()),
                Err(err) => Err(err),
            };
            if let Err(err) = r {
                out.push((self.streams[i].id, BatchOutput::Failed(err)));
                failed.push(self.streams[i].id);
            }
        }
        let admitted = self.decoder.admit_queued();
        self.route(admitted, &mut out, &mut failed);
        let t1 = Instant::now();
        self.timings.admit += t1 - t0;
        // One decode step for every request in a slot.
        let decoding = self.decoder.active();
        if decoding > 0 {
            self.timings.rounds += 1;
            self.timings.decoded += decoding as u64;
            let stepped = self.decoder.step();
            self.timings.decode += t1.elapsed();
            match stepped {
                Ok(events) => self.route(events, &mut out, &mut failed),
                Err(err) => {
                    // a failed step leaves every decoding request's state unknown
                    let msg = err.to_string();
                    for e in &self.streams {
                        if let Some(r) = e.stream.batch_request() {
                            self.decoder.cancel(r);
                            out.push((
                                e.id,
                                BatchOutput::Failed(PipelineError::BatchStep(msg.clone())),
                            ));
                            failed.push(e.id);
                        }
                    }
                }
            }
        }
        for (id, o) in out.drain(..) {
            emit(id, o);
        }
        // Audio from the tokens each stream got: every stream runs until it waits for tokens
        // or for a chunk's flow or HiFT call; the HiFT calls due run, then the most urgent
        // flow call, and again until none is due. A stream is run again only when a call
        // has handed it something.
        let t2 = Instant::now();
        let grid_until = self.grid_until(decoding, queued_calls);
        let round = [self.pace.round(), self.expected_round, self.round_budget]
            .into_iter()
            .flatten()
            .max();
        for e in &mut self.streams {
            let pacer = match (self.hop_fitting, round, self.pace.chunk_calls()) {
                (true, Some(round), Some(calls)) if e.playout.live => Some(HopPacer {
                    round,
                    calls: calls * queued_calls,
                    first_audio: e.playout.first_audio,
                    least: e.schedule.hops.first().copied().unwrap_or(1),
                }),
                _ => None,
            };
            e.stream.set_pacer(pacer);
        }
        let mut dirty = vec![true; self.streams.len()];
        let mut flows: Vec<(usize, FlowJob)> = Vec::new();
        let mut flow_calls = 0;
        loop {
            let mut vocodes = Vec::new();
            // each stream's own host work (its chunk jobs and their draws, joining its audio),
            // on rayon's threads where the device orders their work: the streams share nothing
            let pump = |(e, dirty): (&mut Entry<'a>, &mut bool)| -> Option<Pumped> {
                if !std::mem::take(dirty) || failed.contains(&e.id) {
                    return None;
                }
                let step = e.stream.pump();
                let job = match step {
                    Ok(Step::Flow) => Some(e.stream.flow_job()),
                    _ => None,
                };
                Some((step, job, e.stream.take_ready().collect()))
            };
            let pumped: Vec<Option<Pumped>> = if self.parallel {
                self.streams
                    .par_iter_mut()
                    .zip(dirty.par_iter_mut())
                    .map(pump)
                    .collect()
            } else {
                self.streams
                    .iter_mut()
                    .zip(dirty.iter_mut())
                    .map(pump)
                    .collect()
            };
            for (i, p) in pumped.into_iter().enumerate() {
                let Some((step, job, ready)) = p else {
                    continue;
                };
                let id = self.streams[i].id;
                let (mean_round, decoding) = (self.pace.round(), self.decoder.active());
                let e = &mut self.streams[i];
                for c in ready {
                    let now = Instant::now();
                    if e.playout.first_audio.is_none() && !c.samples.is_empty() {
                        e.playout.first_audio = Some(now);
                    }
                    if let Some(due) = e.playout.deadline(c.sample_offset, S3GEN_SR) {
                        if now > due && e.playout.first_audio.is_some_and(|t| t < now) {
                            tracing::debug!(
                                stream = id,
                                chunk = c.index,
                                sentence = c.sentence,
                                at_s = c.sample_offset as f64 / f64::from(S3GEN_SR),
                                late_ms = (now - due).as_secs_f64() * 1e3,
                                samples = c.samples.len(),
                                hops = ?e.stream.schedule().hops,
                                round_ms =
                                    mean_round.map_or(f64::NAN, |r| r.as_secs_f64() * 1e3),
                                decoding,
                                "chunk after its listener ran out"
                            );
                        }
                    }
                    emit(id, BatchOutput::Chunk(c));
                }
                let err = match (step, job) {
                    (Err(err), _) | (_, Some(Err(err))) => Some(err),
                    (Ok(Step::Flow), Some(Ok(Some(job)))) => {
                        flows.push((i, job));
                        None
                    }
                    (Ok(Step::Vocode), _) => {
                        vocodes.push(i);
                        None
                    }
                    _ => None,
                };
                if let Some(err) = err {
                    emit(id, BatchOutput::Failed(err));
                    failed.push(id);
                }
            }
            if !vocodes.is_empty() {
                self.run_vocoder(&vocodes, &mut out, &mut failed);
                for i in vocodes {
                    dirty[i] = true;
                }
            } else {
                let call = self.next_flow_call(&mut flows, flow_calls == 0, grid_until);
                if call.is_empty() {
                    // nothing due, or nothing urgent: the rest waits for a later round
                    break;
                }
                flow_calls += 1;
                for (i, _) in &call {
                    dirty[*i] = true;
                }
                self.run_flow_call(call, &mut out, &mut failed);
            }
            for (id, o) in out.drain(..) {
                emit(id, o);
            }
        }
        self.timings.audio += t2.elapsed();
        for e in &mut self.streams {
            self.timings.fitted_hops += e.stream.take_fitted_hops();
        }
        let decoder = &mut self.decoder;
        self.streams.retain(|e| {
            let gone = failed.contains(&e.id) || e.stream.is_done();
            if gone {
                if let Some(r) = e.stream.batch_request() {
                    decoder.cancel(r);
                }
            }
            !gone
        });
        if self.streams.is_empty() {
            // an idle gap before the next stream is not a round
            self.last_round = None;
        }
    }

    /// With a [chunk grid](SpeechBatch::set_chunk_grid), off its rounds: the deadline before
    /// which a chunk falling due now runs at once (the others wait for the grid); `None` when
    /// every chunk due may run: on a grid round, with nothing `decoding` (no round will come),
    /// with one stream, or before the pace is measured. `queued_calls`: the calls of the live
    /// streams' chunks falling due together.
    fn grid_until(&self, decoding: usize, queued_calls: u32) -> Option<Instant> {
        let every = self.chunk_grid?;
        if decoding == 0 || self.streams.len() < 2 {
            return None;
        }
        let calls = self.pace.chunk_calls()? * queued_calls;
        let wait = schedule::grid_wait(self.timings.rounds, every, self.pace.round()?, calls)?;
        Some(Instant::now() + wait)
    }

    /// Takes the next flow call out of `due` ([`schedule::next_call`]): earliest deadline
    /// first, [`SpeechBatch::chunks_per_call`] at most, of one number of Euler steps; none when
    /// nothing is urgent within the horizon or before `grid_until` (see
    /// [`SpeechBatch::grid_until`]), unless `background` (no call has run this round) off a
    /// grid.
    fn next_flow_call(
        &self,
        due: &mut Vec<(usize, FlowJob)>,
        background: bool,
        grid_until: Option<Instant>,
    ) -> Vec<(usize, FlowJob)> {
        let now = Instant::now();
        let seen: Vec<Due> = due
            .iter()
            .map(|(i, j)| {
                let e = &self.streams[*i];
                Due {
                    deadline: e.playout.deadline(e.stream.samples_emitted(), S3GEN_SR),
                    steps: j.n_timesteps,
                    frames: j.row.noise.dims().get(2).copied().unwrap_or(0),
                }
            })
            .collect();
        let urgent_until = match (self.horizon.map(|h| now + h), grid_until) {
            (Some(h), Some(g)) => Some(h.min(g)),
            (h, g) => h.or(g),
        };
        let background = background && grid_until.is_none();
        let picked = schedule::next_call(&seen, self.chunks_per_call, urgent_until, background);
        if picked.is_empty() {
            return Vec::new();
        }
        let mut all: Vec<Option<(usize, FlowJob)>> = due.drain(..).map(Some).collect();
        let call = picked.iter().filter_map(|&k| all[k].take()).collect();
        due.extend(all.into_iter().flatten());
        call
    }

    /// Hands the decoder's events to their streams; a stream that fails on its event fails.
    fn route(
        &mut self,
        events: Vec<BatchEvent>,
        out: &mut Vec<(StreamId, BatchOutput)>,
        failed: &mut Vec<StreamId>,
    ) {
        for ev in events {
            let rid = match &ev {
                BatchEvent::Token { id, .. }
                | BatchEvent::Finished { id, .. }
                | BatchEvent::Failed { id, .. } => *id,
            };
            if let Some(e) = self
                .streams
                .iter_mut()
                .find(|e| e.stream.batch_request() == Some(rid))
            {
                if let Err(err) = e.stream.deliver(ev) {
                    out.push((e.id, BatchOutput::Failed(err)));
                    failed.push(e.id);
                }
            }
        }
    }

    /// One flow call over `group`'s chunks (padded to the longest): each stream gets its mel,
    /// or fails with the call.
    fn run_flow_call(
        &mut self,
        group: Vec<(usize, FlowJob)>,
        out: &mut Vec<(StreamId, BatchOutput)>,
        failed: &mut Vec<StreamId>,
    ) {
        let Some(steps) = group.first().map(|(_, j)| j.n_timesteps) else {
            return;
        };
        let flow = self.core.s3gen.flow();
        let t0 = Instant::now();
        let mels = match group.as_slice() {
            // alone, exactly as the stream on its own, unless the flow replays kept graphs for
            // calls padded to a bucket (CUDA) and calls may be shared: an unpadded chunk's
            // shape seldom repeats
            [(_, job)] if self.chunks_per_call == 1 || !flow.replays_graphs() => {
                job.run(flow).map(|m| vec![m])
            }
            _ => {
                let rows: Vec<_> = group.iter().map(|(_, j)| j.row.clone()).collect();
                flow.inference_rows(&rows, steps)
                    .map_err(PipelineError::from)
            }
        };
        self.timings.flow += t0.elapsed();
        self.pace.observe_flow_call(t0.elapsed());
        self.timings.flow_calls += 1;
        self.timings.flow_chunks += group.len() as u64;
        match mels {
            Ok(mels) => {
                for ((i, _), mel) in group.iter().zip(mels) {
                    self.streams[*i].stream.supply_flow(mel);
                }
            }
            Err(err) => self.fail_call(group.iter().map(|(i, _)| *i), &err, out, failed),
        }
    }

    /// The HiFT calls of the streams at `waiting`: those of one shape (a chunk's frames and
    /// cached source) share a call, `chunks_per_call` at most; each stream gets its output, or fails
    /// with its call.
    fn run_vocoder(
        &mut self,
        waiting: &[usize],
        out: &mut Vec<(StreamId, BatchOutput)>,
        failed: &mut Vec<StreamId>,
    ) {
        let mut jobs: Vec<(usize, (usize, usize))> = waiting
            .iter()
            .filter_map(|&i| Some((i, self.streams[i].stream.vocode_job()?.shape())))
            .collect();
        jobs.sort_by_key(|&(_, shape)| shape);
        let hift = self.core.s3gen.mel2wav();
        for group in calls(&jobs, self.chunks_per_call, |&(_, shape)| shape) {
            let jobs: Vec<&VocodeJob> = group
                .iter()
                .filter_map(|&(i, _)| self.streams[i].stream.vocode_job())
                .collect();
            let t0 = Instant::now();
            let outs = vocode_batch(hift, &jobs);
            self.timings.vocoder += t0.elapsed();
            self.pace.observe_vocoder_call(t0.elapsed());
            self.timings.vocoder_calls += 1;
            self.timings.vocoder_chunks += group.len() as u64;
            match outs {
                Ok(outs) => {
                    for (&(i, _), o) in group.iter().zip(outs) {
                        self.streams[i].stream.supply_vocoded(o);
                    }
                }
                Err(err) => self.fail_call(group.iter().map(|&(i, _)| i), &err, out, failed),
            }
        }
    }

    /// Every stream of a shared flow or HiFT call that failed fails with it.
    fn fail_call(
        &self,
        streams: impl Iterator<Item = usize>,
        err: &PipelineError,
        out: &mut Vec<(StreamId, BatchOutput)>,
        failed: &mut Vec<StreamId>,
    ) {
        let msg = err.to_string();
        for i in streams {
            let id = self.streams[i].id;
            out.push((
                id,
                BatchOutput::Failed(PipelineError::FlowBatch(msg.clone())),
            ));
            failed.push(id);
        }
    }
}

/// Gives the sentence that `e` starts next a paced schedule where its stream is live and the
/// batch's pace (its mean round, or the `expected` one where longer, capped where schedules
/// still keep up; a chunk's calls, times `queued_calls`: the calls the chunks of every live
/// stream take when they fall due together) needs one, its own schedule otherwise; returns
/// whether it is paced.
fn plan(pace: &Pace, expected: Option<Duration>, queued_calls: u32, e: &mut Entry<'_>) -> bool {
    // a round at or past what any schedule keeps up with (a forecast, or a mean just after a
    // long flow call) plans on the slowest one that does: the stream's longest first chunk,
    // never the model's short one
    let ceiling = e
        .stream
        .token_audio()
        .mul_f64(schedule::PACED_UTILISATION * schedule::FORECAST_CEILING);
    let round = match (pace.round(), expected) {
        (Some(r), Some(x)) => Some(r.max(x)),
        (r, x) => r.or(x),
    }
    .map(|r| r.min(ceiling));
    let calls = pace.chunk_calls().map(|c| c * queued_calls);
    let hops = match (e.playout.live, round, calls) {
        (true, Some(round), Some(calls)) => {
            schedule::paced_hops(&e.schedule.hops, round, calls, e.stream.token_audio())
        }
        _ => None,
    };
    let paced = hops.is_some();
    tracing::debug!(
        stream = e.id,
        live = e.playout.live,
        round_ms = round.map_or(f64::NAN, |r| r.as_secs_f64() * 1e3),
        calls_ms = calls.map_or(f64::NAN, |c| c.as_secs_f64() * 1e3),
        hops = ?hops,
        "sentence planned"
    );
    let schedule = match hops {
        Some(hops) => StreamSchedule {
            hops,
            ..e.schedule.clone()
        },
        None => e.schedule.clone(),
    };
    e.stream.set_schedule(schedule);
    paced
}

/// The calls to make of `items` (sorted by `key`): runs of one key, at most `max` long each.
fn calls<T, K: PartialEq>(items: &[T], max: usize, key: impl Fn(&T) -> K) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut rest = items;
    while let Some(first) = rest.first() {
        let k = key(first);
        let n = rest
            .iter()
            .take(max.max(1))
            .take_while(|t| key(t) == k)
            .count();
        let (call, tail) = rest.split_at(n);
        out.push(call);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::calls;

    #[test]
    fn calls_split_runs_of_one_key_at_the_cap() {
        let items = [1, 1, 1, 2, 3, 3];
        let got: Vec<&[i32]> = calls(&items, 2, |&x| x);
        assert_eq!(got, vec![&[1, 1][..], &[1], &[2], &[3, 3]]);
        assert_eq!(calls(&items, 0, |_| 0).len(), 6);
        assert!(calls(&[] as &[i32], 4, |&x| x).is_empty());
    }
}
