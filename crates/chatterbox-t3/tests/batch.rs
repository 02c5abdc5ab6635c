//! Continuous batching equals solo runs: on the tiny parity models, requests of different
//! texts, lengths and sampling options join a [`BatchDecoder`] at different steps (admitted
//! alone, or queued and prefilled together in calls of a few padded positions), and each
//! one's tokens must be exactly those of its own [`T3::generate`] / [`T3::generate_turbo`].
use candle_core::Tensor;
use chatterbox_t3::{
    BatchDecoder, BatchEvent, BatchOptions, GenerateOptions, RequestId, Sampling, T3Error,
    TurboOptions, T3,
};
use proptest::prelude::*;
use std::collections::HashMap;

#[path = "common/fixtures.rs"]
mod fixtures;

use fixtures::{cond_emb, ids, model};

type R<T> = anyhow::Result<T>;

/// One request of a test: its text and options, and when it joins.
#[derive(Debug, Clone)]
struct Req {
    /// Text tokens without SOT/EOT (a prefix of the fixture's, rotated by `shift`).
    len: usize,
    shift: u32,
    seed: Option<u64>,
    cfg: bool,
    temperature: f32,
    top_p: f32,
    max: usize,
    /// Decoder steps run before it joins.
    join_after: usize,
}

fn req() -> impl Strategy<Value = Req> {
    (
        2usize..8,
        0u32..40,
        prop::option::of(0u64..1000),
        any::<bool>(),
        prop::sample::select(vec![0.5f32, 0.8, 1.0, 1.3]),
        prop::sample::select(vec![0.8f32, 0.95, 1.0]),
        1usize..14,
        0usize..10,
    )
        .prop_map(
            |(len, shift, seed, cfg, temperature, top_p, max, join_after)| Req {
                len,
                shift,
                seed,
                cfg,
                temperature,
                top_p,
                max,
                join_after,
            },
        )
}

struct Case {
    t3: T3,
    cond: Tensor,
    text: Vec<u32>,
    turbo: bool,
}

impl Case {
    fn new(name: &str) -> R<Self> {
        let (t3, fx) = model(name)?;
        let cond = cond_emb(&t3, &fx)?;
        let mut text = ids(&fx, "text_tokens")?;
        let turbo = name == "turbo";
        if !turbo {
            // drop SOT/EOT: each request pads its own text
            text = text[1..text.len() - 1].to_vec();
        }
        Ok(Self {
            t3,
            cond,
            text,
            turbo,
        })
    }

    fn text(&self, r: &Req) -> Vec<u32> {
        let vocab = self.t3.config().text_tokens_dict_size as u32;
        let stop = self.t3.config().stop_text_token;
        let start = self.t3.config().start_text_token;
        let inner: Vec<u32> = (0..r.len)
            .map(|i| {
                let mut t = (self.text[i % self.text.len()] + r.shift) % vocab;
                while t == stop || t == start {
                    t = (t + 1) % vocab;
                }
                t
            })
            .collect();
        if self.turbo {
            inner
        } else {
            self.t3.pad_text_tokens(&inner)
        }
    }

    fn sampling(r: &Req) -> Sampling {
        r.seed.map_or(Sampling::Greedy, Sampling::Seeded)
    }

    fn english(r: &Req) -> GenerateOptions {
        let mut o = GenerateOptions::default();
        o.sampling = Self::sampling(r);
        o.max_new_tokens = r.max;
        o.cfg_weight = if r.cfg { 0.5 } else { 0.0 };
        o.temperature = r.temperature;
        o.top_p = r.top_p;
        o
    }

    fn turbo_opts(r: &Req) -> TurboOptions {
        let mut o = TurboOptions::default();
        o.sampling = Self::sampling(r);
        o.max_gen_len = r.max;
        o.temperature = r.temperature;
        o.top_p = r.top_p;
        o.top_k = if r.cfg { 50 } else { 1000 };
        o
    }

    fn solo(&self, r: &Req) -> R<Vec<u32>> {
        let text = self.text(r);
        let s = if self.turbo {
            self.t3
                .generate_turbo(&self.cond, &text, &Self::turbo_opts(r))?
        } else {
            self.t3.generate(&self.cond, &text, &Self::english(r))?
        };
        Ok(s.collect::<Result<_, T3Error>>()?)
    }

    fn admit(&self, b: &mut BatchDecoder<'_>, r: &Req) -> R<(RequestId, Vec<BatchEvent>)> {
        let text = self.text(r);
        Ok(if self.turbo {
            b.admit_turbo(&self.cond, &text, &Self::turbo_opts(r))?
        } else {
            b.admit_generate(&self.cond, &text, &Self::english(r))?
        })
    }

    fn queue(&self, b: &mut BatchDecoder<'_>, r: &Req) -> R<RequestId> {
        let text = self.text(r);
        Ok(if self.turbo {
            b.queue_turbo(&self.cond, &text, &Self::turbo_opts(r))?
        } else {
            b.queue_generate(&self.cond, &text, &Self::english(r))?
        })
    }

    /// Runs `reqs` through a decoder of `slots` slots, each joining after its `join_after`
    /// steps (or as soon as a slot is free); returns each request's tokens. With `queued`,
    /// requests are queued and each round admits one prefill call of at most 192 padded
    /// positions (two English prompts with their CFG rows, up to seven Turbo ones), the rest waiting for the next rounds.
    fn batched(&self, reqs: &[Req], slots: usize, queued: bool) -> R<Vec<Vec<u32>>> {
        let opts = BatchOptions::default()
            .with_slots(slots)
            .with_positions(256)
            .with_bucket(16)
            .with_prefill_positions(192);
        let mut b = BatchDecoder::new(&self.t3, opts)?;
        let mut out: Vec<Vec<u32>> = vec![Vec::new(); reqs.len()];
        let mut done = vec![false; reqs.len()];
        let mut who: HashMap<RequestId, usize> = HashMap::new();
        let mut waiting: Vec<usize> = (0..reqs.len()).collect();
        let mut steps = 0;
        let record = |events: Vec<BatchEvent>,
                      who: &HashMap<RequestId, usize>,
                      out: &mut Vec<Vec<u32>>,
                      done: &mut Vec<bool>|
         -> R<()> {
            for e in events {
                match e {
                    BatchEvent::Token { id, token } => out[who[&id]].push(token),
                    BatchEvent::Finished { id, .. } => done[who[&id]] = true,
                    BatchEvent::Failed { error, .. } => return Err(error.into()),
                }
            }
            Ok(())
        };
        while done.iter().any(|d| !d) {
            let mut i = 0;
            while i < waiting.len() {
                let r = &reqs[waiting[i]];
                if r.join_after <= steps && b.has_room() {
                    let k = waiting.remove(i);
                    if queued {
                        who.insert(self.queue(&mut b, &reqs[k])?, k);
                    } else {
                        let (id, events) = self.admit(&mut b, &reqs[k])?;
                        who.insert(id, k);
                        record(events, &who, &mut out, &mut done)?;
                    }
                } else {
                    i += 1;
                }
            }
            let events = b.admit_queued();
            record(events, &who, &mut out, &mut done)?;
            let events = b.step()?;
            record(events, &who, &mut out, &mut done)?;
            steps += 1;
            anyhow::ensure!(steps < 500, "the batch does not finish");
        }
        anyhow::ensure!(
            b.active() == 0 && b.queued() == 0,
            "slots still taken after every request ended"
        );
        Ok(out)
    }
}

fn check(case: &Case, reqs: &[Req], slots: usize) -> R<()> {
    let alone = case.batched(reqs, slots, false)?;
    let queued = case.batched(reqs, slots, true)?;
    for ((r, got), got_queued) in reqs.iter().zip(&alone).zip(&queued) {
        let want = case.solo(r)?;
        anyhow::ensure!(
            *got == want,
            "request {r:?}: batched {got:?} != solo {want:?}"
        );
        anyhow::ensure!(
            *got_queued == want,
            "request {r:?}: batched with queued admissions {got_queued:?} != solo {want:?}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn english_batches_equal_solo_runs(reqs in prop::collection::vec(req(), 1..6), slots in 1usize..5) {
        let case = Case::new("en").unwrap();
        check(&case, &reqs, slots).unwrap();
    }

    #[test]
    fn turbo_batches_equal_solo_runs(reqs in prop::collection::vec(req(), 1..6), slots in 1usize..5) {
        let case = Case::new("turbo").unwrap();
        check(&case, &reqs, slots).unwrap();
    }
}

#[test]
fn a_full_batch_with_greedy_and_seeded_rows_equals_solo_runs() -> R<()> {
    for name in ["en", "turbo"] {
        let case = Case::new(name)?;
        let reqs: Vec<Req> = (0..4)
            .map(|i| Req {
                len: 3 + i,
                shift: 7 * i as u32,
                seed: (i % 2 == 1).then_some(i as u64),
                cfg: i != 2,
                temperature: 0.8,
                top_p: if i == 3 { 0.9 } else { 1.0 },
                max: 12,
                join_after: i,
            })
            .collect();
        check(&case, &reqs, 4)?;
        // the same requests through one slot: they run one after another
        check(&case, &reqs, 1)?;
        // all at once: queued, they share prefill calls (English two a call within the
        // budget, the CFG-less one with them; Turbo all four in one)
        let together: Vec<Req> = reqs
            .iter()
            .map(|r| Req {
                join_after: 0,
                ..r.clone()
            })
            .collect();
        check(&case, &together, 4)?;
    }
    Ok(())
}

#[test]
fn bad_requests_are_refused_and_leave_the_batch_usable() -> R<()> {
    let case = Case::new("en")?;
    let mut b = BatchDecoder::new(
        &case.t3,
        BatchOptions::default().with_slots(1).with_positions(64),
    )?;
    let r = Req {
        len: 3,
        shift: 0,
        seed: None,
        cfg: true,
        temperature: 0.8,
        top_p: 1.0,
        max: 200,
        join_after: 0,
    };
    // more tokens than a slot holds
    let e = case.admit(&mut b, &r).unwrap_err();
    assert!(e.to_string().contains("batch slot positions"), "{e}");
    // a bad sampling option
    let mut o = Case::english(&Req {
        max: 5,
        ..r.clone()
    });
    o.temperature = -1.0;
    let e = b
        .admit_generate(&case.cond, &case.text(&r), &o)
        .unwrap_err();
    assert!(matches!(e, T3Error::InvalidSampling { .. }), "{e}");
    assert_eq!(b.active(), 0);
    // the decoder still serves; a second request waits for the slot
    let (_, ev) = case.admit(
        &mut b,
        &Req {
            max: 5,
            ..r.clone()
        },
    )?;
    assert_eq!(ev.len(), 1);
    assert!(!b.has_room());
    let e = case.admit(&mut b, &Req { max: 5, ..r }).unwrap_err();
    assert!(e.to_string().contains("slots are taken"), "{e}");
    assert!(BatchDecoder::new(&case.t3, BatchOptions::default().with_slots(0)).is_err());
    Ok(())
}

#[test]
fn queued_requests_hold_their_slots_and_are_prefilled_within_the_budget() -> R<()> {
    for name in ["en", "turbo"] {
        let case = Case::new(name)?;
        let r = |i: usize| Req {
            len: 3 + i,
            shift: i as u32,
            seed: Some(i as u64),
            cfg: true,
            temperature: 0.8,
            top_p: 1.0,
            max: 6,
            join_after: 0,
        };
        // a budget of one position: one request per call, first come first served
        let opts = BatchOptions::default()
            .with_slots(3)
            .with_positions(128)
            .with_prefill_positions(1);
        let mut b = BatchDecoder::new(&case.t3, opts.clone())?;
        let ids: Vec<RequestId> = (0..3)
            .map(|i| case.queue(&mut b, &r(i)))
            .collect::<R<_>>()?;
        assert!(!b.has_room(), "{name}: queued requests hold their slots");
        assert_eq!(b.active(), 0);
        let e = case.queue(&mut b, &r(3)).unwrap_err();
        assert!(e.to_string().contains("slots are taken"), "{name}: {e}");
        for (k, &id) in ids.iter().enumerate() {
            let ev = b.admit_queued();
            assert!(
                matches!(ev.first(), Some(BatchEvent::Token { id: got, .. }) if *got == id),
                "{name}: call {k} admitted {ev:?}, expected request {id} first"
            );
            assert_eq!(b.queued(), 2 - k, "{name}");
            assert_eq!(b.active(), k + 1, "{name}");
        }
        assert!(b.admit_queued().is_empty(), "{name}: nothing left to admit");
        // a budget for all of them: one call
        let mut b = BatchDecoder::new(&case.t3, opts.with_prefill_positions(4096))?;
        for i in 0..3 {
            case.queue(&mut b, &r(i))?;
        }
        let ev = b.admit_queued();
        assert_eq!(ev.len(), 3, "{name}: {ev:?}");
        assert_eq!((b.queued(), b.active()), (0, 3), "{name}");
        // a cancelled queued request leaves the queue and frees its slot
        let opts = BatchOptions::default().with_slots(1).with_positions(128);
        let mut b = BatchDecoder::new(&case.t3, opts)?;
        let id = case.queue(&mut b, &r(0))?;
        assert!(!b.has_room());
        assert!(b.cancel(id));
        assert!(b.has_room() && b.queued() == 0, "{name}");
        assert!(b.admit_queued().is_empty());
        // bad input is refused when queued
        let e = case.queue(&mut b, &Req { max: 5000, ..r(0) }).unwrap_err();
        assert!(e.to_string().contains("positions"), "{name}: {e}");
        assert_eq!(b.queued(), 0);
    }
    Ok(())
}
