//! Port of `VoiceEncoder` in chatterbox/models/voice_encoder/voice_encoder.py (upstream 5de7a54).
use super::lstm::Lstm;
use super::partials::{frame_step, partial_ranges, EmbedOptions, PartialEmbeds};
use super::VoiceEncConfig;
use crate::error::invalid;
use crate::kernels::{gemm_rows, PackedB};
use crate::weights::tensor;
use crate::{Result, SpeakerError};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_dsp::features::VoiceEncoderMel;
use chatterbox_dsp::{check_signal, trim_silence, Matrix, TrimOptions};
use std::ops::Range;
use std::path::Path;

/// The LSTM layers of the reference (hard-coded `num_layers=3`).
const NUM_LAYERS: usize = 3;

/// The speaker encoder Chatterbox conditions T3 on: a 3-layer LSTM over 40-bin power mels,
/// projected to 256 values, ReLU, L2-normalised (adapted from Real-Time-Voice-Cloning).
///
/// Utterances are cut into partials of `ve_partial_frames` frames (see [`EmbedOptions`]); the
/// embedding of an utterance is the renormalised mean of its partials' embeddings.
///
/// Keys: `lstm.{weight,bias}_{ih,hh}_l{0,1,2}`, `proj.weight`, `proj.bias`
/// (`similarity_weight` / `similarity_bias` are training-only and not read).
#[derive(Debug, Clone)]
pub struct VoiceEncoder {
    cfg: VoiceEncConfig,
    lstm: Lstm,
    /// `proj.weight^T`, `(H, E)`.
    proj_w_t: Tensor,
    proj_b: Tensor,
    /// `proj.weight^T` packed and `proj.bias`, for the CPU kernels.
    proj_cpu: Option<(PackedB, Vec<f32>)>,
    mel: VoiceEncoderMel,
    device: Device,
    dtype: DType,
    cpu_kernels: bool,
}

/// Whether the VoiceEncoder's recurrence runs as one kernel a layer on `device` (CUDA, built
/// with the `cuda` feature), so that the host kernels are not the default there.
fn device_recurrence(device: &Device) -> bool {
    cfg!(feature = "cuda") && device.is_cuda()
}

/// One utterance's mel for the partial builder: `frames` rows of `num_mels` values, of which
/// the first `len` are the utterance (rows past `frames` read as zeros).
struct MelRef<'a> {
    data: &'a [f32],
    frames: usize,
    len: usize,
}

impl VoiceEncoder {
    /// Builds the encoder from `vb` (the root of `ve.safetensors` / `ve.pt`). Weights keep
    /// `vb`'s dtype and device.
    pub fn new(cfg: &VoiceEncConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        let (h, e) = (cfg.ve_hidden_size, cfg.speaker_embed_size);
        let lstm = Lstm::new(cfg.num_mels, h, NUM_LAYERS, vb.pp("lstm"))?;
        let proj = vb.pp("proj");
        let w = tensor(&proj, "weight", &[e, h])?;
        let b = tensor(&proj, "bias", &[e])?;
        let proj_cpu = if lstm.has_cpu_kernels() {
            let host = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
            Some((PackedB::from_weight(&host(&w)?, e, h), host(&b)?))
        } else {
            None
        };
        // host copies exist exactly for f32 weights; on CUDA the device's recurrence kernel is
        // faster than the host's threads
        let cpu_kernels = proj_cpu.is_some() && !device_recurrence(vb.device());
        Ok(Self {
            cfg: cfg.clone(),
            lstm,
            proj_w_t: w.t()?.contiguous()?,
            proj_b: b,
            proj_cpu,
            mel: VoiceEncoderMel::new(cfg.mel_config())?,
            device: vb.device().clone(),
            dtype: vb.dtype(),
            cpu_kernels,
        })
    }

    /// Loads `ve.safetensors` (the English and Turbo checkpoints) in f32.
    pub fn from_safetensors(
        path: impl AsRef<Path>,
        cfg: &VoiceEncConfig,
        device: &Device,
    ) -> Result<Self> {
        let path = path.as_ref();
        // SAFETY: the file is memory-mapped read-only; as with every mmap, it must not be
        // modified by another process while the encoder is being built (the weights are
        // copied out of the map before `new` returns).
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, device) }
            .map_err(|source| SpeakerError::Checkpoint {
                path: path.to_path_buf(),
                source,
            })?;
        Self::new(cfg, vb)
    }

    /// Loads `ve.pt` (the multilingual checkpoint: a `torch.save`d state dict) in f32.
    pub fn from_pth(path: impl AsRef<Path>, cfg: &VoiceEncConfig, device: &Device) -> Result<Self> {
        let path = path.as_ref();
        let vb = VarBuilder::from_pth(path, DType::F32, device).map_err(|source| {
            SpeakerError::Checkpoint {
                path: path.to_path_buf(),
                source,
            }
        })?;
        Self::new(cfg, vb)
    }

    /// Chooses whether, in f32, the LSTM and projection run in the crate's plain-Rust kernels
    /// on the host (`true`) or in candle tensor ops on the encoder's device (`false`). The
    /// default is the host on the CPU and on Metal, where candle's recurrence is 160
    /// sequential steps a layer (~5 800 tiny kernel launches for a 10 s clip; 61-63 ms on an
    /// H100), and the device on CUDA (built with the `cuda` feature), whose recurrence is one
    /// kernel a layer. Has no effect in other dtypes.
    pub fn with_cpu_kernels(mut self, enabled: bool) -> Self {
        self.cpu_kernels = enabled && self.proj_cpu.is_some();
        self
    }

    /// Whether the crate's CPU kernels run (see [`VoiceEncoder::with_cpu_kernels`]).
    pub fn cpu_kernels(&self) -> bool {
        self.cpu_kernels
    }

    /// The configuration.
    pub fn config(&self) -> &VoiceEncConfig {
        &self.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Embeddings of a batch of partial utterances (`forward`): `mels` is `(B, T, num_mels)`
    /// (unscaled power mels, any `T`, any device: moved to the encoder's); returns
    /// `(B, speaker_embed_size)` f32 on the encoder's device, each row
    /// L2-normalised (a row whose projection is all zero after the ReLU comes out NaN, as in
    /// the reference).
    pub fn forward(&self, mels: &Tensor) -> Result<Tensor> {
        let (b, t, m) = mels.dims3()?;
        if m != self.cfg.num_mels || b == 0 || t == 0 {
            return Err(invalid(
                "mels",
                format!(
                    "shape ({b}, {t}, {m}), expected (B > 0, T > 0, {})",
                    self.cfg.num_mels
                ),
            ));
        }
        if self.cpu_kernels {
            let x = mels.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            let e = self.forward_cpu(&x, b, t)?;
            return Ok(Tensor::from_vec(
                e,
                (b, self.cfg.speaker_embed_size),
                &self.device,
            )?);
        }
        let h = self
            .lstm
            .forward(&mels.to_device(&self.device)?.to_dtype(self.dtype)?)?;
        let mut raw = h.matmul(&self.proj_w_t)?.broadcast_add(&self.proj_b)?;
        if self.cfg.ve_final_relu {
            raw = raw.relu()?;
        }
        let norm = raw.sqr()?.sum_keepdim(1)?.sqrt()?;
        Ok(raw.broadcast_div(&norm)?.to_dtype(DType::F32)?)
    }

    /// `forward` on the host with the CPU kernels: `x` `(b, t, num_mels)` -> `(b, E)`.
    fn forward_cpu(&self, x: &[f32], b: usize, t: usize) -> Result<Vec<f32>> {
        let (Some(h), Some((w, bias))) = (self.lstm.forward_cpu(x, b, t), self.proj_cpu.as_ref())
        else {
            return Err(invalid("forward", "the CPU kernels need CPU weights"));
        };
        let h = h?;
        let (hd, e) = (self.cfg.ve_hidden_size, self.cfg.speaker_embed_size);
        let mut raw = vec![0f32; b * e];
        let row = |_: usize, r: usize| &h[r * hd..(r + 1) * hd];
        gemm_rows(0, b, 1, hd, row, w, |r, v| {
            for ((o, v), bias) in raw[r * e..(r + 1) * e].iter_mut().zip(v).zip(bias) {
                *o = v + bias;
            }
        });
        for row in raw.chunks_exact_mut(e) {
            if self.cfg.ve_final_relu {
                row.iter_mut().for_each(|v| *v = v.max(0.0));
            }
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
            row.iter_mut().for_each(|v| *v /= norm);
        }
        Ok(raw)
    }

    /// Utterance embeddings from a padded batch of mels (`inference`): `mels` is
    /// `(B, T, num_mels)` and `mel_lens[b]` the number of real frames of utterance `b`. Each
    /// utterance is cut into partials (frames past `T` read as zeros; frames between
    /// `mel_lens[b]` and `T` are used as given, as in the reference), the partials are
    /// embedded in batches of `opts.batch_size`, averaged per utterance and renormalised.
    /// Returns `(B, speaker_embed_size)` f32. `opts.trim_top_db` is not used here.
    pub fn inference(
        &self,
        mels: &Tensor,
        mel_lens: &[usize],
        opts: &EmbedOptions,
    ) -> Result<Tensor> {
        let (b, t, m) = mels.dims3()?;
        if m != self.cfg.num_mels || b != mel_lens.len() || b == 0 {
            return Err(invalid(
                "mels",
                format!(
                    "shape ({b}, {t}, {m}) with {} lengths, expected (B > 0, T, {}) with B lengths",
                    mel_lens.len(),
                    self.cfg.num_mels
                ),
            ));
        }
        let host = mels.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let refs: Vec<MelRef> = host
            .chunks_exact(t * m)
            .zip(mel_lens)
            .map(|(data, &len)| MelRef {
                data,
                frames: t,
                len,
            })
            .collect();
        self.embed_utterances(&refs, opts)
    }

    /// Utterance embeddings of mels given as `(frames, num_mels)` matrices
    /// (`embeds_from_mels`, `as_spk=False`): `(B, speaker_embed_size)` f32.
    pub fn embeds_from_mels(&self, mels: &[Matrix], opts: &EmbedOptions) -> Result<Tensor> {
        self.embed_utterances(&self.mel_refs(mels)?, opts)
    }

    /// The frames each partial utterance of a mel of `n_frames` frames covers, with this
    /// encoder's `ve_partial_frames` and `sample_rate` and the step `opts` gives (see
    /// [`partial_ranges`](super::partial_ranges)). Frames at or past `n_frames` are zero
    /// padding.
    pub fn partial_ranges(
        &self,
        n_frames: usize,
        opts: &EmbedOptions,
    ) -> Result<Vec<Range<usize>>> {
        let p = self.cfg.ve_partial_frames;
        let step = frame_step(opts.overlap, opts.rate, self.cfg.sample_rate, p)?;
        partial_ranges(n_frames, step, opts.min_coverage, p)
    }

    /// The partial utterances of one `(frames, num_mels)` mel (`stride_as_partials`):
    /// `(n_partials, ve_partial_frames, num_mels)` f32 on the encoder's device, zero-padded
    /// past the mel's end; what [`VoiceEncoder::forward`] embeds.
    pub fn partials(&self, mel: &Matrix, opts: &EmbedOptions) -> Result<Tensor> {
        let refs = self.mel_refs(std::slice::from_ref(mel))?;
        let (partials, counts) = self.build_partials(&refs, opts)?;
        let n = counts.iter().sum::<usize>();
        let (p, m) = (self.cfg.ve_partial_frames, self.cfg.num_mels);
        Ok(Tensor::from_vec(partials, (n, p, m), &self.device)?)
    }

    /// The embedding of every partial utterance of mels given as `(frames, num_mels)` matrices,
    /// before the per-utterance mean of [`VoiceEncoder::embeds_from_mels`].
    pub fn partial_embeds_from_mels(
        &self,
        mels: &[Matrix],
        opts: &EmbedOptions,
    ) -> Result<PartialEmbeds> {
        let (embeds, counts) = self.partial_embeds(&self.mel_refs(mels)?, opts)?;
        let n = counts.iter().sum::<usize>();
        Ok(PartialEmbeds {
            embeds: Tensor::from_vec(embeds, (n, self.cfg.speaker_embed_size), &self.device)?,
            counts,
        })
    }

    /// The embedding of every partial utterance of 16 kHz clips (trimmed and turned into mels
    /// as in [`VoiceEncoder::embeds_from_wavs`], with the same errors), before the
    /// per-utterance mean.
    pub fn partial_embeds_from_wavs(
        &self,
        wavs: &[&[f32]],
        sample_rate: u32,
        opts: &EmbedOptions,
    ) -> Result<PartialEmbeds> {
        self.partial_embeds_from_mels(&self.wav_mels(wavs, sample_rate, opts)?, opts)
    }

    /// Checks mels given as matrices and views them for the partial builder.
    fn mel_refs<'a>(&self, mels: &'a [Matrix]) -> Result<Vec<MelRef<'a>>> {
        mels.iter()
            .enumerate()
            .map(|(i, mel)| {
                if mel.cols() != self.cfg.num_mels || mel.rows() == 0 {
                    return Err(invalid(
                        format!("mel {i}"),
                        format!(
                            "shape {:?}, expected (frames > 0, {})",
                            mel.shape(),
                            self.cfg.num_mels
                        ),
                    ));
                }
                Ok(MelRef {
                    data: mel.as_slice(),
                    frames: mel.rows(),
                    len: mel.rows(),
                })
            })
            .collect()
    }

    /// The speaker embedding of mels (`embeds_from_mels(as_spk=True)`): `(speaker_embed_size,)`.
    pub fn speaker_embed_from_mels(&self, mels: &[Matrix], opts: &EmbedOptions) -> Result<Tensor> {
        Self::utt_to_spk_embed(&self.embeds_from_mels(mels, opts)?)
    }

    /// Utterance embeddings of 16 kHz clips (`embeds_from_wavs`, `as_spk=False`): each clip is
    /// trimmed (`opts.trim_top_db`), turned into a mel and embedded. Returns
    /// `(B, speaker_embed_size)` f32 on the encoder's device.
    ///
    /// Errors: no clips, a sample rate other than `sample_rate` of the config (the reference
    /// would resample with resampy; resample first), an empty clip, a NaN or infinite
    /// sample, a clip of digital silence, or one of at most `n_fft / 2` samples after trimming
    /// (too short to reflect-pad). Clips shorter than one partial are zero-padded to one
    /// partial, as the reference does.
    pub fn embeds_from_wavs(
        &self,
        wavs: &[&[f32]],
        sample_rate: u32,
        opts: &EmbedOptions,
    ) -> Result<Tensor> {
        self.embeds_from_mels(&self.wav_mels(wavs, sample_rate, opts)?, opts)
    }

    /// The mels of 16 kHz clips, trimmed with `opts.trim_top_db`.
    fn wav_mels(
        &self,
        wavs: &[&[f32]],
        sample_rate: u32,
        opts: &EmbedOptions,
    ) -> Result<Vec<Matrix>> {
        if sample_rate != self.cfg.sample_rate {
            return Err(SpeakerError::UnsupportedSampleRate {
                what: "VoiceEncoder input".into(),
                got: sample_rate,
                expected: self.cfg.sample_rate,
            });
        }
        wavs.iter()
            .enumerate()
            .map(|(i, wav)| self.melspectrogram(wav, opts.trim_top_db, &format!("wav {i}")))
            .collect()
    }

    /// The speaker embedding of 16 kHz clips (`embeds_from_wavs(as_spk=True)`): the
    /// renormalised mean of the utterance embeddings, `(speaker_embed_size,)`.
    pub fn speaker_embed_from_wavs(
        &self,
        wavs: &[&[f32]],
        sample_rate: u32,
        opts: &EmbedOptions,
    ) -> Result<Tensor> {
        Self::utt_to_spk_embed(&self.embeds_from_wavs(wavs, sample_rate, opts)?)
    }

    /// The encoder's input for one clip at `sample_rate`: trimmed with `trim_top_db` (when
    /// `Some` and non-zero), then the 40-bin power mel, as `(frames, num_mels)`. `what` names
    /// the clip in errors (empty, NaN, silent or too short clips, as in
    /// [`VoiceEncoder::embeds_from_wavs`]).
    pub fn melspectrogram(
        &self,
        wav: &[f32],
        trim_top_db: Option<f32>,
        what: &str,
    ) -> Result<Matrix> {
        check_signal(what, wav)?;
        if wav.iter().all(|&v| v == 0.0) {
            return Err(SpeakerError::SilentAudio {
                what: what.to_string(),
                len: wav.len(),
            });
        }
        let wav = match trim_top_db {
            Some(top_db) if top_db != 0.0 => {
                let (a, b) = trim_silence(
                    wav,
                    &TrimOptions {
                        top_db,
                        ..TrimOptions::default()
                    },
                )?;
                &wav[a..b]
            }
            _ => wav,
        };
        let min = self.cfg.n_fft / 2 + 1;
        if wav.len() < min {
            return Err(SpeakerError::TooShort {
                what: format!("{what} (after trimming)"),
                len: wav.len(),
                min,
            });
        }
        Ok(self.mel.compute(wav)?.transpose())
    }

    /// Cuts every utterance into partials: `(N * ve_partial_frames * num_mels)` values and the
    /// partials of each utterance.
    fn build_partials(
        &self,
        mels: &[MelRef],
        opts: &EmbedOptions,
    ) -> Result<(Vec<f32>, Vec<usize>)> {
        if mels.is_empty() {
            return Err(invalid("utterances", "none given"));
        }
        let (p, m) = (self.cfg.ve_partial_frames, self.cfg.num_mels);
        let step = frame_step(opts.overlap, opts.rate, self.cfg.sample_rate, p)?;
        let mut counts = Vec::with_capacity(mels.len());
        let mut partials: Vec<f32> = Vec::new();
        for mel in mels {
            let ranges = partial_ranges(mel.len, step, opts.min_coverage, p)?;
            counts.push(ranges.len());
            for range in ranges {
                let start = range.start;
                let have = mel.frames.saturating_sub(start).min(p);
                if have > 0 {
                    partials.extend_from_slice(&mel.data[start * m..(start + have) * m]);
                }
                partials.resize(partials.len() + (p - have) * m, 0.0);
            }
        }
        Ok((partials, counts))
    }

    /// Cuts every utterance into partials and embeds them: `(N * speaker_embed_size)` values
    /// and the partials of each utterance.
    fn partial_embeds(
        &self,
        mels: &[MelRef],
        opts: &EmbedOptions,
    ) -> Result<(Vec<f32>, Vec<usize>)> {
        let (partials, counts) = self.build_partials(mels, opts)?;
        let (p, m, e) = (
            self.cfg.ve_partial_frames,
            self.cfg.num_mels,
            self.cfg.speaker_embed_size,
        );
        let total: usize = counts.iter().sum();
        let _span = tracing::debug_span!("VoiceEncoder", utterances = mels.len(), partials = total)
            .entered();
        // torch.chunk(ceil(N / batch_size)) chunks of ceil(N / n_chunks) partials.
        let bs = if opts.batch_size == 0 {
            total
        } else {
            opts.batch_size
        };
        let n_chunks = total.div_ceil(bs);
        let chunk = total.div_ceil(n_chunks);
        let mut embeds: Vec<f32> = Vec::with_capacity(total * e);
        for part in partials.chunks(chunk * p * m) {
            let nb = part.len() / (p * m);
            if self.cpu_kernels {
                embeds.extend(self.forward_cpu(part, nb, p)?);
            } else {
                let x = Tensor::from_slice(part, (nb, p, m), &self.device)?;
                embeds.extend(self.forward(&x)?.flatten_all()?.to_vec1::<f32>()?);
            }
        }
        Ok((embeds, counts))
    }

    /// Cuts every utterance into partials, embeds them and reduces per utterance.
    fn embed_utterances(&self, mels: &[MelRef], opts: &EmbedOptions) -> Result<Tensor> {
        let e = self.cfg.speaker_embed_size;
        let (embeds, counts) = self.partial_embeds(mels, opts)?;
        // Mean of each utterance's partial embeddings, L2-normalised (on the host, as the
        // reference does after `.cpu()`).
        let mut out = Vec::with_capacity(mels.len() * e);
        let mut start = 0;
        for (index, &n) in counts.iter().enumerate() {
            let mut mean = vec![0f32; e];
            for row in embeds[start * e..(start + n) * e].chunks_exact(e) {
                mean.iter_mut().zip(row).for_each(|(a, v)| *a += v);
            }
            mean.iter_mut().for_each(|v| *v /= n as f32);
            start += n;
            out.extend(normalized(mean).ok_or(SpeakerError::DegenerateEmbedding { index })?);
        }
        Ok(Tensor::from_vec(out, (mels.len(), e), &self.device)?)
    }

    /// Speaker embedding from L2-normalised utterance embeddings `(B, E)`: the mean,
    /// L2-normalised (`utt_to_spk_embed`). Returns `(E,)` f32 on the same device.
    pub fn utt_to_spk_embed(utt_embeds: &Tensor) -> Result<Tensor> {
        let (b, e) = utt_embeds.dims2()?;
        if b == 0 {
            return Err(invalid("utterance embeddings", "none given"));
        }
        let host = utt_embeds.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let mut mean = vec![0f32; e];
        for row in &host {
            mean.iter_mut().zip(row).for_each(|(a, v)| *a += v);
        }
        mean.iter_mut().for_each(|v| *v /= b as f32);
        let spk = normalized(mean).ok_or(SpeakerError::DegenerateEmbedding { index: 0 })?;
        Ok(Tensor::from_vec(spk, e, utt_embeds.device())?)
    }

    /// Cosine similarity of two embeddings (`voice_similarity`): each is either a speaker
    /// embedding `(E,)` or utterance embeddings `(B, E)`, reduced with
    /// [`VoiceEncoder::utt_to_spk_embed`] first.
    pub fn voice_similarity(x: &Tensor, y: &Tensor) -> Result<f32> {
        let spk = |t: &Tensor| -> Result<Vec<f32>> {
            let t = if t.rank() == 1 {
                t.clone()
            } else {
                Self::utt_to_spk_embed(t)?
            };
            Ok(t.to_dtype(DType::F32)?.to_vec1::<f32>()?)
        };
        let (a, b) = (spk(x)?, spk(y)?);
        if a.len() != b.len() {
            return Err(invalid(
                "embeddings",
                format!("sizes {} and {} differ", a.len(), b.len()),
            ));
        }
        Ok(a.iter().zip(&b).map(|(a, b)| a * b).sum())
    }
}

/// `v / ||v||`, or `None` when the norm is 0 or not finite.
fn normalized(mut v: Vec<f32>) -> Option<Vec<f32>> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !(norm > 0.0 && norm.is_finite()) {
        return None;
    }
    v.iter_mut().for_each(|x| *x /= norm);
    Some(v)
}
