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
mod admit;
mod options;
mod select;
mod step;

pub use options::BatchOptions;
pub(crate) use select::RowParams;

use crate::backbone::KvCache;
use crate::generate::TokenStream;
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
