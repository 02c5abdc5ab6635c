//! The sampling part of a batched decode step: the CFG combine, each variant's logits
//! processors and the Gumbel-max draw for many requests at once, each row with its own
//! parameters. The same tensor ops as [`crate::sampling`]'s processors applied to one row
//! (transformers' generation/logits_process.py), so every row gives what its request gives on
//! its own; the parameters live in device tensors written in place when a request joins, so a
//! captured CUDA graph stays valid whoever occupies a slot.
use crate::sampling::processors::arg_sort_last_dim;
use crate::sampling::BlockCumsum;
use crate::{Result, T3Error};
use candle_core::{DType, Device, Tensor, D};

/// The sampling parameters of one request, in the form the batched processors read: a
/// processor the request skips gets its identity value (temperature 1, top-k over the whole
/// vocabulary, top-p threshold 0, penalty 1, min-p 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RowParams {
    /// CFG weight (0 without CFG: `cond + 0 · (cond − uncond)` is `cond` for finite logits).
    pub cfg_weight: f32,
    pub repetition_penalty: f32,
    pub temperature: f32,
    pub min_p: f32,
    /// `1 - top_p` as the reference compares it.
    pub top_p_threshold: f32,
    /// Whether top-p applies (Turbo skips it at 1.0; the English order always runs it).
    pub top_p_on: bool,
    /// Tokens top-k keeps (the vocabulary when off).
    pub top_k: usize,
}

/// The processor order of a variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// `T3.inference`: repetition penalty, temperature, min-p, top-p.
    English,
    /// `T3.inference_turbo`: temperature, top-k, top-p, repetition penalty.
    Turbo,
}

/// Per-slot parameter tensors and the constants of the batched processors.
#[derive(Debug)]
pub(crate) struct BatchSelect {
    order: Order,
    vocab: usize,
    cfg_weight: Tensor,
    penalty: Tensor,
    temperature: Tensor,
    min_p: Tensor,
    threshold: Tensor,
    /// u8 `[slots, 1]`: 1 where top-p applies.
    top_p_on: Tensor,
    /// u32 `[slots, 1]`: `top_k - 1`, the descending-order index of the k-th score.
    kth: Tensor,
    /// u32 `[1, vocab]`: `vocab - 1, ..., 0`, reverses a sort order.
    reverse: Tensor,
    /// u8 `[1, vocab]`: 1 except the last (top-p always keeps the most likely token).
    keep_last: Tensor,
    zero: Tensor,
    neg_inf: Tensor,
    /// u32 `[slots, 1]` of `vocab`: the token of a row with no finite score.
    invalid: Tensor,
    cumsum: BlockCumsum,
}

fn f32_col(n: usize, v: f32, dev: &Device) -> Result<Tensor> {
    Ok(Tensor::full(v, (n, 1), dev)?)
}

/// Checks the ranges the single-request processors check.
fn check(p: &RowParams) -> Result<()> {
    let bad = |name, value: f32, reason| T3Error::InvalidSampling {
        name,
        value: value as f64,
        reason,
    };
    if p.repetition_penalty.is_nan() || p.repetition_penalty <= 0.0 {
        return Err(bad(
            "repetition_penalty",
            p.repetition_penalty,
            "must be a strictly positive float",
        ));
    }
    if p.temperature.is_nan() || p.temperature <= 0.0 {
        return Err(bad(
            "temperature",
            p.temperature,
            "must be a strictly positive float",
        ));
    }
    if !(0.0..=1.0).contains(&p.min_p) {
        return Err(bad("min_p", p.min_p, "must be in [0, 1]"));
    }
    if !(0.0..=1.0).contains(&p.top_p_threshold) {
        return Err(bad("top_p", 1.0 - p.top_p_threshold, "must be in [0, 1]"));
    }
    if p.top_k == 0 {
        return Err(bad("top_k", 0.0, "must be a strictly positive integer"));
    }
    if !p.cfg_weight.is_finite() {
        return Err(bad("cfg_weight", p.cfg_weight, "must be finite"));
    }
    Ok(())
}

impl BatchSelect {
    pub(crate) fn new(order: Order, slots: usize, vocab: usize, dev: &Device) -> Result<Self> {
        let mut keep = vec![1u8; vocab];
        if let Some(last) = keep.last_mut() {
            *last = 0;
        }
        Ok(Self {
            order,
            vocab,
            cfg_weight: f32_col(slots, 0.0, dev)?,
            penalty: f32_col(slots, 1.0, dev)?,
            temperature: f32_col(slots, 1.0, dev)?,
            min_p: f32_col(slots, 0.0, dev)?,
            threshold: f32_col(slots, 0.0, dev)?,
            top_p_on: Tensor::zeros((slots, 1), DType::U8, dev)?,
            kth: Tensor::full(vocab as u32 - 1, (slots, 1), dev)?,
            reverse: Tensor::from_vec((0..vocab as u32).rev().collect::<Vec<_>>(), vocab, dev)?,
            keep_last: Tensor::from_vec(keep, (1, vocab), dev)?,
            zero: Tensor::new(&[[0f32]], dev)?,
            neg_inf: Tensor::new(&[[f32::NEG_INFINITY]], dev)?,
            invalid: Tensor::full(vocab as u32, (slots, 1), dev)?,
            cumsum: BlockCumsum::new(vocab, dev)?,
        })
    }

    /// Writes `slot`'s parameters in place (the tensors keep their storage).
    pub(crate) fn set(&self, slot: usize, p: &RowParams) -> Result<()> {
        check(p)?;
        let dev = self.penalty.device();
        let put = |t: &Tensor, v: f32| -> Result<()> {
            Ok(t.slice_set(&Tensor::new(&[[v]], dev)?, 0, slot)?)
        };
        put(&self.cfg_weight, p.cfg_weight)?;
        put(&self.penalty, p.repetition_penalty)?;
        put(&self.temperature, p.temperature)?;
        put(&self.min_p, p.min_p)?;
        put(&self.threshold, p.top_p_threshold)?;
        self.top_p_on
            .slice_set(&Tensor::new(&[[p.top_p_on as u8]], dev)?, 0, slot)?;
        let k = p.top_k.min(self.vocab) as u32 - 1;
        self.kth.slice_set(&Tensor::new(&[[k]], dev)?, 0, slot)?;
        Ok(())
    }

    /// Whether a step over rows with `params` sorts the scores: Turbo always does (top-k);
    /// the English order only when a row has `top_p < 1` (at 1 the top-p rule drops exactly
    /// the zero-probability tokens, found without sorting, as
    /// [`crate::sampling::TopPLogitsWarper`] does).
    pub(crate) fn sorts<'p>(&self, mut params: impl Iterator<Item = &'p RowParams>) -> bool {
        self.order == Order::Turbo || params.any(|p| p.top_p_threshold > 0.0)
    }

    /// The rows of a per-slot tensor that a call runs over: the first `n`, or the slots of
    /// `picked` (u32 `[n]`).
    fn rows(t: &Tensor, n: usize, picked: Option<&Tensor>) -> Result<Tensor> {
        Ok(match picked {
            Some(slots) => t.index_select(slots, 0)?,
            None => t.narrow(0, 0, n)?,
        })
    }

    /// CFG-combines `logits` (`[n * rows_per_slot, vocab]`), runs the processors with each
    /// slot's parameters and history (`[n, vocab]` u32 mask) and draws `argmax(processed +
    /// noise)`: returns the processed scores `[n, vocab]` and the tokens u32 `[n, 1]` (`vocab`
    /// for a row without a finite score). Row `i` has the parameters of slot `i`, or of slot
    /// `picked[i]` when `picked` (u32 `[n]`) is given.
    pub(crate) fn select(
        &self,
        logits: &Tensor,
        rows_per_slot: usize,
        history: &Tensor,
        noise: &Tensor,
        sort: bool,
        picked: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let n = history.dim(0)?;
        let rows = |t: &Tensor| Self::rows(t, n, picked);
        let scores = if rows_per_slot == 2 {
            let l = logits.reshape((n, 2, self.vocab))?;
            let cond = l.narrow(1, 0, 1)?.squeeze(1)?;
            let uncond = l.narrow(1, 1, 1)?.squeeze(1)?;
            (&cond + (cond.sub(&uncond)?).broadcast_mul(&rows(&self.cfg_weight)?)?)?
        } else {
            logits.clone()
        };
        let processed = match self.order {
            Order::English => {
                let s = self.penalty(&scores, history, &rows(&self.penalty)?)?;
                let s = s.broadcast_div(&rows(&self.temperature)?)?;
                let s = self.min_p(&s, &rows(&self.min_p)?)?;
                if sort {
                    self.top_p(&s, None, &rows(&self.threshold)?)?
                } else {
                    let probs = candle_nn::ops::softmax_last_dim(&s.contiguous()?)?;
                    let remove = probs.broadcast_le(&self.zero)?;
                    self.mask_fill(&remove, &s)?
                }
            }
            Order::Turbo => {
                let s = scores.broadcast_div(&rows(&self.temperature)?)?;
                let (s, ascending) = self.top_k(&s, &rows(&self.kth)?)?;
                let p = self.top_p(&s, Some(&ascending), &rows(&self.threshold)?)?;
                let on = rows(&self.top_p_on)?.broadcast_as(s.shape())?;
                let s = on.where_cond(&p, &s)?;
                self.penalty(&s, history, &rows(&self.penalty)?)?
            }
        };
        let token = (&processed + noise)?.argmax_keepdim(D::Minus1)?;
        let valid = processed
            .max_keepdim(D::Minus1)?
            .broadcast_gt(&self.neg_inf)?;
        let token = valid.where_cond(&token, &rows(&self.invalid)?)?;
        Ok((processed, token))
    }

    fn mask_fill(&self, remove: &Tensor, scores: &Tensor) -> Result<Tensor> {
        let ninf = self.neg_inf.broadcast_as(scores.shape())?;
        Ok(remove.where_cond(&ninf, scores)?)
    }

    /// `RepetitionPenaltyLogitsProcessor` with a per-row penalty.
    fn penalty(&self, scores: &Tensor, history: &Tensor, penalty: &Tensor) -> Result<Tensor> {
        let neg = scores.broadcast_lt(&self.zero)?;
        let pen = neg.where_cond(
            &scores.broadcast_mul(penalty)?,
            &scores.broadcast_div(penalty)?,
        )?;
        Ok(history.where_cond(&pen, scores)?)
    }

    /// `MinPLogitsWarper` with a per-row `min_p`.
    fn min_p(&self, scores: &Tensor, min_p: &Tensor) -> Result<Tensor> {
        let probs = candle_nn::ops::softmax_last_dim(&scores.contiguous()?)?;
        let top = probs.max_keepdim(D::Minus1)?;
        let thr = top.broadcast_mul(min_p)?;
        let remove = probs.broadcast_lt(&thr)?;
        self.mask_fill(&remove, scores)
    }

    /// `TopKLogitsWarper` with a per-row `k`; also the ascending order of the input (what the
    /// top-p that follows needs, as [`crate::sampling::TopKLogitsWarper::then_top_p`] does).
    fn top_k(&self, scores: &Tensor, kth: &Tensor) -> Result<(Tensor, Tensor)> {
        let scores = scores.contiguous()?;
        let order = arg_sort_last_dim(&scores, false)?;
        let kth_id = order.gather(&kth.contiguous()?, D::Minus1)?;
        let kth = scores.gather(&kth_id, D::Minus1)?;
        let remove = scores.broadcast_lt(&kth)?;
        let filtered = self.mask_fill(&remove, &scores)?;
        let ascending = order.index_select(&self.reverse, 1)?;
        Ok((filtered, ascending))
    }

    /// `TopPLogitsWarper` with a per-row threshold (the sorted rule of
    /// [`crate::sampling::TopPLogitsWarper`]; a threshold of 0 drops exactly the tokens of zero
    /// probability, as that warper does at `top_p = 1`).
    fn top_p(
        &self,
        scores: &Tensor,
        ascending: Option<&Tensor>,
        threshold: &Tensor,
    ) -> Result<Tensor> {
        let scores = scores.contiguous()?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let order = match ascending {
            Some(o) => o.clone(),
            None => arg_sort_last_dim(&scores, true)?,
        };
        let sorted = probs.gather(&order, D::Minus1)?;
        let cum = self.cumsum.forward(&sorted)?;
        let removed = cum
            .broadcast_le(threshold)?
            .broadcast_mul(&self.keep_last)?
            .to_dtype(DType::F32)?
            .sum_keepdim(D::Minus1)?
            .to_dtype(DType::U32)?;
        let first_kept = order.gather(&removed, D::Minus1)?;
        let kept_min = scores.gather(&first_kept, D::Minus1)?;
        let remove = scores.broadcast_lt(&kept_min)?;
        self.mask_fill(&remove, &scores)
    }
}
