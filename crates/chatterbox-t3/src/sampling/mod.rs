//! Sampling: transformers' logits processors as device ops, the token history they read, and
//! the draw itself (Gumbel-max with noise from a seedable host generator, or argmax).
#[cfg(feature = "cuda")]
pub(crate) mod cuda_probs_filter;
#[cfg(feature = "cuda")]
pub(crate) mod cuda_top_k_top_p;
mod cumsum;
mod history;
pub(crate) mod processors;

pub use cumsum::BlockCumsum;
pub use history::TokenHistory;
pub use processors::{
    LogitsProcessor, LogitsProcessorList, MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
};

use crate::Result;
use candle_core::{Device, Tensor, D};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, SeedableRng};

/// How the next token is drawn from the processed logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// The most likely token (argmax); the reference with `torch.multinomial` replaced by
    /// argmax. Deterministic, for tests.
    Greedy,
    /// A draw from `softmax(processed logits)` with a generator seeded by the value: the same
    /// seed reproduces a run on the same device. (Not the same draws as `torch.multinomial`,
    /// which differ between torch versions anyway.)
    Seeded(u64),
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling::Seeded(0)
    }
}

/// The host side of a draw: Gumbel noise for `argmax(logits + g)` (an exact sample of
/// `softmax(logits)`), from a xoshiro256++ generator, or zeros for [`Sampling::Greedy`].
#[derive(Debug, Clone)]
pub struct Sampler {
    rng: Option<Xoshiro256PlusPlus>,
    noise: Vec<f32>,
    /// Whether `noise` already holds the next draw's values ([`Sampler::prefetch`]).
    ready: bool,
}

impl Sampler {
    /// A sampler for `vocab` logits.
    pub fn new(sampling: Sampling, vocab: usize) -> Self {
        Self {
            rng: match sampling {
                Sampling::Greedy => None,
                Sampling::Seeded(seed) => Some(Xoshiro256PlusPlus::seed_from_u64(seed)),
            },
            noise: vec![0.0; vocab],
            ready: false,
        }
    }

    /// Whether draws are random.
    pub fn is_random(&self) -> bool {
        self.rng.is_some()
    }

    /// The noise of the next draw (`-ln(-ln u)`, `u` uniform in (0, 1)).
    pub fn next_noise(&mut self) -> &[f32] {
        if !self.ready {
            self.fill();
        }
        self.ready = false;
        &self.noise
    }

    /// Computes the noise of the next draw now (the generator's sequence is unchanged), so
    /// that the host work overlaps a step that is running on the device.
    pub fn prefetch(&mut self) {
        if !self.ready {
            self.fill();
            self.ready = true;
        }
    }

    fn fill(&mut self) {
        if let Some(rng) = &mut self.rng {
            for g in self.noise.iter_mut() {
                // 24 random bits, centred in their bin: u in (0, 1), never 0 or 1.
                let u = ((rng.next_u32() >> 8) as f32 + 0.5) * (1.0 / 16_777_216.0);
                *g = -(-u.ln()).ln();
            }
        }
    }
}

/// The device side of a draw: `argmax(processed + noise)` as u32 `[1, 1]`, or `vocab` (one
/// past the last id) when every processed score is `-inf`.
#[derive(Debug, Clone)]
pub struct TokenPicker {
    neg_inf: Tensor,
    invalid: Tensor,
}

impl TokenPicker {
    /// Constants for a `vocab`-wide draw on `dev`.
    pub fn new(vocab: usize, dev: &Device) -> Result<Self> {
        Ok(Self {
            neg_inf: Tensor::new(&[[f32::NEG_INFINITY]], dev)?,
            invalid: Tensor::new(&[[vocab as u32]], dev)?,
        })
    }

    /// Picks from `[1, vocab]` processed scores with `[1, vocab]` noise.
    pub fn pick(&self, processed: &Tensor, noise: &Tensor) -> Result<Tensor> {
        let token = (processed + noise)?.argmax_keepdim(D::Minus1)?;
        let valid = processed
            .max_keepdim(D::Minus1)?
            .broadcast_gt(&self.neg_inf)?;
        Ok(valid.where_cond(&token, &self.invalid)?)
    }
}
