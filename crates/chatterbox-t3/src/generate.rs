//! Port of `T3.inference` and `T3.inference_turbo` (chatterbox/models/t3/t3.py, upstream
//! 5de7a54) as a token stream: one token per `next()`, so a pipeline can start on the first
//! tokens while T3 keeps generating.
use crate::alignment::{AlignmentAnalysisResult, AlignmentAnalyzerConfig, AlignmentRun};
use crate::batch::RowParams;
use crate::decode::{AttentionSpan, DecodeStep};
use crate::graph::DecodeGraphs;
use crate::sampling::{LogitsProcessorList, Sampler, Sampling, TokenPicker};
use crate::t3::T3;
use crate::{Result, T3Error};
use candle_core::Tensor;

/// Options of [`T3::generate`] / [`T3::inference`] (English and multilingual).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GenerateOptions {
    /// Most tokens generated (the stop token included). Default: `1000` (what `tts.py` passes).
    pub max_new_tokens: usize,
    /// Stop after the stop-of-speech token. The reference always stops (its `stop_on_eos`
    /// argument is unused); `false` generates exactly `max_new_tokens` (benchmarks).
    /// Default: `true`.
    pub stop_on_eos: bool,
    /// Softmax temperature (skipped at 1.0). Default: `0.8`.
    pub temperature: f32,
    /// Nucleus threshold; 1.0 still drops zero-probability tokens. Default: `1.0`
    /// (`ChatterboxTTS.generate`; `T3.inference`'s own default is 0.95).
    pub top_p: f32,
    /// Drop tokens below `min_p` times the top probability. Default: `0.05`.
    pub min_p: f32,
    /// Repetition penalty over every id generated so far, the start token included.
    /// Default: `1.2` (multilingual `generate`: 2.0, see [`GenerateOptions::multilingual`]).
    pub repetition_penalty: f32,
    /// Classifier-free guidance weight `w` in `cond + w · (cond − uncond)`; `0` runs one row.
    /// Default: `0.5`.
    pub cfg_weight: f32,
    /// How tokens are drawn. Default: `Sampling::Seeded(0)`.
    pub sampling: Sampling,
    /// On CUDA, replay each decode step as a CUDA graph (captured per attention bucket of
    /// [`DEFAULT_GRAPH_BUCKET`] positions); ignored on other devices. Default: `true`.
    pub cuda_graphs: bool,
    /// The multilingual alignment-stream analyzer (off by default): suppresses the stop token
    /// until the text is nearly read and forces it on a long tail, an alignment repetition or
    /// a token repeated twice in a row. When on, decode steps run eagerly (no CUDA graph), the
    /// attention of its three heads is computed alongside, and each step reads `3 × text_len`
    /// floats to the host. See [`AlignmentAnalyzerConfig`]. With
    /// [`AlignmentAnalyzerConfig::tracking`] it edits nothing and records the text position of
    /// every token ([`TokenStream::text_positions`]; captions' word timings): the tokens are
    /// those of the analyzer off (exactly on the CPU; on CUDA the steps run eagerly instead of
    /// as graphs over attention buckets, equal up to summation order).
    pub alignment: Option<AlignmentAnalyzerConfig>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_new_tokens: 1000,
            stop_on_eos: true,
            temperature: 0.8,
            top_p: 1.0,
            min_p: 0.05,
            repetition_penalty: 1.2,
            cfg_weight: 0.5,
            sampling: Sampling::default(),
            cuda_graphs: true,
            alignment: None,
        }
    }
}

impl GenerateOptions {
    /// Sets [`GenerateOptions::max_new_tokens`].
    pub fn with_max_new_tokens(mut self, max_new_tokens: usize) -> Self {
        self.max_new_tokens = max_new_tokens;
        self
    }

    /// Sets [`GenerateOptions::stop_on_eos`].
    pub fn with_stop_on_eos(mut self, stop_on_eos: bool) -> Self {
        self.stop_on_eos = stop_on_eos;
        self
    }

    /// Sets [`GenerateOptions::temperature`].
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = temperature;
        self
    }

    /// Sets [`GenerateOptions::top_p`].
    pub fn with_top_p(mut self, top_p: f32) -> Self {
        self.top_p = top_p;
        self
    }

    /// Sets [`GenerateOptions::min_p`].
    pub fn with_min_p(mut self, min_p: f32) -> Self {
        self.min_p = min_p;
        self
    }

    /// Sets [`GenerateOptions::repetition_penalty`].
    pub fn with_repetition_penalty(mut self, repetition_penalty: f32) -> Self {
        self.repetition_penalty = repetition_penalty;
        self
    }

    /// Sets [`GenerateOptions::cfg_weight`].
    pub fn with_cfg_weight(mut self, cfg_weight: f32) -> Self {
        self.cfg_weight = cfg_weight;
        self
    }

    /// Sets [`GenerateOptions::sampling`].
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Sets [`GenerateOptions::cuda_graphs`].
    pub fn with_cuda_graphs(mut self, cuda_graphs: bool) -> Self {
        self.cuda_graphs = cuda_graphs;
        self
    }

    /// Sets [`GenerateOptions::alignment`].
    pub fn with_alignment(mut self, alignment: Option<AlignmentAnalyzerConfig>) -> Self {
        self.alignment = alignment;
        self
    }

    /// The defaults of `ChatterboxMultilingualTTS.generate` (upstream 5de7a54): repetition
    /// penalty 2.0.
    pub fn multilingual() -> Self {
        Self {
            repetition_penalty: 2.0,
            ..Self::default()
        }
    }
}

/// Options of [`T3::generate_turbo`] / [`T3::inference_turbo`] (Turbo, Nano).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TurboOptions {
    /// Softmax temperature (skipped when 0 or 1). Default: `0.8`.
    pub temperature: f32,
    /// Keep the `top_k` best scores (0 disables). Default: `1000`.
    pub top_k: usize,
    /// Nucleus threshold (1.0 disables). Default: `0.95`.
    pub top_p: f32,
    /// Repetition penalty, applied last (1.0 disables). Default: `1.2`.
    pub repetition_penalty: f32,
    /// Decode steps after the first token (so at most `max_gen_len + 1` tokens).
    /// Default: `1000`.
    pub max_gen_len: usize,
    /// Stop after the stop-of-speech token; `false` runs all steps (benchmarks).
    /// Default: `true`.
    pub stop_on_eos: bool,
    /// How tokens are drawn. Default: `Sampling::Seeded(0)`.
    pub sampling: Sampling,
    /// On CUDA, replay each decode step as a CUDA graph (captured per attention bucket of
    /// [`DEFAULT_GRAPH_BUCKET`] positions); ignored on other devices. Default: `true`.
    pub cuda_graphs: bool,
}

impl Default for TurboOptions {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 1000,
            top_p: 0.95,
            repetition_penalty: 1.2,
            max_gen_len: 1000,
            stop_on_eos: true,
            sampling: Sampling::default(),
            cuda_graphs: true,
        }
    }
}

impl TurboOptions {
    /// Sets [`TurboOptions::temperature`].
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = temperature;
        self
    }

    /// Sets [`TurboOptions::top_k`].
    pub fn with_top_k(mut self, top_k: usize) -> Self {
        self.top_k = top_k;
        self
    }

    /// Sets [`TurboOptions::top_p`].
    pub fn with_top_p(mut self, top_p: f32) -> Self {
        self.top_p = top_p;
        self
    }

    /// Sets [`TurboOptions::repetition_penalty`].
    pub fn with_repetition_penalty(mut self, repetition_penalty: f32) -> Self {
        self.repetition_penalty = repetition_penalty;
        self
    }

    /// Sets [`TurboOptions::max_gen_len`].
    pub fn with_max_gen_len(mut self, max_gen_len: usize) -> Self {
        self.max_gen_len = max_gen_len;
        self
    }

    /// Sets [`TurboOptions::stop_on_eos`].
    pub fn with_stop_on_eos(mut self, stop_on_eos: bool) -> Self {
        self.stop_on_eos = stop_on_eos;
        self
    }

    /// Sets [`TurboOptions::sampling`].
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Sets [`TurboOptions::cuda_graphs`].
    pub fn with_cuda_graphs(mut self, cuda_graphs: bool) -> Self {
        self.cuda_graphs = cuda_graphs;
        self
    }
}

/// Attention-length bucket of the CUDA-graph decode path: each graph attends over a multiple
/// of this many positions (the unwritten tail masked), so one graph serves 256 steps.
pub const DEFAULT_GRAPH_BUCKET: usize = 256;

/// Speech tokens of one generation, one per `next()`, the stop token included when it is
/// drawn (then the stream ends). Created by [`T3::generate`] or [`T3::generate_turbo`].
///
/// Each `next()` feeds the previous token through the model (one decode step), then draws: the
/// first token comes from the prefill done at creation.
pub struct TokenStream<'a> {
    pub(crate) model: &'a T3,
    pub(crate) step: DecodeStep,
    pub(crate) processors: LogitsProcessorList,
    pub(crate) picker: TokenPicker,
    pub(crate) sampler: Sampler,
    pub(crate) prefix_len: usize,
    /// Speech position of the first fed token (English: 1; Turbo: unused).
    pub(crate) speech_pos_base: usize,
    pub(crate) turbo: bool,
    pub(crate) stop_token: Option<u32>,
    pub(crate) max_tokens: usize,
    pub(crate) drawn: usize,
    pub(crate) fed: usize,
    pub(crate) pending: Option<u32>,
    pub(crate) stopped_on_eos: bool,
    pub(crate) finished: bool,
    pub(crate) bucket: Option<usize>,
    pub(crate) graphs: Option<DecodeGraphs>,
    pub(crate) alignment: Option<AlignmentRun>,
    /// The sampling parameters, as a batched decoder's rows read them.
    pub(crate) params: RowParams,
    /// The prompt, when its prefill was left to the caller ([`Prefill::Deferred`]).
    pub(crate) unprefilled: Option<Tensor>,
}

/// How a new [`TokenStream`]'s prompt is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prefill {
    /// Caches for the whole generation, the prompt prefilled ([`T3::generate`]).
    Full,
    /// Caches of the prompt and one more position, the prompt prefilled (a batched decoder
    /// takes the rest).
    Only,
    /// Not run: the prompt is kept in [`TokenStream::unprefilled`] for the caller to prefill
    /// with other requests' ([`crate::BatchDecoder::queue_generate`]).
    Deferred,
}

impl Prefill {
    /// Cache positions for a prompt of `prefix_len` and `max` generated tokens.
    fn capacity(self, prefix_len: usize, max: usize) -> usize {
        match self {
            Self::Full => prefix_len + max.max(1),
            Self::Only => prefix_len + 1,
            Self::Deferred => 1,
        }
    }
}

impl<'a> TokenStream<'a> {
    /// Attends over fixed-size length buckets (multiples of `size`, capped at the cache
    /// capacity) with the unwritten tail masked on the device, instead of exactly the written
    /// positions: the static shapes a captured CUDA graph needs (one graph per bucket). Same
    /// results up to summation order.
    pub fn use_buckets(&mut self, size: usize) {
        self.bucket = (size > 0).then_some(size);
    }

    /// Replays decode steps as CUDA graphs over attention buckets of `bucket` positions (on a
    /// CUDA device; elsewhere, or with `bucket == 0`, steps stay eager). Returns whether graphs
    /// are on. The first step of each bucket runs eagerly and is captured; a failed capture
    /// falls back to eager decoding with a warning. Teacher forcing ([`TokenStream::feed`])
    /// always runs eagerly.
    pub fn use_cuda_graphs(&mut self, bucket: usize) -> bool {
        if self.alignment.is_some() {
            // the analyzer drives its own (eager) steps
            self.graphs = None;
            return false;
        }
        self.graphs = DecodeGraphs::for_step(&self.step, bucket);
        if let Some(g) = &self.graphs {
            self.bucket = Some(g.bucket());
        }
        self.graphs.is_some()
    }

    /// CUDA graphs captured so far (0 when decoding eagerly).
    pub fn cuda_graphs_captured(&self) -> usize {
        self.graphs.as_ref().map_or(0, |g| g.captured())
    }

    /// The buffers of the decode step (logits, processed scores, caches).
    pub fn step(&self) -> &DecodeStep {
        &self.step
    }

    /// Raw speech-head logits `[batch, vocab]` of the latest forward.
    pub fn logits(&self) -> &Tensor {
        self.step.logits()
    }

    /// Processed scores `[1, vocab]` the latest token was drawn from.
    pub fn processed_logits(&self) -> &Tensor {
        self.step.processed()
    }

    /// The distribution the latest token was drawn from: `softmax` of
    /// [`TokenStream::processed_logits`], f32 `[1, vocab]` (zero where a processor removed the
    /// token; the sampled token follows it exactly, greedy takes its argmax).
    pub fn probabilities(&self) -> Result<Tensor> {
        Ok(candle_nn::ops::softmax_last_dim(self.step.processed())?)
    }

    /// Tokens drawn so far.
    pub fn tokens_drawn(&self) -> usize {
        self.drawn
    }

    /// The alignment-stream analyzer's latest result (`None` when it is off).
    pub fn alignment_result(&self) -> Option<&AlignmentAnalysisResult> {
        self.alignment.as_ref().and_then(AlignmentRun::last_result)
    }

    /// The alignment-stream analyzer's state (`None` when it is off).
    pub fn alignment_analyzer(&self) -> Option<&crate::alignment::AlignmentStreamAnalyzer> {
        self.alignment.as_ref().map(AlignmentRun::analyzer)
    }

    /// The analyzer's text position (`text_position`: an index into the text span, 0 for the
    /// start-of-text token) at each token drawn so far, in order: entry `k` is the position
    /// when token `k` was drawn. `None` when the analyzer is off (see
    /// [`GenerateOptions::alignment`]; [`AlignmentAnalyzerConfig::tracking`] records them
    /// without changing the tokens). Teacher forcing ([`TokenStream::feed`]) keeps one entry
    /// per `next()`.
    pub fn text_positions(&self) -> Option<&[usize]> {
        self.alignment.as_ref().map(AlignmentRun::positions)
    }

    /// Runs the sampling part of a step: the analyzer's path when it is on.
    fn select(&mut self) -> Result<()> {
        match self.alignment.as_mut() {
            Some(a) => a.select(&self.step, &self.processors, &self.picker),
            None => self.step.select(&self.processors, &self.picker),
        }
    }

    /// Whether the stream ended on the stop token.
    pub fn stopped_on_eos(&self) -> bool {
        self.stopped_on_eos
    }

    /// Teacher forcing: uses `token` as the latest drawn token (replacing the one `next()`
    /// returned) and runs the model on it; the next `next()` draws from the resulting logits.
    pub fn feed(&mut self, token: u32) -> Result<()> {
        let vocab = self.model.config().speech_tokens_dict_size;
        if token as usize >= vocab {
            return Err(crate::error::invalid(
                "token",
                format!("{token} outside the speech vocabulary of {vocab}"),
            ));
        }
        self.pending = None;
        self.finished = false;
        self.run_step(token)
    }

    fn run_step(&mut self, token: u32) -> Result<()> {
        let span = self.write_inputs(token)?;
        match self.alignment.as_mut() {
            Some(a) => a.forward(self.model, &self.step, token, self.prefix_len + self.fed)?,
            None => self.step.forward(self.model, span)?,
        }
        self.fed += 1;
        Ok(())
    }

    /// Feeds `token` and draws from its logits in one go: a graph replay when graphs are on.
    fn run_step_and_select(&mut self, token: u32) -> Result<()> {
        let Some(graphs) = self.graphs.as_mut() else {
            self.run_step(token)?;
            return self.select();
        };
        let span = Self::write_inputs_of(
            &mut self.step,
            (self.turbo, self.fed, self.speech_pos_base, self.prefix_len),
            self.bucket,
            token,
        )?;
        graphs.run(
            &mut self.step,
            self.model,
            span,
            &self.processors,
            &self.picker,
        )?;
        self.fed += 1;
        Ok(())
    }

    /// Writes the step inputs for feeding `token` and returns the attention span to run.
    fn write_inputs(&mut self, token: u32) -> Result<AttentionSpan> {
        Self::write_inputs_of(
            &mut self.step,
            (self.turbo, self.fed, self.speech_pos_base, self.prefix_len),
            self.bucket,
            token,
        )
    }

    fn write_inputs_of(
        step: &mut DecodeStep,
        (turbo, fed, speech_pos_base, prefix_len): (bool, usize, usize, usize),
        bucket: Option<usize>,
        token: u32,
    ) -> Result<AttentionSpan> {
        if turbo && fed == 0 {
            // inference_turbo's processors see only the generated tokens after the first draw
            // (the start token only at the first).
            step.history().clear()?;
        }
        let speech_pos = if turbo { 0 } else { speech_pos_base + fed };
        let pos = prefix_len + fed;
        step.set_inputs(token, pos, speech_pos)?;
        Ok(match bucket {
            Some(size) => AttentionSpan::Bucket(
                (pos + 1)
                    .div_ceil(size)
                    .saturating_mul(size)
                    .min(step.capacity()),
            ),
            None => AttentionSpan::Exact,
        })
    }

    fn advance(&mut self) -> Result<Option<u32>> {
        if self.finished || self.drawn >= self.max_tokens {
            self.finished = true;
            return Ok(None);
        }
        // Host writes first (noise, then the fed token and positions), then the device work of
        // the step (forward + select) back to back, then the one read: the order a captured
        // graph of `forward` + `select` replays in.
        if self.sampler.is_random() {
            let noise = self.sampler.next_noise();
            self.step.set_noise(noise)?;
        }
        match self.pending.take() {
            Some(prev) => self.run_step_and_select(prev)?,
            None => self.select()?,
        }
        if self.sampler.is_random() && self.drawn + 1 < self.max_tokens {
            // the next draw's noise, on the host while the device runs this step
            self.sampler.prefetch();
        }
        let Some(token) = self.step.read_token()? else {
            self.finished = true;
            if self.turbo && self.drawn > 0 {
                // `if torch.all(processed_logits == -inf): break`
                tracing::warn!("all processed logits are -inf: generation stops");
                return Ok(None);
            }
            return Err(T3Error::NoValidToken { step: self.drawn });
        };
        self.drawn += 1;
        // inference_turbo checks the stop token only inside its loop, not on the first token.
        let checks_stop = !self.turbo || self.drawn > 1;
        if checks_stop && Some(token) == self.stop_token {
            self.finished = true;
            self.stopped_on_eos = true;
        } else {
            self.pending = Some(token);
        }
        Ok(Some(token))
    }
}

impl Iterator for TokenStream<'_> {
    type Item = Result<u32>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.advance() {
            Ok(Some(t)) => Some(Ok(t)),
            Ok(None) => None,
            Err(e) => {
                self.finished = true;
                Some(Err(e))
            }
        }
    }
}

impl T3 {
    fn check_len(&self, len: usize) -> Result<()> {
        let max = self.backbone().max_positions();
        if len > max {
            return Err(T3Error::SequenceTooLong {
                what: "backbone positions",
                len,
                max,
            });
        }
        Ok(())
    }

    /// The prompt [`T3::generate`] prefills (English and multilingual): `[cond | text | BOS]`
    /// from [`T3::prepare_input_embeds`] with the start-of-speech embedding appended once more
    /// at speech position 0 (the reference's double BOS), `[B, len, C]`; `B = 2` with `cfg`
    /// (row 1 unconditional). Generated token `i` then goes at sequence position `len + i`
    /// and speech position `i + 1` (see [`crate::DecodeStep::set_inputs`]): with
    /// [`crate::DecodeStep`] this is the whole loop of `T3.inference`, step by step, for
    /// callers that sample, guide or batch on their own.
    pub fn generation_embeds(
        &self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        cfg: bool,
    ) -> Result<Tensor> {
        if self.config().is_gpt() {
            return Err(T3Error::WrongVariant {
                expected: "English or multilingual (Llama)",
                reason: "a GPT-2 T3 prompt is prepare_input_embeds(cond, text, [start], false)"
                    .into(),
            });
        }
        self.ensure_bot_eot(text_tokens)?;
        let start = self.config().start_speech_token;
        let embeds = self.prepare_input_embeds(cond_emb, text_tokens, &[start], cfg)?;
        let dev = self.device();
        let bos =
            self.speech_step_embed(&Tensor::new(&[start], dev)?, &Tensor::new(&[0u32], dev)?)?;
        let (b, _, c) = embeds.dims3()?;
        Ok(Tensor::cat(&[&embeds, &bos.broadcast_as((b, 1, c))?], 1)?)
    }

    /// `inference` as a stream (English and multilingual): `cond_emb` from
    /// [`T3::prepare_conditioning`], `text_tokens` with SOT/EOT (see [`T3::pad_text_tokens`]).
    ///
    /// Reproduces the reference's input quirks: the start-of-speech embedding ends the prompt
    /// and is appended once more, generated token `i` is embedded at speech position `i + 1`,
    /// and with `cfg_weight > 0` a second row with zeroed text embeddings runs alongside.
    pub fn generate(
        &self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &GenerateOptions,
    ) -> Result<TokenStream<'_>> {
        self.start_generate(cond_emb, text_tokens, opts, Prefill::Full)
    }

    /// [`T3::generate`] with the prompt run as `prefill` says.
    pub(crate) fn start_generate(
        &self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &GenerateOptions,
        prefill: Prefill,
    ) -> Result<TokenStream<'_>> {
        let hp = self.config();
        if hp.is_gpt() {
            return Err(T3Error::WrongVariant {
                expected: "English or multilingual (Llama)",
                reason: "a GPT-2 T3 generates with generate_turbo".into(),
            });
        }
        let cfg = opts.cfg_weight > 0.0;
        let start = hp.start_speech_token;
        let embeds = self.generation_embeds(cond_emb, text_tokens, cfg)?;
        let dev = self.device();
        let b = embeds.dim(0)?;
        let prefix_len = embeds.dim(1)?;
        let max = opts.max_new_tokens;
        if max > hp.speech_positions() {
            return Err(T3Error::SequenceTooLong {
                what: "speech position table",
                len: max,
                max: hp.speech_positions(),
            });
        }
        self.check_len(prefix_len + max.max(1))?;
        let capacity = prefill.capacity(prefix_len, max);
        let mut step = DecodeStep::new(self, b, capacity, cfg.then_some(opts.cfg_weight))?;
        let vocab = hp.speech_tokens_dict_size;
        let processors = LogitsProcessorList::t3(
            opts.repetition_penalty,
            opts.temperature,
            opts.min_p,
            opts.top_p,
            vocab,
            dev,
        )?;
        step.history().push(&Tensor::new(&[[start]], dev)?)?;
        let len_cond = cond_emb.dim(1)?;
        let mut unprefilled = None;
        let alignment = match &opts.alignment {
            Some(_) if prefill == Prefill::Deferred => {
                return Err(crate::error::invalid(
                    "batched request",
                    "the alignment-stream analyzer runs only in a request of its own \
                     (T3::generate)"
                        .to_string(),
                ))
            }
            Some(a) => Some(AlignmentRun::start(
                self,
                &step,
                a,
                &embeds,
                len_cond,
                (len_cond, len_cond + text_tokens.len()),
                cfg.then_some(opts.cfg_weight),
            )?),
            None if prefill == Prefill::Deferred => {
                unprefilled = Some(embeds);
                None
            }
            None => {
                step.prefill(self, &embeds)?;
                None
            }
        };
        Ok(TokenStream {
            model: self,
            step,
            processors,
            picker: TokenPicker::new(vocab, dev)?,
            sampler: Sampler::new(opts.sampling, vocab),
            prefix_len,
            speech_pos_base: 1,
            turbo: false,
            stop_token: opts.stop_on_eos.then_some(hp.stop_speech_token),
            max_tokens: max,
            drawn: 0,
            fed: 0,
            pending: None,
            stopped_on_eos: false,
            finished: false,
            bucket: None,
            graphs: None,
            alignment,
            params: RowParams {
                cfg_weight: if cfg { opts.cfg_weight } else { 0.0 },
                repetition_penalty: opts.repetition_penalty,
                temperature: opts.temperature,
                min_p: opts.min_p,
                top_p_threshold: (1.0 - opts.top_p as f64) as f32,
                top_p_on: true,
                top_k: vocab,
            },
            unprefilled,
        })
        .map(|mut s| {
            if opts.cuda_graphs && s.alignment.is_none() {
                s.use_cuda_graphs(DEFAULT_GRAPH_BUCKET);
            }
            s
        })
    }

    /// `T3.inference`: every token [`T3::generate`] yields, the stop token included (as the
    /// reference returns it).
    pub fn inference(
        &self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &GenerateOptions,
    ) -> Result<Vec<u32>> {
        self.generate(cond_emb, text_tokens, opts)?.collect()
    }

    /// `inference_turbo` as a stream (Turbo, Nano): `text_tokens` are GPT-2 ids (no SOT/EOT),
    /// no CFG, no learned positions (GPT-2's `wpe` covers the whole sequence).
    pub fn generate_turbo(
        &self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &TurboOptions,
    ) -> Result<TokenStream<'_>> {
        self.start_turbo(cond_emb, text_tokens, opts, Prefill::Full)
    }

    /// [`T3::generate_turbo`] with the prompt run as `prefill` says.
    pub(crate) fn start_turbo(
        &self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &TurboOptions,
        prefill: Prefill,
    ) -> Result<TokenStream<'_>> {
        let hp = self.config();
        if !hp.is_gpt() {
            return Err(T3Error::WrongVariant {
                expected: "Turbo or Nano (GPT-2)",
                reason: "a Llama T3 generates with generate".into(),
            });
        }
        let start = hp.start_speech_token;
        let embeds = self.prepare_input_embeds(cond_emb, text_tokens, &[start], false)?;
        let prefix_len = embeds.dim(1)?;
        self.check_len(prefix_len + opts.max_gen_len)?;
        let capacity = prefill.capacity(prefix_len, opts.max_gen_len);
        let dev = self.device();
        let mut step = DecodeStep::new(self, 1, capacity, None)?;
        let vocab = hp.speech_tokens_dict_size;
        let processors = LogitsProcessorList::turbo(
            opts.temperature,
            opts.top_k,
            opts.top_p,
            opts.repetition_penalty,
            vocab,
            dev,
        )?;
        step.history().push(&Tensor::new(&[[start]], dev)?)?;
        let unprefilled = if prefill == Prefill::Deferred {
            Some(embeds)
        } else {
            step.prefill(self, &embeds)?;
            None
        };
        Ok(TokenStream {
            model: self,
            step,
            processors,
            picker: TokenPicker::new(vocab, dev)?,
            sampler: Sampler::new(opts.sampling, vocab),
            prefix_len,
            speech_pos_base: 0,
            turbo: true,
            stop_token: opts.stop_on_eos.then_some(hp.stop_speech_token),
            max_tokens: opts.max_gen_len + 1,
            drawn: 0,
            fed: 0,
            pending: None,
            stopped_on_eos: false,
            finished: false,
            bucket: None,
            graphs: None,
            alignment: None,
            params: RowParams {
                cfg_weight: 0.0,
                repetition_penalty: opts.repetition_penalty,
                temperature: if opts.temperature > 0.0 {
                    opts.temperature
                } else {
                    1.0
                },
                min_p: 0.0,
                top_p_threshold: if opts.top_p < 1.0 {
                    (1.0 - opts.top_p as f64) as f32
                } else {
                    0.0
                },
                top_p_on: opts.top_p < 1.0,
                top_k: if opts.top_k > 0 { opts.top_k } else { vocab },
            },
            unprefilled,
        })
        .map(|mut s| {
            if opts.cuda_graphs {
                s.use_cuda_graphs(DEFAULT_GRAPH_BUCKET);
            }
            s
        })
    }

    /// `T3.inference_turbo`: the tokens of [`T3::generate_turbo`] without a final stop token
    /// (as the reference returns them).
    pub fn inference_turbo(
        &self,
        cond_emb: &Tensor,
        text_tokens: &[u32],
        opts: &TurboOptions,
    ) -> Result<Vec<u32>> {
        let mut tokens: Vec<u32> = self
            .generate_turbo(cond_emb, text_tokens, opts)?
            .collect::<Result<_>>()?;
        if tokens.last() == Some(&self.config().stop_speech_token) {
            tokens.pop();
        }
        Ok(tokens)
    }
}
