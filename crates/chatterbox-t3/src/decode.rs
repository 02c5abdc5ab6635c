//! The decode step with static buffers: what one generated token costs, laid out so the same
//! code runs eagerly (CPU, Metal, CUDA) and can be captured once into a CUDA graph and replayed.
//!
//! Per-step inputs live in device tensors written before each step ([`DecodeStep::set_inputs`],
//! [`DecodeStep::set_noise`]); the step itself ([`DecodeStep::forward`] then
//! [`DecodeStep::select`]) only reads positions from those tensors (RoPE rows, position
//! embeddings and KV-cache writes are device-side gathers and scatters), and writes its results
//! into buffers allocated up front ([`DecodeStep::logits`], [`DecodeStep::processed`],
//! [`DecodeStep::token`]). The prefill runs eagerly.
use crate::backbone::{KvCache, StepIndex};
use crate::sampling::{LogitsProcessorList, TokenHistory, TokenPicker};
use crate::t3::T3;
use crate::Result;
use candle_core::{DType, Device, Tensor};

/// How many cache positions a step's attention reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionSpan {
    /// Exactly the positions written so far (`pos + 1`): eager execution, no mask.
    Exact,
    /// A fixed number of positions (a graph's length bucket, `>= pos + 1`), with the unwritten
    /// tail masked on the device from the step's position.
    Bucket(usize),
}

/// Buffers and caches of one generation (batch 2 with CFG, else 1).
#[derive(Debug)]
pub struct DecodeStep {
    batch: usize,
    vocab: usize,
    /// u32 `[3]`: input token id, sequence position, speech position (row of the learned
    /// speech position table; unused by GPT-2).
    inputs: Tensor,
    /// f32 `[1, vocab]`: noise added before the argmax (zeros for greedy).
    noise: Tensor,
    /// f32 `[batch, vocab]`: speech-head logits of the latest forward.
    logits: Tensor,
    /// f32 `[1, vocab]`: the latest processed (CFG-combined, filtered) scores.
    processed: Tensor,
    /// u32 `[1, 1]`: the latest drawn token (`vocab` if none was valid).
    token: Tensor,
    caches: Vec<KvCache>,
    history: TokenHistory,
    /// f32 `[1, 1]` CFG weight (batch 2 only).
    cfg_weight: Option<Tensor>,
    /// Constants of the masked (bucket) attention: positions `0..capacity` (u32), and the
    /// values of a valid and of a masked score.
    arange: Tensor,
    mask_zero: Tensor,
    mask_ninf: Tensor,
    /// Host copy of the position written by `set_inputs`.
    pos: usize,
}

impl DecodeStep {
    /// Allocates everything for `batch` rows, `capacity` sequence positions and `vocab` logits.
    /// `cfg_weight` must be given exactly when `batch == 2`.
    pub fn new(model: &T3, batch: usize, capacity: usize, cfg_weight: Option<f32>) -> Result<Self> {
        let dev = model.device();
        let vocab = model.config().speech_tokens_dict_size;
        if (batch == 2) != cfg_weight.is_some() || batch == 0 || batch > 2 {
            return Err(crate::error::invalid(
                "decode batch",
                format!("batch {batch} with cfg_weight {cfg_weight:?}"),
            ));
        }
        Ok(Self {
            batch,
            vocab,
            inputs: Tensor::zeros(3, DType::U32, dev)?,
            noise: Tensor::zeros((1, vocab), DType::F32, dev)?,
            logits: Tensor::zeros((batch, vocab), DType::F32, dev)?,
            processed: Tensor::zeros((1, vocab), DType::F32, dev)?,
            token: Tensor::zeros((1, 1), DType::U32, dev)?,
            caches: model
                .backbone()
                .new_caches(batch, capacity, model.dtype(), dev)?,
            history: TokenHistory::new(vocab, dev)?,
            cfg_weight: cfg_weight.map(|w| Tensor::new(&[[w]], dev)).transpose()?,
            arange: Tensor::arange(0u32, capacity as u32, dev)?,
            mask_zero: Tensor::zeros(1, DType::F32, dev)?,
            mask_ninf: Tensor::new(&[f32::NEG_INFINITY], dev)?,
            pos: 0,
        })
    }

    /// Rows run per step (2 with CFG).
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Sequence positions the caches hold.
    pub fn capacity(&self) -> usize {
        self.arange.dims()[0]
    }

    /// The per-layer KV caches.
    pub fn caches(&self) -> &[KvCache] {
        &self.caches
    }

    /// The ids the repetition penalty sees.
    pub fn history(&self) -> &TokenHistory {
        &self.history
    }

    /// The input buffer, u32 `[token, sequence position, speech position]` (graph input).
    pub fn inputs(&self) -> &Tensor {
        &self.inputs
    }

    /// The noise buffer, f32 `[1, vocab]` (graph input).
    pub fn noise(&self) -> &Tensor {
        &self.noise
    }

    /// Raw speech-head logits `[batch, vocab]` of the latest forward (graph output).
    pub fn logits(&self) -> &Tensor {
        &self.logits
    }

    /// Processed scores `[1, vocab]` the latest token was drawn from (graph output).
    pub fn processed(&self) -> &Tensor {
        &self.processed
    }

    /// The latest drawn token, u32 `[1, 1]` (graph output).
    pub fn token(&self) -> &Tensor {
        &self.token
    }

    /// Runs the prompt `[batch, T, C]` through the backbone (eager, from position 0) and
    /// leaves the logits of its last position in [`DecodeStep::logits`].
    ///
    /// The CFG rows share their conditioning prefix, but it is run for both rows: on the CPU
    /// one GEMM of `2T` rows beats a `P`-row one plus a `2(T - P)`-row one (candle's GEMM runs
    /// a 34-row product at less than half its 196-row rate; English prefill 1050 against
    /// 1313 ms on the 2-core dev box), and it is what the reference computes.
    pub fn prefill(&mut self, model: &T3, embeds: &Tensor) -> Result<()> {
        for c in self.caches.iter_mut() {
            c.reset();
        }
        let t = embeds.dim(1)?;
        let hidden = model.backbone().prefill(embeds, &mut self.caches, None)?;
        let last = hidden.dim(1)? - 1;
        let logits = model.speech_logits(&hidden.narrow(1, last, 1)?)?;
        self.logits.slice_set(&logits, 0, 0)?;
        self.pos = t;
        Ok(())
    }

    /// Writes the next step's inputs (eager write into the fixed buffer; a graph runner
    /// replaces this with a raw host-to-device copy into the same storage).
    pub fn set_inputs(&mut self, token: u32, seq_pos: usize, speech_pos: usize) -> Result<()> {
        let dev = self.inputs.device().clone();
        let v = Tensor::new(&[token, seq_pos as u32, speech_pos as u32], &dev)?;
        self.inputs.slice_set(&v, 0, 0)?;
        self.pos = seq_pos;
        Ok(())
    }

    /// Writes the noise of the next draw (`vocab` values).
    pub fn set_noise(&mut self, noise: &[f32]) -> Result<()> {
        let dev = self.noise.device().clone();
        let v = Tensor::from_slice(noise, (1, noise.len()), &dev)?;
        self.noise.slice_set(&v, 1, 0)?;
        Ok(())
    }

    /// The capturable model part of a step: records the input token in the history, embeds it
    /// at its speech position, runs the backbone at its sequence position (KV written in place)
    /// and writes the speech-head logits into [`DecodeStep::logits`].
    pub fn forward(&mut self, model: &T3, span: AttentionSpan) -> Result<()> {
        self.forward_hidden(model, span).map(|_| ())
    }

    /// The step's indices for `span` at the device-side position `seq_pos`.
    fn step_index(&self, span: AttentionSpan, seq_pos: &Tensor) -> Result<StepIndex> {
        let (_, heads, _, head_dim) = match self.caches.first() {
            Some(c) => c.keys_buffer().dims4()?,
            None => {
                return Err(crate::error::invalid(
                    "decode step",
                    "a model without layers",
                ))
            }
        };
        let (attend, mask) = match span {
            AttentionSpan::Exact => (self.pos + 1, None),
            AttentionSpan::Bucket(n) if n > self.pos && n <= self.capacity() => {
                (n, Some(self.mask(n, seq_pos)?))
            }
            AttentionSpan::Bucket(n) => {
                return Err(crate::error::invalid(
                    "attention bucket",
                    format!(
                        "{n} positions for step at {} (capacity {})",
                        self.pos,
                        self.capacity()
                    ),
                ))
            }
        };
        StepIndex::new(
            self.pos,
            seq_pos,
            (self.batch, heads, head_dim),
            attend,
            mask,
        )
    }

    /// [`DecodeStep::forward`] that also returns the final-norm hidden state of every row,
    /// `[batch, 1, C]` (the logits are written as usual; the returned tensor is a step-local
    /// value, so read it eagerly, not from a replayed graph).
    pub fn forward_hidden(&mut self, model: &T3, span: AttentionSpan) -> Result<Tensor> {
        let token = self.inputs.narrow(0, 0, 1)?;
        let seq_pos = self.inputs.narrow(0, 1, 1)?;
        let speech_pos = self.inputs.narrow(0, 2, 1)?;
        self.history.push(&token.reshape((1, 1))?)?;
        let embed = model.speech_step_embed(&token, &speech_pos)?;
        let c = embed.dim(2)?;
        let embed = embed.broadcast_as((self.batch, 1, c))?.contiguous()?;
        let step = self.step_index(span, &seq_pos)?;
        let hidden = model.backbone().decode(&embed, &step, &mut self.caches)?;
        let logits = model.speech_logits(&hidden)?;
        self.logits.slice_set(&logits, 0, 0)?;
        Ok(hidden)
    }

    /// `[1, 1, 1, n]` additive mask: 0 up to the device-side position, `-inf` after.
    fn mask(&self, n: usize, seq_pos: &Tensor) -> Result<Tensor> {
        let valid = self.arange.narrow(0, 0, n)?.broadcast_le(seq_pos)?;
        let z = self.mask_zero.broadcast_as(n)?;
        let ninf = self.mask_ninf.broadcast_as(n)?;
        Ok(valid.where_cond(&z, &ninf)?.reshape((1, 1, 1, n))?)
    }

    /// The capturable sampling part: CFG combine (`cond + w · (cond − uncond)`), the logits
    /// processors, then `argmax(processed + noise)` into [`DecodeStep::token`].
    pub fn select(&mut self, processors: &LogitsProcessorList, picker: &TokenPicker) -> Result<()> {
        let scores = match &self.cfg_weight {
            Some(w) => {
                let cond = self.logits.narrow(0, 0, 1)?;
                let uncond = self.logits.narrow(0, 1, 1)?;
                (&cond + (cond.sub(&uncond)?).broadcast_mul(w)?)?
            }
            None => self.logits.narrow(0, 0, 1)?,
        };
        let processed = processors.process(&self.history, &scores)?;
        self.processed.slice_set(&processed, 0, 0)?;
        let token = picker.pick(&processed, &self.noise)?;
        self.token.slice_set(&token, 0, 0)?;
        Ok(())
    }

    /// Reads the drawn token to the host (the one sync per step); `None` when no score was
    /// finite.
    pub fn read_token(&self) -> Result<Option<u32>> {
        let t = self.token.flatten_all()?.to_vec1::<u32>()?;
        Ok(t.first().copied().filter(|&t| (t as usize) < self.vocab))
    }

    /// The device the buffers live on.
    pub fn device(&self) -> &Device {
        self.inputs.device()
    }
}
