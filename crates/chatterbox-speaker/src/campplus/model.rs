//! Port of `CAMPPlus` and `extract_feature` in chatterbox/models/s3gen/xvector.py
//! (upstream 5de7a54).
use super::batch_norm::BatchNorm;
use super::cpu::CpuCAMPPlus;
use super::dense_block::CAMDenseTDNNBlock;
use super::fcm::{fcm_out_height, FCM};
use super::layers::{statistics_pooling, DenseLayer, TDNNLayer, TransitLayer};
use super::CAMPPlusConfig;
use crate::error::invalid;
use crate::{Result, SpeakerError};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_dsp::features::{FbankOptions, KaldiFbank};
use chatterbox_dsp::{check_signal, Matrix};

/// Dense blocks: (layers, kernel, dilation), hard-coded in the reference.
const BLOCKS: [(usize, usize, usize); 3] = [(12, 3, 1), (24, 3, 2), (16, 3, 2)];
/// The sample rate of [`CAMPPlus::inference`] (the fbank's 16 kHz framing).
const SAMPLE_RATE: u32 = 16000;
/// Frames the statistics pooling needs after the stride-2 TDNN layer (the unbiased standard
/// deviation of one frame is NaN in the reference).
const MIN_POOLED_FRAMES: usize = 2;

/// CAM++ speaker embedding network: FCM front end, a stride-2 TDNN layer, three CAM dense
/// blocks with transit layers, statistics pooling and a dense layer, all BatchNorms in
/// inference mode (folded into the adjacent convolutions where no ReLU separates them).
///
/// Loads from the `speaker_encoder.*` keys of `s3gen.safetensors`: pass
/// `vb.pp("speaker_encoder")`.
#[derive(Debug, Clone)]
pub struct CAMPPlus {
    cfg: CAMPPlusConfig,
    head: FCM,
    tdnn: TDNNLayer,
    blocks: Vec<(CAMDenseTDNNBlock, TransitLayer)>,
    out_nonlinear: BatchNorm,
    dense: DenseLayer,
    fbank: KaldiFbank,
    /// The network packed for the CPU kernels (weights on the CPU in f32).
    cpu: Option<std::sync::Arc<CpuCAMPPlus>>,
    device: Device,
    dtype: DType,
    cpu_kernels: bool,
}

impl CAMPPlus {
    /// Builds the network from `vb` (the `speaker_encoder` prefix of the S3Gen checkpoint).
    pub fn new(cfg: &CAMPPlusConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        let head = FCM::new(vb.pp("head"))?;
        let xv = vb.pp("xvector");
        let mut channels = 32 * fcm_out_height(cfg.feat_dim);
        let tdnn = TDNNLayer::new(channels, cfg.init_channels, 5, 2, 1, xv.pp("tdnn"))?;
        channels = cfg.init_channels;
        let mut blocks = Vec::with_capacity(BLOCKS.len());
        for (i, (num_layers, kernel, dilation)) in BLOCKS.into_iter().enumerate() {
            let block = CAMDenseTDNNBlock::new(
                num_layers,
                channels,
                cfg.growth_rate,
                cfg.bn_size * cfg.growth_rate,
                kernel,
                dilation,
                xv.pp(format!("block{}", i + 1)),
            )?;
            channels = block.c_out();
            let transit =
                TransitLayer::new(channels, channels / 2, xv.pp(format!("transit{}", i + 1)))?;
            channels /= 2;
            blocks.push((block, transit));
        }
        let out_nonlinear = BatchNorm::new(channels, true, xv.pp("out_nonlinear").pp("batchnorm"))?;
        let dense = DenseLayer::new(2 * channels, cfg.embedding_size, xv.pp("dense"))?;
        let cpu = if vb.device().is_cpu() && vb.dtype() == DType::F32 {
            let net =
                CpuCAMPPlus::new(&head, &tdnn, &blocks, &out_nonlinear, &dense, cfg.feat_dim)?;
            Some(std::sync::Arc::new(net))
        } else {
            None
        };
        Ok(Self {
            cfg: cfg.clone(),
            head,
            tdnn,
            blocks,
            out_nonlinear,
            dense,
            fbank: KaldiFbank::new(FbankOptions::campplus())?,
            cpu_kernels: cpu.is_some(),
            cpu,
            device: vb.device().clone(),
            dtype: vb.dtype(),
        })
    }

    /// Chooses whether, on the CPU in f32, the network runs in the crate's plain-Rust kernels
    /// (`true`, the default there) or in candle tensor ops (what CUDA and Metal run). Has no
    /// effect on other devices or dtypes.
    pub fn with_cpu_kernels(mut self, enabled: bool) -> Self {
        self.cpu_kernels = enabled && self.cpu.is_some();
        self
    }

    /// Whether the crate's CPU kernels run (see [`CAMPPlus::with_cpu_kernels`]).
    pub fn cpu_kernels(&self) -> bool {
        self.cpu_kernels
    }

    /// The sample rate [`CAMPPlus::inference`] takes: 16000 Hz.
    pub fn sample_rate(&self) -> u32 {
        SAMPLE_RATE
    }

    /// The configuration.
    pub fn config(&self) -> &CAMPPlusConfig {
        &self.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The features of one 16 kHz clip (`extract_feature`): 80-bin Kaldi fbank minus its
    /// per-bin mean over time, `(frames, 80)`.
    pub fn extract_feature(&self, wav: &[f32]) -> Result<Matrix> {
        Ok(self.fbank.compute(wav)?)
    }

    /// The x-vector of one 16 kHz clip (`inference` on a batch of one): `(1, embedding_size)`
    /// f32.
    ///
    /// Errors: a sample rate other than 16 kHz, an empty clip, a NaN or infinite sample, a
    /// clip of digital silence (the reference returns a constant vector), and clips shorter
    /// than 720 samples (45 ms; the reference returns NaN below 3 fbank frames).
    pub fn inference(&self, wav: &[f32], sample_rate: u32) -> Result<Tensor> {
        self.embed_clips(&[wav], sample_rate, |_| "CAMPPlus input".to_string())
    }

    /// The x-vectors of several 16 kHz clips (`inference(audio_list)`): `(B, embedding_size)`
    /// f32, row `i` for clip `i`.
    ///
    /// As in the reference (`extract_feature` + `pad_list`), each clip's features are
    /// mean-normalised on their own, then zero-padded at the end to the longest clip's frame
    /// count, and the network runs on the padded batch without a mask: the statistics pooling
    /// averages over the padding, so **a clip shorter than the longest gets a different
    /// x-vector than [`CAMPPlus::inference`] gives it alone**. The longest clips (and every
    /// clip of a batch of equal lengths) get the same one. Embed clips one at a time to avoid
    /// the padding.
    ///
    /// Errors: no clips, and for any clip those of [`CAMPPlus::inference`] (naming the clip's
    /// index).
    pub fn inference_batch(&self, wavs: &[&[f32]], sample_rate: u32) -> Result<Tensor> {
        if wavs.is_empty() {
            return Err(invalid("CAMPPlus input", "no clips"));
        }
        self.embed_clips(wavs, sample_rate, |i| format!("CAMPPlus input {i}"))
    }

    /// Checks the clips, computes their features, zero-pads them to the longest and embeds the
    /// batch. `what(i)` names clip `i` in errors.
    fn embed_clips(
        &self,
        wavs: &[&[f32]],
        sample_rate: u32,
        what: impl Fn(usize) -> String,
    ) -> Result<Tensor> {
        if sample_rate != SAMPLE_RATE {
            return Err(SpeakerError::UnsupportedSampleRate {
                what: "CAMPPlus input".into(),
                got: sample_rate,
                expected: SAMPLE_RATE,
            });
        }
        let min = self.min_samples();
        for (i, wav) in wavs.iter().enumerate() {
            check_signal(&what(i), wav)?;
            if wav.iter().all(|&v| v == 0.0) {
                return Err(SpeakerError::SilentAudio {
                    what: what(i),
                    len: wav.len(),
                });
            }
            if wav.len() < min {
                return Err(SpeakerError::TooShort {
                    what: what(i),
                    len: wav.len(),
                    min,
                });
            }
        }
        if self.cfg.feat_dim != FbankOptions::campplus().num_mel_bins {
            return Err(SpeakerError::UnsupportedConfig {
                field: "feat_dim",
                reason: "inference computes 80-bin filterbanks (extract_feature)".into(),
            });
        }
        let feats = wavs
            .iter()
            .map(|wav| self.extract_feature(wav))
            .collect::<Result<Vec<_>>>()?;
        let b = feats.len();
        let f = self.cfg.feat_dim;
        let t = feats.iter().map(Matrix::rows).max().unwrap_or(0);
        let _span = tracing::debug_span!(
            "CAMPPlus",
            clips = b,
            frames = t,
            cpu_kernels = self.cpu_kernels
        )
        .entered();
        // `pad_list(features, pad_value=0)`: each clip's frames, then zero frames up to `t`.
        let padded = |feat: Matrix| -> Vec<f32> {
            let mut x = feat.into_vec();
            x.resize(t * f, 0.0);
            x
        };
        if let (true, Some(cpu)) = (self.cpu_kernels, &self.cpu) {
            let mut out = Vec::with_capacity(b * self.cfg.embedding_size);
            for feat in feats {
                out.extend(cpu.forward(&padded(feat), t));
            }
            return Ok(Tensor::from_vec(
                out,
                (b, self.cfg.embedding_size),
                &self.device,
            )?);
        }
        let x: Vec<f32> = feats.into_iter().flat_map(padded).collect();
        let x = Tensor::from_vec(x, (b, t, f), &self.device)?;
        self.forward(&x)
    }

    /// Shortest clip [`CAMPPlus::inference`] accepts, in samples at 16 kHz.
    pub fn min_samples(&self) -> usize {
        let opts = self.fbank.options();
        let frame = (opts.sample_frequency * opts.frame_length_ms * 0.001) as usize;
        let shift = (opts.sample_frequency * opts.frame_shift_ms * 0.001) as usize;
        let mut frames = 1;
        while self.tdnn.t_out(frames) < MIN_POOLED_FRAMES {
            frames += 1;
        }
        frame + (frames - 1) * shift
    }

    /// Embeddings of a batch of features `(B, T, feat_dim)` (`forward`; any device, moved to the
    /// model's): `(B, embedding_size)` f32 on the model's device. Utterances of different lengths must be zero-padded to a common `T`, which (as in
    /// the reference) changes their embeddings; embed them one at a time to avoid that.
    pub fn forward(&self, features: &Tensor) -> Result<Tensor> {
        let (b, t, f) = features.dims3()?;
        if f != self.cfg.feat_dim || b == 0 {
            return Err(invalid(
                "features",
                format!(
                    "shape ({b}, {t}, {f}), expected (B > 0, T, {})",
                    self.cfg.feat_dim
                ),
            ));
        }
        if self.tdnn.t_out(t) < MIN_POOLED_FRAMES {
            return Err(invalid(
                "features",
                format!("{t} frames is too short, need at least 3 (statistics pooling)"),
            ));
        }
        if let (true, Some(cpu)) = (self.cpu_kernels, &self.cpu) {
            let x = features
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            let mut out = Vec::with_capacity(b * self.cfg.embedding_size);
            for item in x.chunks_exact(f * t) {
                out.extend(cpu.forward(item, t));
            }
            return Ok(Tensor::from_vec(
                out,
                (b, self.cfg.embedding_size),
                &self.device,
            )?);
        }
        let x = features
            .to_device(&self.device)?
            .to_dtype(self.dtype)?
            .transpose(1, 2)?
            .contiguous()?;
        let mut x = self.tdnn.forward(&self.head.forward(&x)?)?;
        for (block, transit) in &self.blocks {
            x = transit.forward(&block.forward(&x)?)?;
        }
        let x = self.out_nonlinear.forward(&x)?.relu()?;
        let x = self.dense.forward(&statistics_pooling(&x)?)?;
        Ok(x.to_dtype(DType::F32)?)
    }
}
