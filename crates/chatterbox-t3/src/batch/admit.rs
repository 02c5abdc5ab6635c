//! Admission: a request joins a [`BatchDecoder`] alone ([`BatchDecoder::admit_generate`],
//! prefilled and seated at once) or queued ([`BatchDecoder::queue_generate`], then
//! [`BatchDecoder::admit_queued`]: one prefill call over the queued prompts, right-padded, and
//! their first draws in one batched select), and moves its caches, history and parameters into
//! a free slot unless it ended on its first token.
#[cfg(doc)]
use super::BatchOptions;
use super::{BatchDecoder, BatchEvent, RequestId, Slot};
use crate::backbone::KvCache;
use crate::generate::{GenerateOptions, Prefill, TokenStream, TurboOptions};
#[cfg(doc)]
use crate::t3::T3;
use crate::{Result, T3Error};
use candle_core::{DType, Tensor};

/// A request's options: English or multilingual ([`T3::generate`]'s) or Turbo or Nano
/// ([`T3::generate_turbo`]'s).
#[derive(Clone, Copy)]
enum RequestOptions<'o> {
    Generate(&'o GenerateOptions),
    Turbo(&'o TurboOptions),
}

impl<'a> BatchDecoder<'a> {
    /// Starts an English or multilingual request (the arguments of [`T3::generate`]): prefills
    /// it, draws its first token, and seats it in a free slot unless it already ended. The
    /// alignment-stream analyzer is not batched (run such a request with [`T3::generate`]).
    pub fn admit_generate(
        &mut self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &GenerateOptions,
    ) -> Result<(RequestId, Vec<BatchEvent>)> {
        self.admit(cond_emb, text_tokens, RequestOptions::Generate(opts))
    }

    /// Starts a Turbo or Nano request (the arguments of [`T3::generate_turbo`]); see
    /// [`BatchDecoder::admit_generate`].
    pub fn admit_turbo(
        &mut self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &TurboOptions,
    ) -> Result<(RequestId, Vec<BatchEvent>)> {
        self.admit(cond_emb, text_tokens, RequestOptions::Turbo(opts))
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
        self.enqueue(cond_emb, text_tokens, RequestOptions::Generate(opts))
    }

    /// Queues a Turbo or Nano request; see [`BatchDecoder::queue_generate`].
    pub fn queue_turbo(
        &mut self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &TurboOptions,
    ) -> Result<RequestId> {
        self.enqueue(cond_emb, text_tokens, RequestOptions::Turbo(opts))
    }

    /// A request's stream, its prompt run as `prefill` says, once it is known to fit: not with
    /// the alignment-stream analyzer, with a slot free, and with room for its prompt and
    /// tokens in one.
    fn start(
        &self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: RequestOptions<'_>,
        prefill: Prefill,
    ) -> Result<TokenStream<'a>> {
        let stream = match opts {
            RequestOptions::Generate(opts) => {
                if opts.alignment.is_some() {
                    return Err(crate::error::invalid(
                        "batched request",
                        "the alignment-stream analyzer runs only in a request of its own \
                         (T3::generate)"
                            .to_string(),
                    ));
                }
                self.check_room(opts.max_new_tokens)?;
                self.model
                    .start_generate(cond_emb, text_tokens, opts, prefill)?
            }
            RequestOptions::Turbo(opts) => {
                self.check_room(opts.max_gen_len + 1)?;
                self.model
                    .start_turbo(cond_emb, text_tokens, opts, prefill)?
            }
        };
        self.check_positions(&stream)?;
        Ok(stream)
    }

    /// A new request's id.
    fn next_id(&mut self) -> RequestId {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Starts a request, prefilled alone, and draws and seats it
    /// ([`BatchDecoder::admit_generate`]).
    fn admit(
        &mut self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: RequestOptions<'_>,
    ) -> Result<(RequestId, Vec<BatchEvent>)> {
        let stream = self.start(cond_emb, text_tokens, opts, Prefill::Only)?;
        let id = self.next_id();
        let caches = stream.step.caches().to_vec();
        let rows = 0..stream.step.batch();
        let events = self.draw_and_seat(id, stream, (&caches, rows))?;
        Ok((id, events))
    }

    /// Starts a request with its prefill deferred and queues it
    /// ([`BatchDecoder::queue_generate`]).
    fn enqueue(
        &mut self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: RequestOptions<'_>,
    ) -> Result<RequestId> {
        let stream = self.start(cond_emb, text_tokens, opts, Prefill::Deferred)?;
        let id = self.next_id();
        self.queue.push((id, stream));
        Ok(id)
    }

    /// Admits queued requests, first come first served: one prefill call over as many as
    /// [`BatchOptions::prefill_positions`] allows (at least one), then their first draws
    /// (one batched select, each row with its request's parameters and generator), and each
    /// one's seat in a slot unless it already ended. Returns their events (a token each, an
    /// end, or a failure: a failed prefill fails every request of the call). Nothing happens
    /// with an empty queue.
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
}
