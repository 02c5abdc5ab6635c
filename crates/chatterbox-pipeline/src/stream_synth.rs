//! Streaming S3Gen: speech tokens in as T3 makes them, 24 kHz audio out as soon as it is final
//! (issue 21).
//!
//! The chatterbox reference ships the primitives only: `CausalMaskedDiffWithXvec.inference(...,
//! finalize)` (flow.py: with `finalize=False` the mel of the last `pre_lookahead_len` tokens is
//! not made, their look-ahead being unknown) and `HiFTGenerator.inference(speech_feat,
//! cache_source)` (hifigan.py: the first samples of the source are the previous chunk's).
//! The schedule and the joins are those of the upstream CosyVoice2 lineage this code comes from
//! (`CosyVoice2Model.tts(stream=True)` and `token2wav` in cosyvoice/cli/model.py):
//!
//! * flow: a chunk runs as soon as `hop + pre_lookahead_len` tokens follow the emitted ones, on
//!   prompt + `tokens[..offset + hop + lookahead]` with `finalize = false`, and keeps the mel
//!   frames of tokens `offset..offset + hop`; [`finish`](StreamingSynth::finish) runs every token
//!   with `finalize = true` and keeps the rest. Each chunk re-runs the flow on the whole prefix
//!   (the encoder attends to every token), so its cost grows with the utterance.
//! * CFM noise is per frame position: drawn once when a chunk first reaches a frame, reused by
//!   every later chunk (CosyVoice2's fixed `rand_noise[:, :, :T]`). Meanflow takes it whole
//!   (`noised_mels` would only repeat it).
//! * HiFT ([`StreamingVocoder`]): each chunk's mel goes in behind the previous input's last
//!   `overlap_frames` frames, with `cache_source` = the previous source's last
//!   `overlap_frames * 480` samples; the new waveform's first that many samples are crossfaded
//!   (CosyVoice's `fade_in_out`, a Hamming window of twice that length) with the previous
//!   waveform's held-back tail, and every chunk but the last holds its own tail back. Sine phases
//!   and noise are drawn per HiFT call.
//! * `trim_fade` applies once, to the first samples of the stream.
//!
//! The final chunk's flow call is the non-streamed `flow_inference` of the same tokens and noise;
//! earlier frames differ from it because they were made without the later tokens.
use crate::draws::Draws;
use crate::s3gen::{S3Gen, S3GenOptions, S3GenRef};
use crate::{PipelineError, Result};
use candle_core::{DType, Device, Tensor};
use chatterbox_s3gen::flow::{CausalMaskedDiffWithXvec, FlowOptions, FlowRow};
use chatterbox_vocoder::{HiFTGenerator, SineDraws, TrimFade};

/// When [`StreamingSynth`] runs a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamSchedule {
    /// Speech tokens each chunk makes final, in order; the last entry repeats (CosyVoice2: 25
    /// throughout). Each chunk also waits for `pre_lookahead_len` (3) tokens after them.
    /// Default: `[12, 25]` (CosyVoice2's hop after a short first chunk); the pipeline's
    /// per-variant defaults are in `GenerateOptions::stream`.
    pub hops: Vec<usize>,
    /// Mel frames HiFT re-synthesises at each join (CosyVoice2's `mel_cache_len`); the waveform
    /// crossfade is `overlap_frames * 480` samples. Default: `8`.
    pub overlap_frames: usize,
}

impl Default for StreamSchedule {
    fn default() -> Self {
        Self::new(vec![12, 25])
    }
}

impl StreamSchedule {
    /// Chunks of `hops` tokens (the last repeating) with the default overlap.
    pub fn new(hops: Vec<usize>) -> Self {
        Self {
            hops,
            overlap_frames: 8,
        }
    }

    /// Sets [`overlap_frames`](Self::overlap_frames).
    pub fn with_overlap_frames(mut self, frames: usize) -> Self {
        self.overlap_frames = frames;
        self
    }

    /// Tokens chunk `index` makes final.
    pub fn hop(&self, index: usize) -> usize {
        self.hops
            .get(index)
            .or(self.hops.last())
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn validate(&self, token_mel_ratio: usize) -> Result<()> {
        let bad = |reason: String| {
            Err(PipelineError::InvalidInput {
                what: "stream schedule",
                reason,
            })
        };
        if self.hops.is_empty() || self.overlap_frames == 0 {
            return bad(format!(
                "needs at least one hop and one overlap frame, got hops {:?}, overlap {}",
                self.hops, self.overlap_frames
            ));
        }
        // A chunk's waveform must cover the tail it holds back.
        if let Some(h) = self
            .hops
            .iter()
            .find(|&&h| h * token_mel_ratio < self.overlap_frames)
        {
            return bad(format!(
                "a hop of {h} tokens makes fewer mel frames than the {} overlap frames",
                self.overlap_frames
            ));
        }
        Ok(())
    }
}

/// Audio a chunk made final.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StreamChunk {
    /// 0 for the first chunk.
    pub index: usize,
    /// Position of `audio[0]` in the stream, in samples.
    pub sample_offset: usize,
    /// 24 kHz samples.
    pub audio: Vec<f32>,
    /// The chunk's new mel frames, `(1, 80, frames)`.
    pub mel: Tensor,
    /// Whether this is the last chunk.
    pub is_last: bool,
}

struct HiftCache {
    mel: Tensor,
    source: Tensor,
    speech: Vec<f32>,
}

/// One HiFT call of a [`StreamingVocoder`], from [`StreamingVocoder::prepare`]: run it alone
/// ([`VocodeJob::run`]) or with other streams' calls of the same shape ([`vocode_batch`]), and
/// hand the output to [`StreamingVocoder::finish`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct VocodeJob {
    /// The previous chunk's last `overlap_frames` mel frames, then this chunk's: `(1, 80, t)`.
    pub mel_in: Tensor,
    /// The sine source's draws for `t * 480` samples.
    pub sine: SineDraws,
    /// The previous call's last `overlap_frames * 480` source samples (`None` for the first).
    pub cache_source: Option<Tensor>,
    /// Whether this is the stream's last chunk.
    pub last: bool,
}

impl VocodeJob {
    /// HiFT on this call alone: the waveform `(1, N)` and source `(1, 1, N)`.
    pub fn run(&self, hift: &HiFTGenerator) -> Result<(Tensor, Tensor)> {
        Ok(hift.inference_with_draws(&self.mel_in, &self.sine, self.cache_source.as_ref())?)
    }

    /// What calls must share to run as one batch: mel frames and cached source samples.
    pub fn shape(&self) -> (usize, usize) {
        let frames = self.mel_in.dims().get(2).copied().unwrap_or(0);
        let cached = self
            .cache_source
            .as_ref()
            .and_then(|c| c.dims().get(2).copied())
            .unwrap_or(0);
        (frames, cached)
    }
}

/// HiFT on several streams' calls of one [`VocodeJob::shape`] as one batch; returns each call's
/// waveform `(1, N)` and source `(1, 1, N)`, equal to its own [`VocodeJob::run`] up to float
/// rounding (HiFT's rows never mix).
pub fn vocode_batch(hift: &HiFTGenerator, jobs: &[&VocodeJob]) -> Result<Vec<(Tensor, Tensor)>> {
    match jobs {
        [] => return Ok(Vec::new()),
        [one] => return Ok(vec![one.run(hift)?]),
        _ => {}
    }
    let shape = jobs[0].shape();
    if let Some(j) = jobs.iter().find(|j| j.shape() != shape) {
        return Err(PipelineError::InvalidInput {
            what: "vocoder batch",
            reason: format!(
                "calls of (frames, cached samples) {shape:?} and {:?} cannot share a batch",
                j.shape()
            ),
        });
    }
    let cat = |f: &dyn Fn(&VocodeJob) -> &Tensor| -> Result<Tensor> {
        let rows: Vec<&Tensor> = jobs.iter().map(|j| f(j)).collect();
        Ok(Tensor::cat(&rows, 0)?)
    };
    let mel = cat(&|j| &j.mel_in)?;
    let sine = SineDraws::new(cat(&|j| &j.sine.phase)?, cat(&|j| &j.sine.noise)?);
    let cache = if shape.1 > 0 {
        let rows = jobs
            .iter()
            .map(|j| j.cache_source.as_ref())
            .collect::<Option<Vec<_>>>();
        Some(Tensor::cat(&rows.unwrap_or_default(), 0)?)
    } else {
        None
    };
    let (wav, source) = hift.inference_with_draws(&mel, &sine, cache.as_ref())?;
    (0..jobs.len())
        .map(|i| Ok((wav.narrow(0, i, 1)?, source.narrow(0, i, 1)?)))
        .collect()
}

/// HiFT over a stream of mel chunks, joined as CosyVoice2's `token2wav` joins them (see the
/// module docs). The audio handed out is final: later chunks never change it.
pub struct StreamingVocoder<'a> {
    hift: &'a HiFTGenerator,
    overlap_frames: usize,
    /// `np.hamming(2 * overlap samples)`.
    window: Vec<f64>,
    /// `trim_fade`, applied to the first samples of the stream.
    fade: Vec<f32>,
    cache: Option<HiftCache>,
    emitted: usize,
    finished: bool,
}

impl<'a> StreamingVocoder<'a> {
    /// A stream re-synthesising `overlap_frames` mel frames at each join.
    pub fn new(hift: &'a HiFTGenerator, overlap_frames: usize) -> Result<Self> {
        let n = 2 * overlap_frames * hift.config().samples_per_frame();
        if n < 2 {
            return Err(PipelineError::InvalidInput {
                what: "stream schedule",
                reason: "the vocoder needs at least one overlap frame".into(),
            });
        }
        let window = (0..n)
            .map(|i| 0.54 - 0.46 * (2.0 * std::f64::consts::PI * i as f64 / (n - 1) as f64).cos())
            .collect();
        let trim = TrimFade::new(hift.config().sampling_rate, &Device::Cpu)?;
        let fade = trim
            .forward(&Tensor::ones((1, trim.len()), DType::F32, &Device::Cpu)?)?
            .squeeze(0)?
            .to_vec1::<f32>()?;
        Ok(Self {
            hift,
            overlap_frames,
            window,
            fade,
            cache: None,
            emitted: 0,
            finished: false,
        })
    }

    /// Samples handed out so far.
    pub fn emitted(&self) -> usize {
        self.emitted
    }

    /// Vocodes the next `(1, 80, frames)` mel chunk (`last`: the end of the stream) with HiFT's
    /// sine draws from `draws`; returns the samples that became final.
    pub fn push(&mut self, mel: &Tensor, last: bool, draws: &mut dyn Draws) -> Result<Vec<f32>> {
        let job = self.prepare(mel, last, draws)?;
        let (wav, source) = job.run(self.hift)?;
        self.finish(&job, &wav, &source)
    }

    /// The HiFT call of the next mel chunk (see [`push`](Self::push)), its sine draws taken from
    /// `draws` now; [`finish`](Self::finish) takes its output.
    pub fn prepare(&self, mel: &Tensor, last: bool, draws: &mut dyn Draws) -> Result<VocodeJob> {
        if self.finished {
            return Err(PipelineError::InvalidInput {
                what: "mel chunk",
                reason: "the stream has ended".into(),
            });
        }
        let mel = mel.to_dtype(DType::F32)?;
        let (mel_in, cache_source) = match &self.cache {
            Some(c) => (Tensor::cat(&[&c.mel, &mel], 2)?, Some(c.source.clone())),
            None => (mel, None),
        };
        let (b, _, t) = mel_in.dims3()?;
        if b != 1 || (!last && t < self.overlap_frames) {
            return Err(PipelineError::InvalidInput {
                what: "mel chunk",
                reason: format!(
                    "expected (1, 80, >= {} frames), got {:?}",
                    self.overlap_frames,
                    mel_in.dims()
                ),
            });
        }
        let spf = self.hift.config().samples_per_frame();
        let sine = draws.sine(
            1,
            self.hift.m_source().sine_gen().harmonics(),
            t * spf,
            mel_in.device(),
        )?;
        Ok(VocodeJob {
            mel_in,
            sine,
            cache_source,
            last,
        })
    }

    /// Joins the output of `job`'s HiFT call (`wav (1, N)`, `source (1, 1, N)`) to the stream;
    /// returns the samples that became final.
    pub fn finish(&mut self, job: &VocodeJob, wav: &Tensor, source: &Tensor) -> Result<Vec<f32>> {
        if self.finished {
            return Err(PipelineError::InvalidInput {
                what: "mel chunk",
                reason: "the stream has ended".into(),
            });
        }
        let t = job.mel_in.dim(2)?;
        let tail = self.overlap_frames * self.hift.config().samples_per_frame();
        let mut speech = wav.squeeze(0)?.to_vec1::<f32>()?;
        if let Some(c) = &self.cache {
            // fade_in_out: f32 samples times the f64 window, rounded back to f32 (as torch does).
            let (fade_in, fade_out) = self.window.split_at(tail);
            for (i, s) in speech[..tail].iter_mut().enumerate() {
                *s = (f64::from(*s) * fade_in[i] + f64::from(c.speech[i]) * fade_out[i]) as f32;
            }
        }
        if job.last {
            self.cache = None;
            self.finished = true;
        } else {
            let n = source.dim(2)?;
            self.cache = Some(HiftCache {
                mel: job
                    .mel_in
                    .narrow(2, t - self.overlap_frames, self.overlap_frames)?,
                source: source.narrow(2, n - tail, tail)?,
                speech: speech.split_off(speech.len() - tail),
            });
        }
        for (s, f) in speech.iter_mut().zip(self.fade.iter().skip(self.emitted)) {
            *s *= f;
        }
        self.emitted += speech.len();
        Ok(speech)
    }
}

/// Speech tokens to audio chunk by chunk, with S3Gen's flow and HiFT (see the module docs).
///
/// ```no_run
/// # fn demo(s3gen: &chatterbox_pipeline::S3Gen, voice: &chatterbox_pipeline::S3GenRef,
/// #         tokens: &[u32]) -> chatterbox_pipeline::Result<Vec<f32>> {
/// use chatterbox_pipeline::{S3GenOptions, SeededDraws, StreamSchedule, StreamingSynth};
/// let mut draws = SeededDraws::new(0);
/// let mut stream =
///     StreamingSynth::new(s3gen, voice, StreamSchedule::default(), S3GenOptions::default(), &mut draws)?;
/// let mut audio = Vec::new();
/// for t in tokens {
///     audio.extend(stream.push_tokens(&[*t])?); // play these now
/// }
/// audio.extend(stream.finish()?);
/// # Ok(audio) }
/// ```
pub struct StreamingSynth<'a, D: Draws> {
    s3gen: &'a S3Gen,
    /// A copy (its tensors are shared, not duplicated): a stream may outlive the caller's.
    reference: S3GenRef,
    schedule: StreamSchedule,
    opts: S3GenOptions,
    draws: D,
    vocoder: StreamingVocoder<'a>,
    tokens: Vec<u32>,
    /// Tokens whose mel frames have been made.
    offset: usize,
    chunks: usize,
    /// The hop chosen for the next regular chunk instead of its schedule's
    /// ([`set_next_hop`](StreamingSynth::set_next_hop)).
    next_hop: Option<usize>,
    /// CFM noise of every frame position reached so far, `(1, 80, frames)`.
    noise: Option<Tensor>,
    /// No more tokens: the final chunk is due once the regular ones are made.
    ended: bool,
    /// The chunk whose HiFT call is out ([`StreamingSynth::vocode_job`]).
    vocoding: Option<Vocoding>,
}

/// A chunk between its flow and its HiFT output: its new mel frames and tokens, its HiFT call.
struct Vocoding {
    mel: Tensor,
    hop: usize,
    job: VocodeJob,
}

/// The flow call of a chunk that is due, from [`StreamingSynth::next_flow`]: run it (alone, or
/// with other streams' rows through `CausalMaskedDiffWithXvec::inference_rows`) and hand the mel
/// to [`StreamingSynth::complete`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FlowJob {
    /// The flow's inputs: prompt + `tokens[..n]`, the noise of its frames, `finalize`.
    pub row: FlowRow,
    /// Euler steps (`None`: the model's default).
    pub n_timesteps: Option<usize>,
}

impl FlowJob {
    /// The flow options of the call.
    pub fn options(&self) -> FlowOptions {
        let fo = FlowOptions::default().with_finalize(self.row.finalize);
        match self.n_timesteps {
            Some(steps) => fo.with_n_timesteps(steps),
            None => fo,
        }
    }

    /// Runs the flow on this job alone: `inference`, exactly as the stream runs it itself.
    pub fn run(&self, flow: &CausalMaskedDiffWithXvec) -> Result<Tensor> {
        let r = &self.row;
        Ok(flow.inference(&r.tokens, &r.prompt, &r.noise, None, &self.options())?)
    }
}

/// A chunk that is due: the tokens the flow sees, whether they are all, the tokens it makes final.
#[derive(Debug, Clone, Copy)]
struct Due {
    n: usize,
    finalize: bool,
    hop: usize,
}

impl<'a, D: Draws> StreamingSynth<'a, D> {
    /// A stream in the voice of `reference`, drawing the CFM noise and HiFT's sine draws from
    /// `draws` (owned, or borrowed as `&mut draws`).
    pub fn new(
        s3gen: &'a S3Gen,
        reference: &S3GenRef,
        schedule: StreamSchedule,
        opts: S3GenOptions,
        draws: D,
    ) -> Result<Self> {
        schedule.validate(s3gen.flow().config().token_mel_ratio)?;
        Ok(Self {
            s3gen,
            reference: reference.clone(),
            vocoder: StreamingVocoder::new(s3gen.mel2wav(), schedule.overlap_frames)?,
            schedule,
            opts,
            draws,
            tokens: Vec::new(),
            offset: 0,
            chunks: 0,
            next_hop: None,
            noise: None,
            ended: false,
            vocoding: None,
        })
    }

    /// Samples handed out so far.
    pub fn emitted(&self) -> usize {
        self.vocoder.emitted()
    }

    /// Tokens received so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Tokens received whose mel frames are not made yet (the next chunk's and its look-ahead).
    pub fn pending_tokens(&self) -> usize {
        self.tokens.len() - self.offset
    }

    /// Tokens the next regular chunk makes final: its schedule's, or the hop
    /// [`set_next_hop`](Self::set_next_hop) chose.
    pub fn next_hop(&self) -> usize {
        self.next_hop
            .unwrap_or_else(|| self.schedule.hop(self.chunks))
    }

    /// Tokens each chunk waits for after the ones it makes final (the flow's
    /// `pre_lookahead_len`, 3).
    pub fn lookahead(&self) -> usize {
        self.s3gen.flow().config().pre_lookahead_len
    }

    /// Makes the next regular chunk final after `hop` tokens instead of its schedule's (a
    /// batch fitting hops to its listeners does, see `SpeechBatch::set_hop_fitting`); the chunks after
    /// it keep the schedule. Choose it between chunks, before asking for the next chunk's
    /// [`next_flow`](Self::next_flow): a flow call asked for before no longer matches it
    /// ([`vocode_job`](Self::vocode_job) then refuses its output). A hop too short for the
    /// schedule's overlap is an error.
    pub fn set_next_hop(&mut self, hop: usize) -> Result<()> {
        let ratio = self.s3gen.flow().config().token_mel_ratio;
        if hop * ratio < self.schedule.overlap_frames {
            return Err(PipelineError::InvalidInput {
                what: "stream schedule",
                reason: format!(
                    "a hop of {hop} tokens makes fewer mel frames than the {} overlap frames",
                    self.schedule.overlap_frames
                ),
            });
        }
        self.next_hop = Some(hop);
        Ok(())
    }

    /// Adds speech tokens (ids below 6561) and runs every chunk they complete. After an error the
    /// stream is unusable: drop it.
    pub fn push_chunks(&mut self, tokens: &[u32]) -> Result<Vec<StreamChunk>> {
        self.push(tokens)?;
        self.run_due()
    }

    /// Runs every chunk that is due, in order: its flow call, then its HiFT call.
    fn run_due(&mut self) -> Result<Vec<StreamChunk>> {
        let mut out = Vec::new();
        while let Some(job) = self.next_flow()? {
            let mel = job.run(self.s3gen.flow())?;
            out.push(self.complete(&mel)?);
        }
        Ok(out)
    }

    /// Adds speech tokens; returns the audio that became final.
    pub fn push_tokens(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        Ok(self
            .push_chunks(tokens)?
            .into_iter()
            .flat_map(|c| c.audio)
            .collect())
    }

    /// The last chunk: every remaining token with `finalize = true`.
    pub fn finish_chunk(&mut self) -> Result<StreamChunk> {
        self.end()?;
        // `end` leaves exactly one chunk due (push_chunks made the regular ones)
        self.run_due()?
            .pop()
            .ok_or_else(|| PipelineError::InvalidInput {
                what: "speech tokens",
                reason: "no tokens to synthesise".into(),
            })
    }

    /// Ends the stream; returns the rest of the audio.
    pub fn finish(&mut self) -> Result<Vec<f32>> {
        Ok(self.finish_chunk()?.audio)
    }

    /// Adds speech tokens (ids below 6561) without running the chunks they complete: the
    /// caller runs them through [`next_flow`](Self::next_flow) and [`complete`](Self::complete).
    pub fn push(&mut self, tokens: &[u32]) -> Result<()> {
        if self.vocoder.finished || self.ended {
            return Err(PipelineError::InvalidInput {
                what: "speech tokens",
                reason: "the stream has been finished".into(),
            });
        }
        let vocab = self.s3gen.flow().config().vocab_size;
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(PipelineError::InvalidInput {
                what: "speech tokens",
                reason: format!(
                    "speech token id {t} is outside 0..{vocab} (drop special tokens first)"
                ),
            });
        }
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// No more tokens: the final chunk (every remaining token with `finalize = true`) falls due
    /// after the regular ones.
    pub fn end(&mut self) -> Result<()> {
        if self.vocoder.finished || self.ended {
            return Err(PipelineError::InvalidInput {
                what: "speech tokens",
                reason: "the stream has been finished".into(),
            });
        }
        if self.tokens.is_empty() {
            return Err(PipelineError::InvalidInput {
                what: "speech tokens",
                reason: "no tokens to synthesise".into(),
            });
        }
        self.ended = true;
        Ok(())
    }

    /// The chunk due next, if any.
    fn due(&self) -> Option<Due> {
        if self.vocoder.finished || self.vocoding.is_some() {
            return None;
        }
        let look = self.lookahead();
        let hop = self.next_hop();
        if self.tokens.len() - self.offset >= hop + look {
            return Some(Due {
                n: self.offset + hop + look,
                finalize: false,
                hop,
            });
        }
        self.ended.then(|| Due {
            n: self.tokens.len(),
            finalize: true,
            hop: self.tokens.len() - self.offset,
        })
    }

    /// Whether a chunk is due (its flow call is [`next_flow`](Self::next_flow)).
    pub fn is_due(&self) -> bool {
        self.due().is_some()
    }

    /// The flow call of the chunk due next (`None`: no chunk is due). Its CFM noise is drawn
    /// here, once: asking again before [`complete`](Self::complete) gives the same call.
    pub fn next_flow(&mut self) -> Result<Option<FlowJob>> {
        let Some(due) = self.due() else {
            return Ok(None);
        };
        let flow = self.s3gen.flow();
        let dev = self.s3gen.device().clone();
        let shape = flow.noise_shape(1, self.reference.n_prompt_tokens(), due.n, due.finalize);
        let noise = self.noise(shape, &dev)?;
        let tokens = Tensor::from_slice(&self.tokens[..due.n], (1, due.n), &dev)?;
        Ok(Some(FlowJob {
            row: FlowRow::new(tokens, self.reference.flow_prompt(), noise, due.finalize),
            n_timesteps: self.opts.n_cfm_timesteps,
        }))
    }

    /// Finishes the chunk due with its flow output `feat` (the mel of every token of the
    /// [`FlowJob`], `(1, 80, frames)`): keeps the frames of its new tokens and runs HiFT.
    pub fn complete(&mut self, feat: &Tensor) -> Result<StreamChunk> {
        let hift = self.s3gen.mel2wav();
        let (wav, source) = self.vocode_job(feat)?.run(hift)?;
        self.vocoded(&wav, &source)
    }

    /// The first half of [`complete`](Self::complete): the HiFT call of the chunk due, from
    /// its flow output `feat` (HiFT's sine draws are taken now). It stays pending
    /// ([`pending_vocode`](Self::pending_vocode)) until [`vocoded`](Self::vocoded) gets its
    /// output; meanwhile no other chunk is due.
    pub fn vocode_job(&mut self, feat: &Tensor) -> Result<&VocodeJob> {
        let Some(Due { n, finalize, hop }) = self.due() else {
            return Err(PipelineError::InvalidInput {
                what: "flow output",
                reason: "no chunk of this stream is due".into(),
            });
        };
        let ratio = self.s3gen.flow().config().token_mel_ratio;
        let start = self.offset * ratio;
        let frames = feat.dim(2)?;
        if feat.rank() != 3 || frames < start || frames - start != hop * ratio {
            return Err(PipelineError::InvalidInput {
                what: "flow output",
                reason: format!(
                    "expected (1, 80, {}) for chunk {} of {n} tokens, got {:?}",
                    start + hop * ratio,
                    self.chunks,
                    feat.dims()
                ),
            });
        }
        let mel = feat.narrow(2, start, frames - start)?;
        let job = self.vocoder.prepare(&mel, finalize, &mut self.draws)?;
        Ok(&self.vocoding.insert(Vocoding { mel, hop, job }).job)
    }

    /// The HiFT call made by [`vocode_job`](Self::vocode_job) and not yet
    /// [`vocoded`](Self::vocoded).
    pub fn pending_vocode(&self) -> Option<&VocodeJob> {
        self.vocoding.as_ref().map(|v| &v.job)
    }

    /// The second half of [`complete`](Self::complete): the pending HiFT call's output
    /// (`wav (1, N)`, `source (1, 1, N)`) joined to the stream, the chunk's final audio.
    pub fn vocoded(&mut self, wav: &Tensor, source: &Tensor) -> Result<StreamChunk> {
        let Some(Vocoding { mel, hop, job }) = self.vocoding.take() else {
            return Err(PipelineError::InvalidInput {
                what: "vocoder output",
                reason: "no chunk of this stream waits for HiFT".into(),
            });
        };
        let _span = tracing::debug_span!("stream_chunk", index = self.chunks).entered();
        let sample_offset = self.vocoder.emitted();
        let audio = self.vocoder.finish(&job, wav, source)?;
        let chunk = StreamChunk {
            index: self.chunks,
            sample_offset,
            audio,
            mel,
            is_last: job.last,
        };
        self.offset += hop;
        self.chunks += 1;
        self.next_hop = None;
        Ok(chunk)
    }

    /// The noise of frame positions `0..shape.2`, drawing the positions not reached before.
    fn noise(&mut self, shape: (usize, usize, usize), dev: &Device) -> Result<Tensor> {
        let have = match &self.noise {
            Some(n) => n.dim(2)?,
            None => 0,
        };
        if have < shape.2 {
            let new = self
                .draws
                .cfm_noise((shape.0, shape.1, shape.2 - have), dev)?;
            self.noise = Some(match self.noise.take() {
                Some(old) => Tensor::cat(&[&old, &new], 2)?,
                None => new,
            });
        }
        match &self.noise {
            Some(n) => Ok(n.narrow(2, 0, shape.2)?),
            None => Err(PipelineError::InvalidInput {
                what: "speech tokens",
                reason: "no frame to generate".into(),
            }),
        }
    }
}
