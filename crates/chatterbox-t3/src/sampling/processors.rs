//! transformers 5.2's logits processors (generation/logits_process.py) as device tensor ops on
//! `[rows, vocab]` f32 scores: no host round trip, every constant allocated at construction
//! (so a captured CUDA graph can replay them).
use super::cumsum::BlockCumsum;
use super::history::TokenHistory;
use crate::{Result, T3Error};
use candle_core::{DType, Device, Tensor, D};

fn scalar(v: f32, dev: &Device) -> Result<Tensor> {
    Ok(Tensor::new(&[[v]], dev)?)
}

/// `scores.arg_sort_last_dim(ascending)`, on the host when `scores` is on a Metal device (or
/// too wide for CUDA's sort, below):
/// candle's Metal sort keeps a whole row in one threadgroup, which a vocabulary-sized row
/// (6563-8194 ids) overflows, and it returns wrong indices without an error
/// (huggingface/candle#2570). One `[1, vocab]` copy each way per step.
pub(crate) fn arg_sort_last_dim(scores: &Tensor, ascending: bool) -> Result<Tensor> {
    let dev = scores.device();
    // candle's CUDA sort also keeps a row (padded to a power of two) in shared memory: past
    // 8192 columns (English's 8194 ids) it needs 64 KiB, more than a launch may ask for
    // without opting in, and the launch fails (CUDA_ERROR_INVALID_VALUE).
    let too_wide = dev.is_cuda() && scores.dim(D::Minus1)? > 8192;
    if dev.is_metal() || too_wide {
        let host = scores.to_device(&Device::Cpu)?;
        return Ok(host.arg_sort_last_dim(ascending)?.to_device(dev)?);
    }
    Ok(scores.arg_sort_last_dim(ascending)?)
}

/// `scores.masked_fill(remove, -inf)`.
fn mask_fill(remove: &Tensor, scores: &Tensor, neg_inf: &Tensor) -> Result<Tensor> {
    let ninf = neg_inf.broadcast_as(scores.shape())?;
    Ok(remove.where_cond(&ninf, scores)?)
}

/// `RepetitionPenaltyLogitsProcessor`: each token id seen so far gets
/// `score < 0 ? score * penalty : score / penalty`, once however often it occurs.
#[derive(Debug, Clone)]
pub struct RepetitionPenaltyLogitsProcessor {
    penalty: Tensor,
    zero: Tensor,
}

impl RepetitionPenaltyLogitsProcessor {
    /// `penalty` must be strictly positive.
    pub fn new(penalty: f32, dev: &Device) -> Result<Self> {
        if penalty.is_nan() || penalty <= 0.0 {
            return Err(T3Error::InvalidSampling {
                name: "repetition_penalty",
                value: penalty as f64,
                reason: "must be a strictly positive float",
            });
        }
        Ok(Self {
            penalty: scalar(penalty, dev)?,
            zero: scalar(0.0, dev)?,
        })
    }

    /// Applies the penalty to the ids in `history`.
    pub fn process(&self, history: &TokenHistory, scores: &Tensor) -> Result<Tensor> {
        let shape = scores.shape();
        let neg = scores.broadcast_lt(&self.zero)?;
        let pen = neg.where_cond(
            &scores.broadcast_mul(&self.penalty)?,
            &scores.broadcast_div(&self.penalty)?,
        )?;
        Ok(history
            .mask()
            .broadcast_as(shape)?
            .where_cond(&pen, scores)?)
    }
}

/// `TemperatureLogitsWarper`: `scores / temperature` (a true division, as torch does).
#[derive(Debug, Clone)]
pub struct TemperatureLogitsWarper {
    temperature: Tensor,
}

impl TemperatureLogitsWarper {
    /// `temperature` must be strictly positive.
    pub fn new(temperature: f32, dev: &Device) -> Result<Self> {
        if temperature.is_nan() || temperature <= 0.0 {
            return Err(T3Error::InvalidSampling {
                name: "temperature",
                value: temperature as f64,
                reason: "must be a strictly positive float",
            });
        }
        Ok(Self {
            temperature: scalar(temperature, dev)?,
        })
    }

    /// Divides the scores.
    pub fn process(&self, scores: &Tensor) -> Result<Tensor> {
        Ok(scores.broadcast_div(&self.temperature)?)
    }
}

/// `MinPLogitsWarper`: drops tokens whose probability is below `min_p` times the top one
/// (the top token always stays: `min_p <= 1`).
#[derive(Debug, Clone)]
pub struct MinPLogitsWarper {
    min_p: Tensor,
    /// `min_p`'s value (the CUDA filter kernel's argument).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    min_p_f32: f32,
    neg_inf: Tensor,
}

impl MinPLogitsWarper {
    /// `min_p` must be in `[0, 1]`.
    pub fn new(min_p: f32, dev: &Device) -> Result<Self> {
        if !(0.0..=1.0).contains(&min_p) {
            return Err(T3Error::InvalidSampling {
                name: "min_p",
                value: min_p as f64,
                reason: "must be in [0, 1]",
            });
        }
        Ok(Self {
            min_p: scalar(min_p, dev)?,
            min_p_f32: min_p,
            neg_inf: scalar(f32::NEG_INFINITY, dev)?,
        })
    }

    /// Filters the scores.
    pub fn process(&self, scores: &Tensor) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if super::cuda_probs_filter::applies(scores) {
            use super::cuda_probs_filter::{filter, Filter};
            return Ok(filter(scores, Filter::MinP(self.min_p_f32))?);
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores.contiguous()?)?;
        let top = probs.max_keepdim(D::Minus1)?;
        let thr = top.broadcast_mul(&self.min_p)?;
        let remove = probs.broadcast_lt(&thr)?;
        mask_fill(&remove, scores, &self.neg_inf)
    }
}

/// `TopPLogitsWarper`: sorts ascending and drops the tokens whose cumulative probability is at
/// most `1 - top_p`, always keeping the most likely one. `top_p = 1` drops exactly the tokens
/// of zero probability (computed without sorting).
#[derive(Debug, Clone)]
pub struct TopPLogitsWarper {
    threshold: Tensor,
    /// `threshold`'s value (the CUDA top-k/top-p kernel's argument).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    threshold_f32: f32,
    keep_last: Tensor,
    neg_inf: Tensor,
    zero: Tensor,
    cumsum: Option<BlockCumsum>,
}

impl TopPLogitsWarper {
    /// `top_p` must be in `[0, 1]`; `vocab` sizes the constants.
    pub fn new(top_p: f32, vocab: usize, dev: &Device) -> Result<Self> {
        if !(0.0..=1.0).contains(&top_p) {
            return Err(T3Error::InvalidSampling {
                name: "top_p",
                value: top_p as f64,
                reason: "must be in [0, 1]",
            });
        }
        // transformers compares the f32 cumulative sums with the double `1 - top_p`, which
        // torch rounds to f32 for the comparison.
        let threshold = (1.0 - top_p as f64) as f32;
        let mut keep = vec![1u8; vocab];
        if let Some(last) = keep.last_mut() {
            *last = 0;
        }
        Ok(Self {
            threshold: scalar(threshold, dev)?,
            threshold_f32: threshold,
            keep_last: Tensor::from_vec(keep, (1, vocab), dev)?,
            neg_inf: scalar(f32::NEG_INFINITY, dev)?,
            zero: scalar(0.0, dev)?,
            cumsum: (top_p < 1.0)
                .then(|| BlockCumsum::new(vocab, dev))
                .transpose()?,
        })
    }

    /// Filters the scores.
    pub fn process(&self, scores: &Tensor) -> Result<Tensor> {
        self.process_sorted(scores, None)
    }

    /// [`TopPLogitsWarper::process`] with an ascending arg-sort of `scores` already at hand
    /// (any order among equal scores gives the same result here).
    fn process_sorted(&self, scores: &Tensor, ascending: Option<&Tensor>) -> Result<Tensor> {
        let scores = scores.contiguous()?;
        #[cfg(feature = "cuda")]
        if self.cumsum.is_none() && super::cuda_probs_filter::applies(&scores) {
            use super::cuda_probs_filter::{filter, Filter};
            return Ok(filter(&scores, Filter::Zero)?);
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let Some(cumsum) = &self.cumsum else {
            // cumsum <= 0 holds exactly for the ascending run of zero probabilities; the top
            // token has a positive probability, so `min_tokens_to_keep` never matters.
            let remove = probs.broadcast_le(&self.zero)?;
            return mask_fill(&remove, &scores, &self.neg_inf);
        };
        let order = match ascending {
            Some(o) => o.clone(),
            None => arg_sort_last_dim(&scores, true)?,
        };
        let sorted = probs.gather(&order, D::Minus1)?;
        let cum = cumsum.forward(&sorted)?;
        // The cumulative sums never decrease, so the removed tokens are a prefix of the
        // ascending order: count them and drop every token scoring below the first kept one
        // (a gather, where scattering the sorted mask back is a serial loop over the row in
        // candle's CUDA scatter: ~1 ms per step on an H100). The one difference: a token tied
        // with the first kept score is kept even where the sort put it in the removed prefix.
        let removed = cum
            .broadcast_le(&self.threshold)?
            .broadcast_mul(&self.keep_last)?
            .to_dtype(DType::F32)?
            .sum_keepdim(D::Minus1)?
            .to_dtype(DType::U32)?;
        let first_kept = order.gather(&removed, D::Minus1)?;
        let kept_min = scores.gather(&first_kept, D::Minus1)?;
        let remove = scores.broadcast_lt(&kept_min)?;
        mask_fill(&remove, &scores, &self.neg_inf)
    }
}

/// `TopKLogitsWarper`: keeps the tokens scoring at least the `top_k`-th best (ties kept).
#[derive(Debug, Clone)]
pub struct TopKLogitsWarper {
    k: usize,
    neg_inf: Tensor,
    /// u32 `vocab - 1, ..., 0`: reverses a sort order.
    reverse: Tensor,
}

impl TopKLogitsWarper {
    /// `top_k` must be positive; it is clipped to the vocabulary.
    pub fn new(top_k: usize, vocab: usize, dev: &Device) -> Result<Self> {
        if top_k == 0 {
            return Err(T3Error::InvalidSampling {
                name: "top_k",
                value: 0.0,
                reason: "must be a strictly positive integer",
            });
        }
        Ok(Self {
            k: top_k.min(vocab),
            neg_inf: scalar(f32::NEG_INFINITY, dev)?,
            reverse: Tensor::from_vec((0..vocab as u32).rev().collect::<Vec<_>>(), vocab, dev)?,
        })
    }

    /// Filters the scores.
    pub fn process(&self, scores: &Tensor) -> Result<Tensor> {
        Ok(self.process_with_order(scores)?.0)
    }

    /// The filtered scores and a descending arg-sort of the input.
    fn process_with_order(&self, scores: &Tensor) -> Result<(Tensor, Tensor)> {
        let scores = scores.contiguous()?;
        let order = arg_sort_last_dim(&scores, false)?;
        let kth = scores.gather(
            &order.narrow(D::Minus1, self.k - 1, 1)?.contiguous()?,
            D::Minus1,
        )?;
        let remove = scores.broadcast_lt(&kth)?;
        Ok((mask_fill(&remove, &scores, &self.neg_inf)?, order))
    }

    /// Top-k, then `top_p` on its output with one arg-sort: the filtered scores are the input's
    /// top `k` (ties kept) and `-inf` elsewhere, all after the kept ones in the input's
    /// descending order, so that order reversed sorts the filtered scores ascending (ties
    /// aside, which top-p's result does not depend on). Same result as the two in a row.
    ///
    /// On CUDA (f32, `top_p < 1`) this is one kernel without a sort:
    /// `sampling/cuda_top_k_top_p.rs` (a private module, so no link).
    pub fn then_top_p(&self, top_p: &TopPLogitsWarper, scores: &Tensor) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if top_p.cumsum.is_some() && super::cuda_top_k_top_p::applies(scores) {
            return Ok(super::cuda_top_k_top_p::top_k_top_p(
                scores,
                self.k,
                top_p.threshold_f32,
            )?);
        }
        let (filtered, descending) = self.process_with_order(scores)?;
        let ascending = descending.index_select(&self.reverse, 1)?;
        top_p.process_sorted(&filtered, Some(&ascending))
    }
}

/// One processor of a [`LogitsProcessorList`].
#[derive(Debug, Clone)]
pub enum LogitsProcessor {
    /// See [`RepetitionPenaltyLogitsProcessor`].
    RepetitionPenalty(RepetitionPenaltyLogitsProcessor),
    /// See [`TemperatureLogitsWarper`].
    Temperature(TemperatureLogitsWarper),
    /// See [`MinPLogitsWarper`].
    MinP(MinPLogitsWarper),
    /// See [`TopPLogitsWarper`].
    TopP(TopPLogitsWarper),
    /// See [`TopKLogitsWarper`].
    TopK(TopKLogitsWarper),
}

impl LogitsProcessor {
    /// Applies the processor; `history` is the ids generated so far (repetition penalty).
    pub fn process(&self, history: &TokenHistory, scores: &Tensor) -> Result<Tensor> {
        match self {
            Self::RepetitionPenalty(p) => p.process(history, scores),
            Self::Temperature(p) => p.process(scores),
            Self::MinP(p) => p.process(scores),
            Self::TopP(p) => p.process(scores),
            Self::TopK(p) => p.process(scores),
        }
    }
}

/// Processors applied in order (transformers' `LogitsProcessorList`).
#[derive(Debug, Clone, Default)]
pub struct LogitsProcessorList(pub Vec<LogitsProcessor>);

impl LogitsProcessorList {
    /// The English/multilingual order of `T3.inference`: repetition penalty, temperature
    /// (skipped at 1.0), min-p, top-p.
    pub fn t3(
        repetition_penalty: f32,
        temperature: f32,
        min_p: f32,
        top_p: f32,
        vocab: usize,
        dev: &Device,
    ) -> Result<Self> {
        let mut v = vec![LogitsProcessor::RepetitionPenalty(
            RepetitionPenaltyLogitsProcessor::new(repetition_penalty, dev)?,
        )];
        if temperature != 1.0 {
            v.push(LogitsProcessor::Temperature(TemperatureLogitsWarper::new(
                temperature,
                dev,
            )?));
        }
        v.push(LogitsProcessor::MinP(MinPLogitsWarper::new(min_p, dev)?));
        v.push(LogitsProcessor::TopP(TopPLogitsWarper::new(
            top_p, vocab, dev,
        )?));
        Ok(Self(v))
    }

    /// The order of `T3.inference_turbo`: temperature (if > 0 and != 1), top-k (if > 0), top-p
    /// (if < 1), repetition penalty (if != 1).
    pub fn turbo(
        temperature: f32,
        top_k: usize,
        top_p: f32,
        repetition_penalty: f32,
        vocab: usize,
        dev: &Device,
    ) -> Result<Self> {
        let mut v = Vec::new();
        if temperature > 0.0 && temperature != 1.0 {
            v.push(LogitsProcessor::Temperature(TemperatureLogitsWarper::new(
                temperature,
                dev,
            )?));
        }
        if top_k > 0 {
            v.push(LogitsProcessor::TopK(TopKLogitsWarper::new(
                top_k, vocab, dev,
            )?));
        }
        if top_p < 1.0 {
            v.push(LogitsProcessor::TopP(TopPLogitsWarper::new(
                top_p, vocab, dev,
            )?));
        }
        if repetition_penalty != 1.0 {
            v.push(LogitsProcessor::RepetitionPenalty(
                RepetitionPenaltyLogitsProcessor::new(repetition_penalty, dev)?,
            ));
        }
        Ok(Self(v))
    }

    /// The probabilities after every processor: `softmax(process(history, scores))`, `[rows,
    /// vocab]` (what the draw samples from).
    pub fn probabilities(&self, history: &TokenHistory, scores: &Tensor) -> Result<Tensor> {
        let processed = self.process(history, scores)?;
        Ok(candle_nn::ops::softmax_last_dim(&processed.contiguous()?)?)
    }

    /// Applies every processor in order (a top-k directly followed by a top-p shares one
    /// arg-sort: [`TopKLogitsWarper::then_top_p`]).
    pub fn process(&self, history: &TokenHistory, scores: &Tensor) -> Result<Tensor> {
        let mut s = scores.clone();
        let mut i = 0;
        while i < self.0.len() {
            if let (LogitsProcessor::TopK(k), Some(LogitsProcessor::TopP(p))) =
                (&self.0[i], self.0.get(i + 1))
            {
                s = k.then_top_p(p, &s)?;
                i += 2;
                continue;
            }
            s = self.0[i].process(history, &s)?;
            i += 1;
        }
        Ok(s)
    }
}
