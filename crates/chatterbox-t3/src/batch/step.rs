//! A batched decode step: every occupied slot feeds its latest token at its own position and
//! draws its next one with its own processors, eagerly or as a CUDA graph captured per
//! (slot-count bucket, attention bucket, sorted scores) and replayed.
use super::select::BatchSelect;
use super::{BatchDecoder, BatchEvent, Buffers};
use crate::backbone::StepIndex;
use crate::t3::T3;
use crate::{Result, T3Error};
use candle_core::Tensor;

impl BatchDecoder<'_> {
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
}
