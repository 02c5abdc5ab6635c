//! Token-level streaming of a whole text (issue 21; no counterpart in the chatterbox reference,
//! whose `generate` returns the whole waveform): T3's speech tokens go into a
//! [`StreamingSynth`] as they are drawn, so the first audio is ready after the first chunk of
//! tokens (`hops[0] + 3`), not after the whole sentence.
//!
//! Per variant, as `generate` post-processes T3's tokens (tts.py, mtl_tts.py, tts_turbo.py at
//! upstream 5de7a54):
//! * every variant: ids outside S3Gen's vocabulary (`>= 6561`, the start/stop tokens among them)
//!   are not synthesised; T3 stops after its stop token. `drop_invalid_tokens` would also drop
//!   the tokens *before* a start-of-speech token drawn mid-sentence; a stream cannot take back
//!   audio already handed out, so it drops only the start token itself.
//! * Multilingual: the last token's audio (~40 ms before the stop token) is cut from the
//!   sentence's last chunk, to the length `generate` gives.
//! * Turbo and Nano: three silence tokens (`S3GEN_SIL`) follow the sentence's last token.
//! * Long text: the sentence chunks of `generate` (`max_chunk_chars`), each streamed in turn and
//!   joined with the same linear crossfade, itself streamed.
//!
//! With one seed a stream draws the same speech tokens (T3's sampling is seeded per sentence
//! as in `generate`) and the same CFM noise as `generate`; the audio differs where the flow
//! made a chunk's frames before the look-ahead tokens that `generate` had, and at HiFT's joins
//! (see [`StreamingSynth`]).
use super::core::{TtsCore, SPEECH_VOCAB_SIZE};
use crate::checkpoint::Variant;
use crate::crossfade::Crossfader;
use crate::draws::SeededDraws;
use crate::options::GenerateOptions;
use crate::progress::Progress;
use crate::s3gen::{S3GenOptions, S3GEN_SIL, S3GEN_SR, SAMPLES_PER_TOKEN};
use crate::stream_synth::StreamingSynth;
use crate::watermark::StreamWatermarker;
use crate::{PipelineError, Result};
use candle_core::Tensor;
use chatterbox_t3::{Sampling, TokenStream};
use chatterbox_text::Language;
use std::collections::VecDeque;

/// Audio a [`SpeechStream`] hands out: 24 kHz samples that are final.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AudioChunk {
    /// 0 for the first chunk of the stream.
    pub index: usize,
    /// The text chunk (sentence group) the samples end in, from 0.
    pub sentence: usize,
    /// Position of `samples[0]` in the whole output, in samples.
    pub sample_offset: usize,
    /// 24 kHz mono samples (never empty, except possibly in the last chunk).
    pub samples: Vec<f32>,
    /// Whether this is the last chunk: the stream ends after it.
    pub is_last: bool,
}

/// The progress callback of a stream.
type ProgressFn<'a> = Box<dyn FnMut(&Progress) + Send + 'a>;

/// One text chunk being spoken.
struct Sentence<'a> {
    index: usize,
    text: String,
    tokens: TokenStream<'a>,
    synth: StreamingSynth<'a, SeededDraws>,
    /// Tokens T3 has drawn.
    drawn: usize,
    /// Tokens handed to the synthesiser.
    pushed: usize,
    /// Tokens outside S3Gen's vocabulary (not synthesised).
    skipped: usize,
}

/// A text being spoken, as an iterator of [`AudioChunk`]s (created by the models' `stream`).
///
/// Each `next()` runs T3 decode steps until the next chunk of audio is final (then the flow
/// and HiFT on it), so the work happens as the caller pulls. Dropping the stream stops the
/// generation at once (no step runs after the last `next()`) and frees its buffers. After an
/// error the stream ends.
pub struct SpeechStream<'a> {
    core: &'a TtsCore,
    reference: &'a crate::s3gen::S3GenRef,
    cond_emb: Tensor,
    opts: GenerateOptions,
    language: Option<Language>,
    texts: Vec<String>,
    next_text: usize,
    seed: u64,
    sentence: Option<Sentence<'a>>,
    fader: Crossfader,
    ready: VecDeque<AudioChunk>,
    /// Watermarks each chunk with the audio before it as context.
    marker: StreamWatermarker,
    chunks: usize,
    emitted: usize,
    done: bool,
    progress: Option<ProgressFn<'a>>,
}

impl<'a> SpeechStream<'a> {
    pub(crate) fn new(core: &'a TtsCore, text: &str, opts: &GenerateOptions) -> Result<Self> {
        opts.validate()?;
        let conds = core.conds.as_ref().ok_or(PipelineError::NoConditionals)?;
        opts.stream
            .validate(core.s3gen.flow().config().token_mel_ratio)?;
        let language = core.language(opts)?;
        let texts = core.text_chunks(text, opts)?;
        let cond_emb = if core.is_turbo() {
            core.t3.prepare_conditioning(&conds.t3)?
        } else {
            let cond = conds.with_exaggeration(opts.exaggeration);
            core.t3.prepare_conditioning(&cond.t3)?
        };
        let fade = (opts.crossfade_ms as usize * S3GEN_SR as usize) / 1000;
        Ok(Self {
            core,
            reference: &conds.gen,
            cond_emb,
            opts: opts.clone(),
            language,
            texts,
            next_text: 0,
            seed: opts.seed.unwrap_or_else(rand::random),
            sentence: None,
            fader: Crossfader::new(fade),
            ready: VecDeque::new(),
            marker: core.watermark.stream(S3GEN_SR),
            chunks: 0,
            emitted: 0,
            done: false,
            progress: None,
        })
    }

    /// Reports [`Progress`] events (text chunks started and finished, tokens drawn) to
    /// `progress` as the stream runs.
    pub fn with_progress(mut self, progress: impl FnMut(&Progress) + Send + 'a) -> Self {
        self.progress = Some(Box::new(progress));
        self
    }

    /// The seed in use (drawn at creation when the options had none).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Text chunks the text was split into.
    pub fn sentences(&self) -> usize {
        self.texts.len()
    }

    /// Samples handed out so far.
    pub fn samples_emitted(&self) -> usize {
        self.emitted
    }

    fn report(&mut self, p: &Progress) {
        if let Some(f) = self.progress.as_mut() {
            f(p);
        }
    }

    /// Queues `samples` as a chunk (empty ones only when last).
    fn emit(&mut self, samples: Vec<f32>, is_last: bool) -> Result<()> {
        if samples.is_empty() && !is_last {
            return Ok(());
        }
        let samples = self.marker.push(samples)?;
        let sentence = self.next_text.saturating_sub(1);
        self.ready.push_back(AudioChunk {
            index: self.chunks,
            sentence,
            sample_offset: self.emitted,
            is_last,
            samples,
        });
        self.chunks += 1;
        self.emitted += self.ready.back().map_or(0, |c| c.samples.len());
        Ok(())
    }

    /// Starts the next text chunk: its text tokens, T3's prefill, a fresh synthesiser.
    fn start_sentence(&mut self) -> Result<()> {
        let core = self.core;
        let index = self.next_text;
        let text = self.texts[index].clone();
        self.next_text += 1;
        let total = self.texts.len();
        self.report(&Progress::ChunkStarted {
            index,
            total,
            chars: text.chars().count(),
        });
        let ids = core.text.text_tokens(&text, self.language)?;
        let sampling = if self.opts.greedy {
            Sampling::Greedy
        } else {
            Sampling::Seeded(self.seed.wrapping_add(index as u64))
        };
        let tokens = core.token_stream(&self.cond_emb, &ids, &self.opts, sampling)?;
        let s3opts = S3GenOptions {
            n_cfm_timesteps: self.opts.n_cfm_timesteps.or(core.is_turbo().then_some(2)),
        };
        let synth = StreamingSynth::new(
            &core.s3gen,
            self.reference,
            self.opts.stream.clone(),
            s3opts,
            SeededDraws::new(self.seed.wrapping_add(index as u64)),
        )?;
        self.sentence = Some(Sentence {
            index,
            text,
            tokens,
            synth,
            drawn: 0,
            pushed: 0,
            skipped: 0,
        });
        Ok(())
    }

    /// One T3 step of the current sentence, and the audio it completes.
    fn step(&mut self) -> Result<()> {
        let Some(s) = self.sentence.as_mut() else {
            if self.next_text < self.texts.len() {
                return self.start_sentence();
            }
            let rest = self.fader.finish();
            self.emit(rest, true)?;
            self.done = true;
            return Ok(());
        };
        match s.tokens.next() {
            Some(token) => {
                let t = token?;
                s.drawn += 1;
                let (chunk, generated) = (s.index, s.drawn);
                let audio = if t < SPEECH_VOCAB_SIZE {
                    s.pushed += 1;
                    s.synth.push_tokens(&[t])?
                } else {
                    if t != self.core.t3.config().stop_speech_token {
                        s.skipped += 1;
                    }
                    Vec::new()
                };
                let max = self.opts.max_new_tokens;
                self.report(&Progress::Tokens {
                    chunk,
                    generated: generated.min(max),
                    max,
                });
                let out = self.fader.push_part(&audio);
                self.emit(out, false)
            }
            None => self.end_sentence(),
        }
    }

    /// T3 has stopped: the variant's ending, the last chunk of audio, the crossfade's segment end.
    fn end_sentence(&mut self) -> Result<()> {
        let Some(mut s) = self.sentence.take() else {
            return Ok(());
        };
        let variant = self.core.variant;
        if s.skipped > 0 && variant == Variant::Multilingual {
            tracing::warn!("dropping speech tokens outside S3Gen's vocabulary");
        }
        let mut audio = Vec::new();
        if matches!(variant, Variant::Turbo | Variant::Nano) {
            audio = s.synth.push_tokens(&[S3GEN_SIL; 3])?;
            s.pushed += 3;
        }
        if s.pushed == 0 {
            return Err(PipelineError::NoSpeechTokens {
                chunk: s.index,
                text: s.text,
            });
        }
        let before = s.synth.emitted();
        let mut last = s.synth.finish()?;
        if variant == Variant::Multilingual {
            // Drop the final speech token's audio, as `generate` does.
            let keep = s.pushed.saturating_sub(1).max(1) * SAMPLES_PER_TOKEN;
            last.truncate(keep.saturating_sub(before));
        }
        audio.extend(last);
        let samples = s.synth.emitted();
        let mut out = self.fader.push_part(&audio);
        out.extend(self.fader.end_segment());
        self.emit(out, false)?;
        tracing::debug!(
            chunk = s.index,
            speech_tokens = s.pushed,
            samples,
            "streamed a text chunk"
        );
        let total = self.texts.len();
        self.report(&Progress::ChunkFinished {
            index: s.index,
            total,
            samples,
        });
        Ok(())
    }
}

impl Iterator for SpeechStream<'_> {
    type Item = Result<AudioChunk>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(c) = self.ready.pop_front() {
                return Some(Ok(c));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.step() {
                self.done = true;
                self.sentence = None;
                return Some(Err(e));
            }
        }
    }
}
