//! The analyzer wired into a generation, as the multilingual `T3.inference` did: hooks on the
//! aligned heads during the prefill and every decode step, `step` right after the CFG combine
//! and before the repetition penalty, with the latest token of the sequence.
//!
//! It drives the [`DecodeStep`]'s buffers itself (the same ops as [`DecodeStep::prefill`],
//! [`DecodeStep::forward`] and [`DecodeStep::select`], plus the attention weights of the aligned
//! heads and the logits edits), so the plain decode step stays untouched when the analyzer is
//! off. Its KV caches are views of the step's caches (same storage).
use super::analyzer::{
    logit_edit, AlignmentAnalysisResult, AlignmentAnalyzerConfig, AlignmentStreamAnalyzer,
};
use crate::backbone::{Backbone, KvCache, LlamaModel, StepIndex};
use crate::decode::DecodeStep;
use crate::sampling::{LogitsProcessorList, TokenPicker};
use crate::t3::T3;
use crate::Result;
use candle_core::{DType, Tensor};

/// The analyzer of one generation and the device state it needs.
#[derive(Debug)]
pub(crate) struct AlignmentRun {
    analyzer: AlignmentStreamAnalyzer,
    pairs: Vec<(usize, usize)>,
    caches: Vec<KvCache>,
    cfg_weight: Option<Tensor>,
    /// Attention of the aligned heads over the text span from the latest forward, f32
    /// `[heads, rows, S]`.
    pending: Option<Tensor>,
    /// The latest id of the sequence (`generated_ids[0, -1]`).
    last_token: u32,
    last: Option<AlignmentAnalysisResult>,
    /// Whether the steps' edits are applied to the logits ([`AlignmentAnalyzerConfig::edit_logits`]).
    edit_logits: bool,
    /// The analyzer's text position at each step, one per token drawn.
    positions: Vec<usize>,
}

fn llama(model: &T3) -> Result<&LlamaModel> {
    match model.backbone() {
        Backbone::Llama(m) => Ok(m),
        Backbone::Gpt2(_) => Err(crate::error::invalid(
            "alignment analyzer",
            "needs a Llama backbone (English or multilingual T3)".to_string(),
        )),
    }
}

impl AlignmentRun {
    /// Runs the prompt `embeds` `[batch, T, C]` (as [`DecodeStep::prefill`] does) with the
    /// aligned heads spied on, and keeps their rows after the text (`text_tokens_slice.1..T`)
    /// for the first analyzer step. The text must follow the `len_cond` conditioning
    /// positions. `step` must be fresh (empty caches).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        model: &T3,
        step: &DecodeStep,
        cfg: &AlignmentAnalyzerConfig,
        embeds: &Tensor,
        len_cond: usize,
        text_tokens_slice: (usize, usize),
        cfg_weight: Option<f32>,
    ) -> Result<Self> {
        let m = llama(model)?;
        let c = m.config();
        let (layers, heads) = (c.num_hidden_layers, c.num_attention_heads);
        if cfg.aligned_heads.is_empty() {
            return Err(crate::error::invalid(
                "alignment analyzer",
                "no aligned heads".to_string(),
            ));
        }
        if let Some(&(l, h)) = cfg
            .aligned_heads
            .iter()
            .find(|&&(l, h)| l >= layers || h >= heads)
        {
            return Err(crate::error::invalid(
                "alignment analyzer",
                format!(
                    "aligned head ({l}, {h}) outside a backbone of {layers} layers x {heads} heads"
                ),
            ));
        }
        let t = embeds.dim(1)?;
        let (i, j) = text_tokens_slice;
        if !(len_cond <= i && i < j && j < t) {
            return Err(crate::error::invalid(
                "alignment analyzer",
                format!("text span {i}..{j} in a prompt of {t} (conditioning {len_cond})"),
            ));
        }
        let dev = model.device();
        let mut run = Self {
            analyzer: AlignmentStreamAnalyzer::new(
                text_tokens_slice,
                model.config().stop_speech_token,
            ),
            pairs: cfg.aligned_heads.clone(),
            caches: step.caches().to_vec(),
            cfg_weight: cfg_weight.map(|w| Tensor::new(&[[w]], dev)).transpose()?,
            pending: None,
            last_token: model.config().start_speech_token,
            last: None,
            edit_logits: cfg.edit_logits,
            positions: Vec::new(),
        };
        // DecodeStep::prefill, spying on the aligned heads in the rows after the text.
        let (hidden, weights) = m.prefill_with_attention(embeds, &mut run.caches, &run.pairs, j)?;
        let last = hidden.dim(1)? - 1;
        let logits = model.speech_logits(&hidden.narrow(1, last, 1)?)?;
        step.logits().slice_set(&logits, 0, 0)?;
        run.pending = Some(run.text_span(&weights)?);
        Ok(run)
    }

    /// `[heads, rows, S]`: the text columns of the spied weights.
    fn text_span(&self, weights: &[Tensor]) -> Result<Tensor> {
        let (i, j) = self.analyzer.text_tokens_slice();
        let rows: Vec<Tensor> = weights
            .iter()
            .map(|w| w.narrow(1, i, j - i))
            .collect::<candle_core::Result<_>>()?;
        Ok(Tensor::stack(&rows, 0)?)
    }

    /// [`DecodeStep::forward`] at host position `pos` (eager, exact attention length) for the
    /// token already written with [`DecodeStep::set_inputs`], spying on the aligned heads.
    pub(crate) fn forward(
        &mut self,
        model: &T3,
        step: &DecodeStep,
        token: u32,
        pos: usize,
    ) -> Result<()> {
        let m = llama(model)?;
        let inputs = step.inputs();
        let token_dev = inputs.narrow(0, 0, 1)?;
        let seq_pos = inputs.narrow(0, 1, 1)?;
        let speech_pos = inputs.narrow(0, 2, 1)?;
        step.history().push(&token_dev.reshape((1, 1))?)?;
        let embed = model.speech_step_embed(&token_dev, &speech_pos)?;
        let c = embed.dim(2)?;
        let batch = step.batch();
        let embed = embed.broadcast_as((batch, 1, c))?.contiguous()?;
        let (_, heads, head_dim) = model.backbone().cache_shape();
        let index = StepIndex::new(pos, &seq_pos, (batch, heads, head_dim), pos + 1, None)?;
        let (hidden, weights) =
            m.decode_with_attention(&embed, &index, &mut self.caches, &self.pairs)?;
        let logits = model.speech_logits(&hidden)?;
        step.logits().slice_set(&logits, 0, 0)?;
        self.pending = Some(self.text_span(&weights)?);
        self.last_token = token;
        Ok(())
    }

    /// [`DecodeStep::select`] with the analyzer's step between the CFG combine and the logits
    /// processors (its edits only with [`AlignmentAnalyzerConfig::edit_logits`]). Reads the
    /// aligned heads' text-span rows to the host.
    pub(crate) fn select(
        &mut self,
        step: &DecodeStep,
        processors: &LogitsProcessorList,
        picker: &TokenPicker,
    ) -> Result<()> {
        let logits = step.logits();
        let scores = match &self.cfg_weight {
            Some(w) => {
                let cond = logits.narrow(0, 0, 1)?;
                let uncond = logits.narrow(0, 1, 1)?;
                (&cond + (cond.sub(&uncond)?).broadcast_mul(w)?)?
            }
            None => logits.narrow(0, 0, 1)?,
        };
        let pending = self.pending.take().ok_or_else(|| {
            crate::error::invalid(
                "alignment analyzer",
                "a step without a new forward".to_string(),
            )
        })?;
        let (heads, rows, _) = pending.dims3()?;
        let chunk = pending
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let result = self
            .analyzer
            .step(&chunk, heads, rows, Some(self.last_token));
        self.last = Some(result);
        self.positions.push(result.position);
        let scores = if self.edit_logits {
            if result.token_repetition {
                tracing::warn!("alignment analyzer: token {} repeated", self.last_token);
            }
            if result.eos_forced {
                tracing::warn!(
                    long_tail = result.long_tail,
                    alignment_repetition = result.repetition,
                    token_repetition = result.token_repetition,
                    "alignment analyzer: forcing EOS"
                );
            }
            self.edit(&scores, &result)?
        } else {
            scores
        };
        let processed = processors.process(step.history(), &scores)?;
        step.processed().slice_set(&processed, 0, 0)?;
        let token = picker.pick(&processed, step.noise())?;
        step.token().slice_set(&token, 0, 0)?;
        Ok(())
    }

    /// The logits edits of a step, on the device.
    fn edit(&self, scores: &Tensor, result: &AlignmentAnalysisResult) -> Result<Tensor> {
        let eos = self.analyzer.eos_idx() as usize;
        let dev = scores.device();
        let (value, base) = if result.eos_forced {
            let v = logit_edit();
            (
                v,
                Tensor::full(-v, scores.dims(), dev)?.to_dtype(scores.dtype())?,
            )
        } else if result.eos_suppressed {
            (-logit_edit(), scores.copy()?)
        } else {
            return Ok(scores.clone());
        };
        let v = Tensor::new(&[[value]], dev)?.to_dtype(scores.dtype())?;
        base.slice_set(&v, 1, eos)?;
        Ok(base)
    }

    /// The latest step's result.
    pub(crate) fn last_result(&self) -> Option<&AlignmentAnalysisResult> {
        self.last.as_ref()
    }

    /// The analyzer state.
    pub(crate) fn analyzer(&self) -> &AlignmentStreamAnalyzer {
        &self.analyzer
    }

    /// The text position of every step so far.
    pub(crate) fn positions(&self) -> &[usize] {
        &self.positions
    }
}
