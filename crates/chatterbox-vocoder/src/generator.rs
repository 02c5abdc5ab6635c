//! Port of `HiFTGenerator` from chatterbox/models/s3gen/hifigan.py (upstream 5de7a54).
use crate::config::HiFTConfig;
use crate::conv::{leaky_relu, Act, Conv1d, ConvCfg, ConvTranspose1d, Norm};
use crate::error::invalid;
use crate::f0_predictor::ConvRNNF0Predictor;
use crate::resblock::ResBlock;
use crate::source::{SineDraws, SourceModuleHnNSF};
use crate::stft::{InverseStft, SourceStft};
use crate::weights::record_weight_shapes;
use crate::Result;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use rand::Rng;
use std::collections::HashMap;

/// HiFTNet: neural source filter + iSTFTNet (<https://arxiv.org/abs/2309.09493>). Mel
/// `(B, 80, T)` in, `(B, T * 480)` samples in `[-0.99, 0.99]` out for S3Gen's configuration.
///
/// [`inference`](Self::inference) is the reference's `HiFTGenerator.inference`: F0 from the
/// mel, the sine source from the F0, then [`decode`](Self::decode). It returns the source too,
/// which a streaming caller passes back as `cache_source` for the next chunk.
#[derive(Debug, Clone)]
pub struct HiFTGenerator {
    cfg: HiFTConfig,
    m_source: SourceModuleHnNSF,
    conv_pre: Conv1d,
    ups: Vec<ConvTranspose1d>,
    source_downs: Vec<Conv1d>,
    source_resblocks: Vec<ResBlock>,
    resblocks: Vec<ResBlock>,
    conv_post: Conv1d,
    f0_predictor: ConvRNNF0Predictor,
    stft: SourceStft,
    istft: InverseStft,
    /// Use the fused CPU kernels for CPU tensors.
    cpu_kernels: bool,
}

/// torch's `F.leaky_relu` default slope, which HiFT uses before `conv_post`.
const DEFAULT_LRELU_SLOPE: f64 = 0.01;

impl HiFTGenerator {
    /// Builds the generator and its F0 predictor from `vb` (S3Gen keeps them under `mel2wav`).
    pub fn new(cfg: &HiFTConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate()?;
        #[cfg(feature = "cuda")]
        if let candle_core::Device::Cuda(dev) = vb.device() {
            // compile and load the fused kernels now, not inside the first inference
            crate::cuda::load(dev)?;
        }
        let n_fft = cfg.istft_params.n_fft;
        let base = cfg.base_channels;
        let m_source = SourceModuleHnNSF::new(
            cfg.sampling_rate,
            cfg.nb_harmonics,
            cfg.nsf_alpha,
            cfg.nsf_sigma,
            cfg.nsf_voiced_threshold,
            vb.pp("m_source"),
        )?;
        let conv_pre = Conv1d::new(
            vb.pp("conv_pre"),
            cfg.in_channels,
            base,
            7,
            ConvCfg::same(7, 1),
            Norm::Weight,
        )?;
        let mut ups = Vec::new();
        for (i, (&u, &k)) in cfg
            .upsample_rates
            .iter()
            .zip(&cfg.upsample_kernel_sizes)
            .enumerate()
        {
            ups.push(ConvTranspose1d::new(
                vb.pp("ups").pp(i),
                base >> i,
                base >> (i + 1),
                k,
                u,
            )?);
        }
        // downsample_cum_rates[::-1]: the source STFT frames down to each stage's rate.
        let n = cfg.upsample_rates.len();
        let mut down_rates = vec![1usize; n];
        for i in 1..n {
            down_rates[i] = down_rates[i - 1] * cfg.upsample_rates[n - i];
        }
        down_rates.reverse();
        let mut source_downs = Vec::new();
        let mut source_resblocks = Vec::new();
        for (i, &u) in down_rates.iter().enumerate() {
            let ch = base >> (i + 1);
            let (k, conv) = if u == 1 {
                (
                    1,
                    ConvCfg {
                        padding: 0,
                        stride: 1,
                        dilation: 1,
                    },
                )
            } else {
                (
                    2 * u,
                    ConvCfg {
                        padding: u / 2,
                        stride: u,
                        dilation: 1,
                    },
                )
            };
            source_downs.push(Conv1d::new(
                vb.pp("source_downs").pp(i),
                n_fft + 2,
                ch,
                k,
                conv,
                Norm::None,
            )?);
            source_resblocks.push(ResBlock::new(
                ch,
                cfg.source_resblock_kernel_sizes[i],
                &cfg.source_resblock_dilation_sizes[i],
                vb.pp("source_resblocks").pp(i),
            )?);
        }
        let mut resblocks = Vec::new();
        for i in 0..n {
            let ch = base >> (i + 1);
            for (k, d) in cfg
                .resblock_kernel_sizes
                .iter()
                .zip(&cfg.resblock_dilation_sizes)
            {
                let j = resblocks.len();
                resblocks.push(ResBlock::new(ch, *k, d, vb.pp("resblocks").pp(j))?);
            }
        }
        let conv_post = Conv1d::new(
            vb.pp("conv_post"),
            base >> n,
            n_fft + 2,
            7,
            ConvCfg::same(7, 1),
            Norm::Weight,
        )?;
        let f0_predictor = ConvRNNF0Predictor::new(&cfg.f0_predictor, vb.pp("f0_predictor"))?;
        let hop = cfg.istft_params.hop_len;
        Ok(Self {
            cfg: cfg.clone(),
            m_source,
            conv_pre,
            ups,
            source_downs,
            source_resblocks,
            resblocks,
            conv_post,
            f0_predictor,
            stft: SourceStft::new(n_fft, hop, vb.device())?,
            istft: InverseStft::new(n_fft, hop, vb.device())?,
            cpu_kernels: true,
        })
    }

    /// Builds the generator from a state dict: the tensors of `mel2wav.*` in S3Gen's checkpoint
    /// with that prefix removed (`conv_pre.parametrizations.weight.original0`, ...), in any
    /// float dtype, on any device (they are converted to f32 on `device`). Missing or
    /// mis-shaped tensors are [`VocoderError`](crate::VocoderError)s naming the key; extra
    /// entries are ignored.
    pub fn from_state_dict(
        cfg: &HiFTConfig,
        tensors: HashMap<String, Tensor>,
        device: &Device,
    ) -> Result<Self> {
        Self::new(cfg, VarBuilder::from_tensors(tensors, DType::F32, device))
    }

    /// Every tensor the generator of `cfg` reads and its shape, sorted by name (torch's
    /// `(out, in, kernel)` layout), with weight-normed convolutions under their plain `weight`
    /// key (after `remove_weight_norm`; a state dict may give the weight-norm pair instead, see
    /// the crate docs). A state dict with these keys builds the generator. Costs one build with
    /// zero weights on the CPU.
    pub fn weight_shapes(cfg: &HiFTConfig) -> Result<Vec<(String, Vec<usize>)>> {
        record_weight_shapes(|vb| Self::new(cfg, vb).map(drop))
    }

    /// On the CPU the convolutions run as fused implicit-GEMM kernels with the Snake activation,
    /// bias and residual folded in (the default). `false` runs the same plain candle ops as the
    /// GPU backends, to compare the two.
    pub fn set_cpu_kernels(&mut self, enabled: bool) {
        self.cpu_kernels = enabled;
    }

    /// [`HiFTGenerator::set_cpu_kernels`] as a builder, like the speaker encoders'
    /// `with_cpu_kernels`.
    pub fn with_cpu_kernels(mut self, enabled: bool) -> Self {
        self.cpu_kernels = enabled;
        self
    }

    /// Whether the CPU kernels are on.
    pub fn cpu_kernels(&self) -> bool {
        self.cpu_kernels
    }

    /// The configuration.
    pub fn config(&self) -> &HiFTConfig {
        &self.cfg
    }

    /// The source module (sine generator + merge).
    pub fn m_source(&self) -> &SourceModuleHnNSF {
        &self.m_source
    }

    /// Checks a `(B, in_channels, T)` mel: right bin count, at least one frame, finite values.
    /// The finiteness check reads one scalar back from the device.
    fn check_mel(&self, mel: &Tensor) -> Result<(usize, usize)> {
        let (b, c, t) = mel.dims3().map_err(|_| {
            invalid(
                "mel",
                format!(
                    "expected (batch, {}, frames), got {:?}",
                    self.cfg.in_channels,
                    mel.dims()
                ),
            )
        })?;
        if c != self.cfg.in_channels {
            return Err(invalid(
                "mel",
                format!(
                    "expected {} mel bins, got {c} (shape {:?})",
                    self.cfg.in_channels,
                    mel.dims()
                ),
            ));
        }
        if b == 0 || t == 0 {
            return Err(invalid(
                "mel",
                format!("no frames (shape {:?})", mel.dims()),
            ));
        }
        if mel.dtype() != DType::F32 {
            return Err(invalid(
                "mel",
                format!("expected f32, got {:?}", mel.dtype()),
            ));
        }
        let sum = mel.sum_all()?.to_scalar::<f32>()?;
        if !sum.is_finite() {
            return Err(invalid("mel", "contains NaN or infinite values"));
        }
        Ok((b, t))
    }

    /// `(B, 80, T)` mel to `(B, T)` F0 in Hz (`f0_predictor`).
    pub fn f0(&self, mel: &Tensor) -> Result<Tensor> {
        self.check_mel(mel)?;
        Ok(self.f0_predictor.forward_with(mel, self.cpu_kernels)?)
    }

    /// The `(B, 1, T * samples_per_frame)` excitation for a frame-rate F0 `(B, T)`, with the
    /// first samples replaced by `cache_source` (`(B, 1, L)`, `L` up to the output length).
    pub fn source(
        &self,
        f0: &Tensor,
        draws: &SineDraws,
        cache_source: Option<&Tensor>,
    ) -> Result<Tensor> {
        let s = self
            .m_source
            .forward(f0, self.cfg.samples_per_frame(), draws)?;
        match cache_source {
            Some(cache) if cache.dim(2).unwrap_or(0) > 0 => {
                let n = s.dim(2)?;
                let (cb, cc, cl) = cache.dims3()?;
                if cb != s.dim(0)? || cc != 1 || cl > n {
                    return Err(invalid(
                        "cache_source",
                        format!(
                            "expected (batch {}, 1, <= {n}), got {:?}",
                            s.dim(0)?,
                            cache.dims()
                        ),
                    ));
                }
                Ok(Tensor::cat(&[cache, &s.narrow(2, cl, n - cl)?], 2)?)
            }
            _ => Ok(s),
        }
    }

    /// `HiFTGenerator.inference` with the random draws given: returns the `(B, N)` waveform and
    /// the `(B, 1, N)` source (to pass as the next chunk's `cache_source`).
    pub fn inference_with_draws(
        &self,
        mel: &Tensor,
        draws: &SineDraws,
        cache_source: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        self.check_mel(mel)?;
        let f0 = self.f0_predictor.forward_with(mel, self.cpu_kernels)?;
        let s = self.source(&f0, draws, cache_source)?;
        let wav = self.decode_unchecked(mel, &s)?;
        Ok((wav, s))
    }

    /// `HiFTGenerator.inference`, drawing the sine phases and noise from `rng` (so the output is
    /// deterministic for a seeded generator). See [`inference_with_draws`](Self::inference_with_draws).
    pub fn inference<R: Rng + ?Sized>(
        &self,
        mel: &Tensor,
        cache_source: Option<&Tensor>,
        rng: &mut R,
    ) -> Result<(Tensor, Tensor)> {
        let (b, t) = self.check_mel(mel)?;
        let draws = SineDraws::sample(
            rng,
            b,
            self.m_source.sine_gen().harmonics(),
            t * self.cfg.samples_per_frame(),
            mel.device(),
        )?;
        let f0 = self.f0_predictor.forward_with(mel, self.cpu_kernels)?;
        let s = self.source(&f0, &draws, cache_source)?;
        let wav = self.decode_unchecked(mel, &s)?;
        Ok((wav, s))
    }

    /// `HiFTGenerator.decode`: mel `(B, 80, T)` and source `(B, 1, T * samples_per_frame)` to
    /// the `(B, N)` waveform.
    pub fn decode(&self, mel: &Tensor, source: &Tensor) -> Result<Tensor> {
        let (b, t) = self.check_mel(mel)?;
        let n = t * self.cfg.samples_per_frame();
        if source.dims() != [b, 1, n] {
            return Err(invalid(
                "source",
                format!(
                    "expected ({b}, 1, {n}) for {t} frames, got {:?}",
                    source.dims()
                ),
            ));
        }
        self.decode_unchecked(mel, source)
    }

    fn decode_unchecked(&self, mel: &Tensor, source: &Tensor) -> Result<Tensor> {
        let fast = self.cpu_kernels;
        let s_stft = self.stft.forward(&source.squeeze(1)?)?;
        let n = self.ups.len();
        let k = self.cfg.resblock_kernel_sizes.len();
        let mut x = self.conv_pre.forward_with(mel, Act::Identity, None, fast)?;
        for i in 0..n {
            let si = self.source_downs[i].forward_with(&s_stft, Act::Identity, None, fast)?;
            let si = self.source_resblocks[i].forward_with(&si, fast)?;
            x = leaky_relu(&x, self.cfg.lrelu_slope)?;
            // the last upsampling has nn.ReflectionPad1d((1, 0)) after it
            x = self.ups[i].forward_sum(&x, i == n - 1, &si)?;
            // `xs = xs + resblock_j(x)`, then `xs / num_kernels` (a true division, as
            // torch does it); on CUDA the blocks run together and the sum is one pass.
            #[cfg(feature = "cuda")]
            let grouped =
                crate::resblock::forward_stage_cuda(&self.resblocks[i * k..(i + 1) * k], &x)?;
            #[cfg(not(feature = "cuda"))]
            let grouped: Option<Tensor> = None;
            x = match grouped {
                Some(y) => y,
                None => {
                    let mut xs: Option<Tensor> = None;
                    for j in 0..k {
                        let div = (j + 1 == k).then_some(k as f32);
                        let block = &self.resblocks[i * k + j];
                        xs = Some(block.forward_sum(&x, fast, xs.as_ref(), div)?);
                    }
                    xs.unwrap_or(x)
                }
            };
        }
        x = self
            .conv_post
            .forward_with(&x, Act::LeakyRelu(DEFAULT_LRELU_SLOPE), None, fast)?;
        let bins = self.cfg.istft_params.n_fft / 2 + 1;
        let spectrum = |x: &Tensor| -> candle_core::Result<Tensor> {
            #[cfg(feature = "cuda")]
            if crate::cuda::applies(x) {
                return crate::cuda_glue::spectrum(x, bins);
            }
            let magnitude = x.narrow(1, 0, bins)?.exp()?.minimum(1e2f32)?;
            let phase = x.narrow(1, bins, bins)?.sin()?;
            let real = (&magnitude * phase.cos()?)?;
            let imag = (&magnitude * phase.sin()?)?;
            Tensor::cat(&[&real, &imag], 1)
        };
        let wav = self.istft.forward(&spectrum(&x)?)?;
        let limit = self.cfg.audio_limit;
        Ok(wav.clamp(-limit, limit)?)
    }
}
