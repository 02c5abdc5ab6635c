//! Continuous batching of T3 generations: many requests decode together, one batched step per
//! token, joining and leaving at token boundaries. Each request gives exactly the tokens its
//! own [`TokenStream`] would (the loops of `T3.inference` / `T3.inference_turbo` in
//! chatterbox/models/t3/t3.py, upstream 5de7a54, run side by side).
//!
//! A request's prompt is prefilled and its first token drawn with its own processors and
//! generator, then its KV cache, token history, sampling parameters and random generator move
//! into a *slot*: rows of caches and buffers preallocated for the decoder's lifetime. Requests
//! admitted at once ([`BatchDecoder::admit_generate`]) are prefilled alone; queued ones
//! ([`BatchDecoder::queue_generate`], then [`BatchDecoder::admit_queued`]) share one prefill
//! call, their prompts right-padded to the longest (the causal mask keeps every row's
//! positions from the padding after them), at most [`BatchOptions::prefill_positions`] padded
//! positions per call, and draw their first tokens in one batched select (each row with its
//! request's parameters, history and noise), so a round of admissions stalls the running
//! requests by one call. Each [`BatchDecoder::step`] feeds every
//! occupied slot's latest token at its own position (per-row RoPE rows, cache writes and
//! attention masks, all device-side) and draws every slot's next token with its own
//! processors; the host reads one `[slots]` vector of ids per step. On CUDA a step is captured
//! as a graph per (slot-count bucket, attention bucket) and replayed.
mod select;

pub(crate) use select::RowParams;

use crate::backbone::{KvCache, StepIndex};
use crate::generate::{GenerateOptions, Prefill, TokenStream, TurboOptions, DEFAULT_GRAPH_BUCKET};
use crate::sampling::Sampler;
use crate::t3::T3;
use crate::{Result, T3Error};
use candle_core::{DType, Device, Tensor};
use select::{BatchSelect, Order};

/// A request's handle in a [`BatchDecoder`], unique over the decoder's lifetime.
pub type RequestId = u64;

/// What one request did in an admission or a step.
#[derive(Debug)]
pub enum BatchEvent {
    /// The request drew a token (the stop token included, as [`TokenStream`] yields it).
    Token {
        /// The request.
        id: RequestId,
        /// The drawn id.
        token: u32,
    },
    /// The request ended and left its slot.
    Finished {
        /// The request.
        id: RequestId,
        /// Whether it ended on the stop token (else on its token limit, or Turbo's
        /// all-`-inf` stop).
        stopped_on_eos: bool,
    },
    /// The request failed and left its slot (the others go on).
    Failed {
        /// The request.
        id: RequestId,
        /// Why.
        error: T3Error,
    },
}

/// Sizes of a [`BatchDecoder`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchOptions {
    /// Requests decoded at once. Default: 16.
    pub slots: usize,
    /// Sequence positions per request (prompt plus generated tokens); a request needing more
    /// is refused at admission. Default: 1500.
    pub positions: usize,
    /// Attention-length bucket (positions) of the masked attention; each step attends over
    /// the smallest multiple covering its longest request. Default: [`DEFAULT_GRAPH_BUCKET`].
    pub bucket: usize,
    /// On CUDA, replay steps as CUDA graphs (one per slot-count and attention bucket).
    /// Default: `true`.
    pub cuda_graphs: bool,
    /// Padded prompt positions (rows × longest prompt) one [`BatchDecoder::admit_queued`]
    /// call prefills at most; the queued requests beyond wait for the next call (one request
    /// always goes). Its keys and values are the call's transient memory. Default: 8192.
    pub prefill_positions: usize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            slots: 16,
            positions: 1500,
            bucket: DEFAULT_GRAPH_BUCKET,
            cuda_graphs: true,
            prefill_positions: 8192,
        }
    }
}

impl BatchOptions {
    /// Sets [`BatchOptions::slots`].
    pub fn with_slots(mut self, slots: usize) -> Self {
        self.slots = slots;
        self
    }

    /// Sets [`BatchOptions::positions`].
    pub fn with_positions(mut self, positions: usize) -> Self {
        self.positions = positions;
        self
    }

    /// Sets [`BatchOptions::bucket`].
    pub fn with_bucket(mut self, bucket: usize) -> Self {
        self.bucket = bucket;
        self
    }

    /// Sets [`BatchOptions::cuda_graphs`].
    pub fn with_cuda_graphs(mut self, on: bool) -> Self {
        self.cuda_graphs = on;
        self
    }

    /// Sets [`BatchOptions::prefill_positions`].
    pub fn with_prefill_positions(mut self, positions: usize) -> Self {
        self.prefill_positions = positions;
        self
    }
}

/// The host state of an occupied slot.
#[derive(Debug)]
struct Slot {
    id: RequestId,
    sampler: Sampler,
    prefix_len: usize,
    speech_pos_base: usize,
    turbo: bool,
    stop_token: Option<u32>,
    max_tokens: usize,
    drawn: usize,
    fed: usize,
    /// The latest drawn token, fed by the next step.
    pending: u32,
    /// Its sampling parameters (also written into the batched processors' device tensors).
    params: RowParams,
}

impl Slot {
    /// The slot state of `stream`, whose first drawn token `pending` the next step feeds.
    fn new(id: RequestId, stream: &TokenStream<'_>, pending: u32) -> Self {
        Self {
            id,
            sampler: stream.sampler.clone(),
            prefix_len: stream.prefix_len,
            speech_pos_base: stream.speech_pos_base,
            turbo: stream.turbo,
            stop_token: stream.stop_token,
            max_tokens: stream.max_tokens,
            drawn: stream.drawn,
            fed: stream.fed,
            pending,
            params: stream.params,
        }
    }

    fn seq_pos(&self) -> usize {
        self.prefix_len + self.fed
    }

    fn speech_pos(&self) -> usize {
        if self.turbo {
            0
        } else {
            self.speech_pos_base + self.fed
        }
    }
}

/// The device buffers of the batch (slot-major rows; `rows_per_slot` rows per slot).
#[derive(Debug)]
struct Buffers {
    /// u32 `[slots, 3]`: fed token, sequence position, speech position.
    inputs: Tensor,
    /// f32 `[slots, vocab]`: Gumbel noise (zeros for greedy rows).
    noise: Tensor,
    /// f32 `[slots * rows_per_slot, vocab]`.
    logits: Tensor,
    /// f32 `[slots, vocab]`.
    processed: Tensor,
    /// u32 `[slots, 1]`.
    token: Tensor,
    /// u32 `[slots, vocab]`: ids each slot's repetition penalty sees.
    history: Tensor,
    /// u32 `[slots, 1]` ones (history writes).
    ones: Tensor,
    caches: Vec<KvCache>,
    /// u32 `0..positions`, and the values of a valid and a masked score.
    arange: Tensor,
    mask_zero: Tensor,
    mask_ninf: Tensor,
}

/// Continuous batching over one T3 model: see the module docs. Created by
/// [`BatchDecoder::new`]; requests join with [`BatchDecoder::admit_generate`] /
/// [`BatchDecoder::admit_turbo`] (alone, at once) or [`BatchDecoder::queue_generate`] /
/// [`BatchDecoder::queue_turbo`] and [`BatchDecoder::admit_queued`] (together), and advance
/// with [`BatchDecoder::step`].
pub struct BatchDecoder<'a> {
    model: &'a T3,
    opts: BatchOptions,
    rows_per_slot: usize,
    vocab: usize,
    buf: Buffers,
    select: BatchSelect,
    slots: Vec<Option<Slot>>,
    /// Requests waiting for [`BatchDecoder::admit_queued`], in the order they came.
    queue: Vec<(RequestId, TokenStream<'a>)>,
    next_id: RequestId,
    host_inputs: Vec<u32>,
    host_noise: Vec<f32>,
    /// Captured steps by (slots, attention positions, whether scores are sorted).
    #[cfg(feature = "cuda")]
    graphs: Vec<((usize, usize, bool), crate::graph::cuda::Graph)>,
    graphs_on: bool,
}

impl std::fmt::Debug for BatchDecoder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchDecoder")
            .field("opts", &self.opts)
            .field("active", &self.active())
            .finish_non_exhaustive()
    }
}

impl<'a> BatchDecoder<'a> {
    /// Preallocates `opts.slots` requests of `opts.positions` positions on the model's device:
    /// KV caches of `slots × rows × positions` (2 rows per request for English and
    /// multilingual, which always run the CFG pair; 1 for Turbo and Nano).
    pub fn new(model: &'a T3, opts: BatchOptions) -> Result<Self> {
        if opts.slots == 0 || opts.positions < 2 || opts.bucket == 0 {
            return Err(crate::error::invalid(
                "batch options",
                format!(
                    "{} slots of {} positions, bucket {} (each must be positive, positions >= 2)",
                    opts.slots, opts.positions, opts.bucket
                ),
            ));
        }
        let max = model.backbone().max_positions();
        if opts.positions > max {
            return Err(T3Error::SequenceTooLong {
                what: "backbone positions",
                len: opts.positions,
                max,
            });
        }
        let turbo = model.config().is_gpt();
        let rows_per_slot = if turbo { 1 } else { 2 };
        let dev = model.device();
        let vocab = model.config().speech_tokens_dict_size;
        let s = opts.slots;
        let buf = Buffers {
            inputs: Tensor::zeros((s, 3), DType::U32, dev)?,
            noise: Tensor::zeros((s, vocab), DType::F32, dev)?,
            logits: Tensor::zeros((s * rows_per_slot, vocab), DType::F32, dev)?,
            processed: Tensor::zeros((s, vocab), DType::F32, dev)?,
            token: Tensor::zeros((s, 1), DType::U32, dev)?,
            history: Tensor::zeros((s, vocab), DType::U32, dev)?,
            ones: Tensor::ones((s, 1), DType::U32, dev)?,
            caches: model.backbone().new_caches(
                s * rows_per_slot,
                opts.positions,
                model.dtype(),
                dev,
            )?,
            arange: Tensor::arange(0u32, opts.positions as u32, dev)?,
            mask_zero: Tensor::zeros(1, DType::F32, dev)?,
            mask_ninf: Tensor::new(&[f32::NEG_INFINITY], dev)?,
        };
        let order = if turbo { Order::Turbo } else { Order::English };
        Ok(Self {
            model,
            rows_per_slot,
            vocab,
            select: BatchSelect::new(order, s, vocab, dev)?,
            slots: (0..s).map(|_| None).collect(),
            queue: Vec::new(),
            next_id: 0,
            host_inputs: vec![0; s * 3],
            host_noise: vec![0.0; s * vocab],
            #[cfg(feature = "cuda")]
            graphs: Vec::new(),
            graphs_on: opts.cuda_graphs && cfg!(feature = "cuda") && dev.is_cuda(),
            opts,
            buf,
        })
    }

    /// Bytes of device memory a decoder with `opts` preallocates for `model` (KV caches and
    /// per-slot buffers), plus the keys and values of one batched prefill call
    /// ([`BatchOptions::prefill_positions`]); the activations of a step or a prefill come on
    /// top.
    pub fn memory_bytes(model: &T3, opts: &BatchOptions) -> usize {
        let (layers, heads, head_dim) = model.backbone().cache_shape();
        let rows = if model.config().is_gpt() { 1 } else { 2 };
        let vocab = model.config().speech_tokens_dict_size;
        let positions = opts.positions * rows * opts.slots + opts.prefill_positions;
        let kv = 2 * layers * heads * head_dim * positions;
        kv * model.dtype().size_in_bytes() + opts.slots * vocab * 4 * (4 + rows)
    }

    /// The options it was built with.
    pub fn options(&self) -> &BatchOptions {
        &self.opts
    }

    /// Requests decoding now.
    pub fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Requests queued for [`BatchDecoder::admit_queued`].
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Whether a request can join now (a free slot that no queued request holds).
    pub fn has_room(&self) -> bool {
        self.slots.iter().filter(|s| s.is_none()).count() > self.queue.len()
    }

    /// Whether steps replay as CUDA graphs (on a CUDA device with the option on, until a
    /// capture fails).
    pub fn uses_cuda_graphs(&self) -> bool {
        self.graphs_on
    }

    /// CUDA graphs captured so far.
    pub fn cuda_graphs_captured(&self) -> usize {
        #[cfg(feature = "cuda")]
        return self.graphs.len();
        #[cfg(not(feature = "cuda"))]
        0
    }

    /// Starts an English or multilingual request (the arguments of [`T3::generate`]): prefills
    /// it, draws its first token, and seats it in a free slot unless it already ended. The
    /// alignment-stream analyzer is not batched (run such a request with [`T3::generate`]).
    pub fn admit_generate(
        &mut self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &GenerateOptions,
    ) -> Result<(RequestId, Vec<BatchEvent>)> {
        if opts.alignment.is_some() {
            return Err(crate::error::invalid(
                "batched request",
                "the alignment-stream analyzer runs only in a request of its own (T3::generate)"
                    .to_string(),
            ));
        }
        self.check_room(opts.max_new_tokens)?;
        let stream = self
            .model
            .start_generate(cond_emb, text_tokens, opts, Prefill::Only)?;
        self.admit(stream)
    }

    /// Starts a Turbo or Nano request (the arguments of [`T3::generate_turbo`]); see
    /// [`BatchDecoder::admit_generate`].
    pub fn admit_turbo(
        &mut self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &TurboOptions,
    ) -> Result<(RequestId, Vec<BatchEvent>)> {
        self.check_room(opts.max_gen_len + 1)?;
        let stream = self
            .model
            .start_turbo(cond_emb, text_tokens, opts, Prefill::Only)?;
        self.admit(stream)
    }

    /// Queues an English or multilingual request (checked now: bad input is an error here)
    /// for the next [`BatchDecoder::admit_queued`], which prefills it with the other queued
    /// ones; it holds a slot from now on. Its events come from that call.
    pub fn queue_generate(
        &mut self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &GenerateOptions,
    ) -> Result<RequestId> {
        self.check_room(opts.max_new_tokens)?;
        let stream = self
            .model
            .start_generate(cond_emb, text_tokens, opts, Prefill::Deferred)?;
        self.enqueue(stream)
    }

    /// Queues a Turbo or Nano request; see [`BatchDecoder::queue_generate`].
    pub fn queue_turbo(
        &mut self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &TurboOptions,
    ) -> Result<RequestId> {
        self.check_room(opts.max_gen_len + 1)?;
        let stream = self
            .model
            .start_turbo(cond_emb, text_tokens, opts, Prefill::Deferred)?;
        self.enqueue(stream)
    }

    fn enqueue(&mut self, stream: TokenStream<'a>) -> Result<RequestId> {
        self.check_positions(&stream)?;
        let id = self.next_id;
        self.next_id += 1;
        self.queue.push((id, stream));
        Ok(id)
    }

    /// Admits queued requests, first come first served: one prefill call over as many as
    /// [`BatchOptions::prefill_positions`] allows (at least one), then their first draws
    /// (one batched select, each row with its request's parameters and generator), and each
    /// one's seat in a slot unless it already ended. Returns their events (a token each, an end, or a failure: a failed prefill fails
    /// every request of the call). Nothing happens with an empty queue.
    pub fn admit_queued(&mut self) -> Vec<BatchEvent> {
        let mut n = 0;
        let mut longest = 0;
        let mut rows = 0;
        for (_, s) in &self.queue {
            let (b, t) = s
                .unprefilled
                .as_ref()
                .and_then(|e| e.dims3().ok())
                .map_or((1, 1), |(b, t, _)| (b, t));
            let (r, l) = (rows + b, longest.max(t));
            if n > 0 && r * l > self.opts.prefill_positions {
                break;
            }
            (n, rows, longest) = (n + 1, r, l);
        }
        let group: Vec<(RequestId, TokenStream<'a>)> = self.queue.drain(..n).collect();
        if group.is_empty() {
            return Vec::new();
        }
        let ids: Vec<RequestId> = group.iter().map(|(id, _)| *id).collect();
        match self.prefill_group(group) {
            Ok(events) => events,
            Err(e) => {
                let msg = e.to_string();
                ids.into_iter()
                    .map(|id| BatchEvent::Failed {
                        id,
                        error: crate::error::invalid("batched prefill", msg.clone()),
                    })
                    .collect()
            }
        }
    }

    /// One prefill call over `group`'s prompts (right-padded to the longest), then their first
    /// draws and seats ([`BatchDecoder::first_draws`]).
    fn prefill_group(
        &mut self,
        group: Vec<(RequestId, TokenStream<'a>)>,
    ) -> Result<Vec<BatchEvent>> {
        let model = self.model;
        let t0 = std::time::Instant::now();
        let mut prompts = Vec::with_capacity(group.len());
        for (_, s) in &group {
            let e = s.unprefilled.as_ref().ok_or_else(|| {
                crate::error::invalid("batched prefill", "a queued request without its prompt")
            })?;
            prompts.push(e);
        }
        let mut longest = 0;
        for e in &prompts {
            longest = longest.max(e.dim(1)?);
        }
        let mut padded = Vec::with_capacity(prompts.len());
        let mut spans = Vec::with_capacity(prompts.len());
        let mut row = 0;
        for e in &prompts {
            let (b, t, _) = e.dims3()?;
            padded.push(e.pad_with_zeros(1, 0, longest - t)?);
            spans.push((row..row + b, t));
            row += b;
        }
        let x = Tensor::cat(&padded, 0)?;
        let mut caches =
            model
                .backbone()
                .new_caches(row, longest, model.dtype(), model.device())?;
        let hidden = model.backbone().prefill(&x, &mut caches, None)?;
        let last = spans
            .iter()
            .map(|(rows, t)| {
                hidden
                    .narrow(0, rows.start, rows.len())?
                    .narrow(1, t - 1, 1)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let logits = model.speech_logits(&Tensor::cat(&last, 0)?)?;
        let debug = tracing::enabled!(tracing::Level::DEBUG);
        if debug {
            // orders the clock read below after the prefill's device work (timing only)
            model.device().synchronize()?;
        }
        let t1 = std::time::Instant::now();
        let n = group.len();
        let events = self.first_draws(group, spans, &caches, &logits)?;
        if debug {
            tracing::debug!(
                requests = n,
                rows = row,
                longest,
                prefill_ms = (t1 - t0).as_secs_f64() * 1e3,
                draws_ms = t1.elapsed().as_secs_f64() * 1e3,
                "batched prefill"
            );
        }
        Ok(events)
    }

    /// The first draws of a prefilled group, all in one batched select (each request's own
    /// processors, parameters, history and noise: what its [`TokenStream`]'s first `next()`
    /// draws), then the seats of those that go on. `spans` are the requests' rows of `logits`
    /// and `caches` and their prompt lengths. Returns the events in the group's order; a
    /// request that fails here fails alone.
    fn first_draws(
        &mut self,
        group: Vec<(RequestId, TokenStream<'a>)>,
        spans: Vec<(std::ops::Range<usize>, usize)>,
        caches: &[KvCache],
        logits: &Tensor,
    ) -> Result<Vec<BatchEvent>> {
        let r = self.rows_per_slot;
        let vocab = self.vocab;
        let dev = self.model.device().clone();
        let mut events: Vec<Vec<BatchEvent>> = (0..group.len()).map(|_| Vec::new()).collect();
        // Who draws, in the slots it will take (reserved: the queue held them).
        let mut free = (0..self.slots.len()).filter(|&i| self.slots[i].is_none());
        let mut draws = Vec::with_capacity(group.len());
        for (k, ((id, mut stream), (rows, _))) in group.into_iter().zip(spans).enumerate() {
            stream.unprefilled = None;
            if stream.finished || stream.drawn >= stream.max_tokens {
                events[k].push(BatchEvent::Finished {
                    id,
                    stopped_on_eos: false,
                });
                continue;
            }
            let Some(slot) = free.next() else {
                let error = crate::error::invalid("batched request", "no free slot".to_string());
                events[k].push(BatchEvent::Failed { id, error });
                continue;
            };
            if let Err(error) = self.select.set(slot, &stream.params) {
                events[k].push(BatchEvent::Failed { id, error });
                continue;
            }
            draws.push((k, id, stream, rows, slot));
        }
        if draws.is_empty() {
            return Ok(events.into_iter().flatten().collect());
        }
        // The draws' inputs: logits (a single row stands for both CFG rows: its guidance
        // weight is 0), histories (the start token), noise, parameters by slot.
        let mut rows_in = Vec::with_capacity(draws.len());
        let mut histories = Vec::with_capacity(draws.len());
        let mut noise = vec![0f32; draws.len() * vocab];
        let mut picked = Vec::with_capacity(draws.len());
        for (i, (_, _, stream, rows, slot)) in draws.iter_mut().enumerate() {
            let l = logits.narrow(0, rows.start, rows.len())?;
            rows_in.push(if rows.len() == r {
                l
            } else {
                l.broadcast_as((r, vocab))?.contiguous()?
            });
            histories.push(stream.step.history().mask().clone());
            if stream.sampler.is_random() {
                noise[i * vocab..(i + 1) * vocab].copy_from_slice(stream.sampler.next_noise());
            }
            picked.push(*slot as u32);
        }
        let k = draws.len();
        let sort = self.select.sorts(draws.iter().map(|d| &d.2.params));
        let (_, tokens) = self.select.select(
            &Tensor::cat(&rows_in, 0)?,
            r,
            &Tensor::cat(&histories, 0)?,
            &Tensor::from_vec(noise, (k, vocab), &dev)?,
            sort,
            Some(&Tensor::from_vec(picked, k, &dev)?),
        )?;
        let tokens = tokens.flatten_all()?.to_vec1::<u32>()?;
        // Each draw as `TokenStream::next` takes it: an invalid row fails, English stops on the
        // stop token (Turbo never on its first), and the limit ends it.
        let mut seats = Vec::with_capacity(k);
        for ((idx, id, mut stream, rows, slot), token) in draws.into_iter().zip(tokens) {
            if token as usize >= vocab {
                let error = T3Error::NoValidToken { step: 0 };
                events[idx].push(BatchEvent::Failed { id, error });
                continue;
            }
            stream.drawn += 1;
            events[idx].push(BatchEvent::Token { id, token });
            let eos = !stream.turbo && Some(token) == stream.stop_token;
            if eos || stream.drawn >= stream.max_tokens {
                events[idx].push(BatchEvent::Finished {
                    id,
                    stopped_on_eos: eos,
                });
                continue;
            }
            seats.push((idx, id, stream, rows, slot, token));
        }
        // Keys and values: one copy per cache for each run of requests whose rows follow each
        // other in the prefill call and whose slots follow each other (positions past a
        // request's prompt are padding, masked until its steps overwrite them).
        let mut i = 0;
        while i < seats.len() {
            let mut j = i + 1;
            while j < seats.len()
                && seats[j].4 == seats[j - 1].4 + 1
                && seats[j].3.start == seats[j - 1].3.end
                && seats[j].3.len() == r
                && seats[i].3.len() == r
            {
                j += 1;
            }
            let run = &seats[i..j];
            let len = run.iter().map(|s| s.2.prefix_len).max().unwrap_or(0);
            let src = run[0].3.start..run[j - i - 1].3.end;
            let copied = self.buf.caches.iter().zip(caches).try_for_each(|(dst, c)| {
                dst.copy_rows_from(c, src.clone(), len, run[0].4 * r, (j - i) * r)
            });
            if let Err(e) = copied {
                let msg = e.to_string();
                for (idx, id, ..) in seats.drain(i..j) {
                    let error = crate::error::invalid("batched request", msg.clone());
                    events[idx].push(BatchEvent::Failed { id, error });
                }
                continue;
            }
            i = j;
        }
        for (idx, id, stream, _, slot, token) in seats {
            if let Err(error) = self.seat_history(&stream, slot) {
                events[idx].push(BatchEvent::Failed { id, error });
                continue;
            }
            self.slots[slot] = Some(Slot::new(id, &stream, token));
        }
        Ok(events.into_iter().flatten().collect())
    }

    fn check_room(&self, max_tokens: usize) -> Result<()> {
        if !self.has_room() {
            return Err(crate::error::invalid(
                "batched request",
                format!("all {} slots are taken (check has_room)", self.opts.slots),
            ));
        }
        if max_tokens >= self.opts.positions {
            return Err(T3Error::SequenceTooLong {
                what: "batch slot positions",
                len: max_tokens,
                max: self.opts.positions,
            });
        }
        Ok(())
    }

    fn check_positions(&self, stream: &TokenStream<'_>) -> Result<()> {
        let need = stream.prefix_len + stream.max_tokens;
        if need > self.opts.positions {
            return Err(T3Error::SequenceTooLong {
                what: "batch slot positions",
                len: need,
                max: self.opts.positions,
            });
        }
        Ok(())
    }

    fn admit(&mut self, stream: TokenStream<'a>) -> Result<(RequestId, Vec<BatchEvent>)> {
        self.check_positions(&stream)?;
        let id = self.next_id;
        self.next_id += 1;
        let caches = stream.step.caches().to_vec();
        let rows = 0..stream.step.batch();
        let events = self.draw_and_seat(id, stream, (&caches, rows))?;
        Ok((id, events))
    }

    /// A prefilled request's first draw, then its seat in a free slot (its keys and values
    /// are `kv`'s rows, positions `0..prefix_len`) unless it already ended.
    fn draw_and_seat(
        &mut self,
        id: RequestId,
        mut stream: TokenStream<'a>,
        kv: (&[KvCache], std::ops::Range<usize>),
    ) -> Result<Vec<BatchEvent>> {
        let mut events = Vec::new();
        let first = match stream.next() {
            None => {
                events.push(BatchEvent::Finished {
                    id,
                    stopped_on_eos: false,
                });
                return Ok(events);
            }
            Some(Err(e)) => return Err(e),
            Some(Ok(t)) => t,
        };
        events.push(BatchEvent::Token { id, token: first });
        if stream.finished || stream.drawn >= stream.max_tokens {
            events.push(BatchEvent::Finished {
                id,
                stopped_on_eos: stream.stopped_on_eos,
            });
            return Ok(events);
        }
        let slot =
            self.slots.iter().position(Option::is_none).ok_or_else(|| {
                crate::error::invalid("batched request", "no free slot".to_string())
            })?;
        self.seat(&stream, kv, slot)?;
        self.slots[slot] = Some(Slot::new(id, &stream, first));
        Ok(events)
    }

    /// Moves a prefilled stream's device state into `slot` (its keys and values from `kv`).
    fn seat(
        &self,
        stream: &TokenStream<'_>,
        (caches, rows): (&[KvCache], std::ops::Range<usize>),
        slot: usize,
    ) -> Result<()> {
        let r = self.rows_per_slot;
        for (dst, src) in self.buf.caches.iter().zip(caches) {
            dst.copy_rows_from(src, rows.clone(), stream.prefix_len, slot * r, r)?;
        }
        self.seat_history(stream, slot)?;
        self.select.set(slot, &stream.params)
    }

    /// Writes the token history `slot`'s repetition penalty sees after `stream`'s first draw.
    fn seat_history(&self, stream: &TokenStream<'_>, slot: usize) -> Result<()> {
        let row = if stream.turbo {
            // inference_turbo's processors see only the tokens generated after the first
            Tensor::zeros((1, self.vocab), DType::U32, self.model.device())?
        } else {
            stream.step.history().mask().clone()
        };
        Ok(self.buf.history.slice_set(&row, 0, slot)?)
    }

    /// Slots a step runs over: the highest occupied one, rounded up to a power of two (the
    /// graph's slot-count bucket), at most all of them.
    fn span(&self) -> usize {
        let hi = self
            .slots
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |i| i + 1);
        hi.next_power_of_two().min(self.opts.slots)
    }

    /// One batched decode step for every occupied slot: each feeds its latest token and draws
    /// the next. Returns the events (a token per request, and its end when it ended); a
    /// request that ended has left its slot. Nothing happens without requests.
    pub fn step(&mut self) -> Result<Vec<BatchEvent>> {
        let n = self.span();
        if n == 0 {
            return Ok(Vec::new());
        }
        let vocab = self.vocab;
        let mut longest = 0;
        for (i, slot) in self.slots.iter_mut().take(n).enumerate() {
            let row = &mut self.host_inputs[i * 3..i * 3 + 3];
            let noise = &mut self.host_noise[i * vocab..(i + 1) * vocab];
            match slot {
                Some(s) => {
                    row.copy_from_slice(&[s.pending, s.seq_pos() as u32, s.speech_pos() as u32]);
                    longest = longest.max(s.seq_pos());
                    if s.sampler.is_random() {
                        noise.copy_from_slice(s.sampler.next_noise());
                    } else {
                        noise.fill(0.0);
                    }
                }
                None => {
                    row.fill(0);
                    noise.fill(0.0);
                }
            }
        }
        let dev = self.model.device().clone();
        let inputs = Tensor::from_slice(&self.host_inputs[..n * 3], (n, 3), &dev)?;
        self.buf.inputs.slice_set(&inputs, 0, 0)?;
        let noise = Tensor::from_slice(&self.host_noise[..n * vocab], (n, vocab), &dev)?;
        self.buf.noise.slice_set(&noise, 0, 0)?;
        let size = self.opts.bucket;
        let attend = (longest + 1)
            .div_ceil(size)
            .saturating_mul(size)
            .min(self.opts.positions);
        self.run(n, attend, longest)?;
        // While the device runs the step: every slot's next noise, slots in parallel (a slot
        // that ends with this step discards its draw with its sampler).
        self.prefetch_noise();
        let tokens = self
            .buf
            .token
            .narrow(0, 0, n)?
            .flatten_all()?
            .to_vec1::<u32>()?;
        let mut events = Vec::new();
        for (i, &token) in tokens.iter().enumerate() {
            let Some(s) = self.slots[i].as_mut() else {
                continue;
            };
            s.fed += 1;
            let id = s.id;
            if token as usize >= vocab {
                let ev = if s.turbo {
                    tracing::warn!("all processed logits are -inf: generation stops");
                    BatchEvent::Finished {
                        id,
                        stopped_on_eos: false,
                    }
                } else {
                    BatchEvent::Failed {
                        id,
                        error: T3Error::NoValidToken { step: s.drawn },
                    }
                };
                events.push(ev);
                self.slots[i] = None;
                continue;
            }
            s.drawn += 1;
            events.push(BatchEvent::Token { id, token });
            let eos = Some(token) == s.stop_token;
            if eos || s.drawn >= s.max_tokens {
                events.push(BatchEvent::Finished {
                    id,
                    stopped_on_eos: eos,
                });
                self.slots[i] = None;
            } else {
                s.pending = token;
            }
        }
        Ok(events)
    }

    /// Computes each occupied slot's next Gumbel noise now ([`Sampler::prefetch`]), spread over
    /// rayon's threads: with dozens of requests the host's `-ln(-ln u)` over every slot's
    /// vocabulary costs milliseconds, which this overlaps with the device's step.
    fn prefetch_noise(&mut self) {
        use rayon::prelude::*;
        self.slots.par_iter_mut().for_each(|slot| {
            if let Some(s) = slot {
                s.sampler.prefetch();
            }
        });
    }

    /// Drops a request (e.g. its client went away); its slot is free for the next one.
    /// Returns whether it was decoding or queued.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        if let Some(i) = self.queue.iter().position(|(q, _)| *q == id) {
            self.queue.remove(i);
            return true;
        }
        match self
            .slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.id == id))
        {
            Some(i) => {
                self.slots[i] = None;
                true
            }
            None => false,
        }
    }

    /// Forward and select over the first `n` slots (graph replay or capture when on).
    fn run(&mut self, n: usize, attend: usize, longest: usize) -> Result<()> {
        let sort = self
            .select
            .sorts(self.slots.iter().take(n).flatten().map(|s| &s.params));
        #[cfg(feature = "cuda")]
        if self.graphs_on {
            let key = (n, attend, sort);
            if let Some((_, g)) = self.graphs.iter().find(|(k, _)| *k == key) {
                return Ok(g.launch()?);
            }
            let dev = self.model.device().clone();
            let (model, rows, buf, select) =
                (self.model, self.rows_per_slot, &mut self.buf, &self.select);
            let mut eager =
                || Self::forward_select(model, rows, buf, select, (n, attend, sort), longest);
            match crate::graph::cuda::capture(&dev, &mut eager)? {
                Some(g) => {
                    tracing::debug!(
                        slots = n,
                        attend,
                        sort,
                        "captured a batched T3 decode graph"
                    );
                    self.graphs.push((key, g));
                }
                None => self.graphs_on = false,
            }
            return Ok(());
        }
        Self::forward_select(
            self.model,
            self.rows_per_slot,
            &mut self.buf,
            &self.select,
            (n, attend, sort),
            longest,
        )
    }

    /// The capturable step: reads only device buffers (and host sizes that key the graph).
    fn forward_select(
        model: &T3,
        rows_per_slot: usize,
        buf: &mut Buffers,
        select: &BatchSelect,
        (n, attend, sort): (usize, usize, bool),
        longest: usize,
    ) -> Result<()> {
        let rows = n * rows_per_slot;
        let inputs = buf.inputs.narrow(0, 0, n)?;
        let token = inputs.narrow(1, 0, 1)?.contiguous()?;
        let seq_pos = inputs.narrow(1, 1, 1)?;
        let speech_pos = inputs.narrow(1, 2, 1)?.contiguous()?.flatten_all()?;
        let history = buf.history.narrow(0, 0, n)?;
        history.scatter_set(&token, &buf.ones.narrow(0, 0, n)?, 1)?;
        let embed = model.speech_step_embed(&token.flatten_all()?, &speech_pos)?;
        let c = embed.dim(2)?;
        // `[1, n, C]` -> one row per CFG row: `[n * rows_per_slot, 1, C]`
        let embed = embed
            .reshape((n, 1, c))?
            .broadcast_as((n, rows_per_slot, c))?
            .contiguous()?
            .reshape((rows, 1, c))?;
        let row_pos = seq_pos
            .broadcast_as((n, rows_per_slot))?
            .contiguous()?
            .reshape(rows)?;
        let valid = buf
            .arange
            .narrow(0, 0, attend)?
            .unsqueeze(0)?
            .broadcast_le(&row_pos.unsqueeze(1)?)?;
        let mask = valid
            .where_cond(
                &buf.mask_zero.broadcast_as((rows, attend))?,
                &buf.mask_ninf.broadcast_as((rows, attend))?,
            )?
            .reshape((rows, 1, 1, attend))?;
        let (_, heads, head_dim) = model.backbone().cache_shape();
        let step = StepIndex::new(
            longest,
            &row_pos,
            (rows, heads, head_dim),
            attend,
            Some(mask),
        )?;
        let mut caches = buf
            .caches
            .iter()
            .map(|c| c.first_rows(rows))
            .collect::<Result<Vec<_>>>()?;
        let hidden = model.backbone().decode(&embed, &step, &mut caches)?;
        let logits = model.speech_logits(&hidden)?;
        buf.logits.slice_set(&logits, 0, 0)?;
        let (processed, token) = select.select(
            &buf.logits.narrow(0, 0, rows)?,
            rows_per_slot,
            &history,
            &buf.noise.narrow(0, 0, n)?,
            sort,
            None,
        )?;
        buf.processed.slice_set(&processed, 0, 0)?;
        buf.token.slice_set(&token, 0, 0)?;
        Ok(())
    }

    /// Raw speech-head logits of the latest step, `[slots × rows_per_slot, vocab]` (slot-major;
    /// rows of free slots hold garbage).
    pub fn logits(&self) -> &Tensor {
        &self.buf.logits
    }

    /// Processed scores of the latest step, `[slots, vocab]`.
    pub fn processed_logits(&self) -> &Tensor {
        &self.buf.processed
    }

    /// The slot a request occupies (`None` once it ended).
    pub fn slot_of(&self, id: RequestId) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.id == id))
    }

    /// The device.
    pub fn device(&self) -> &Device {
        self.model.device()
    }
}
