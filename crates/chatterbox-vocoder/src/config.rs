//! Hyper-parameters of `HiFTGenerator` and `ConvRNNF0Predictor` (chatterbox/models/s3gen/
//! hifigan.py and f0_predictor.py, upstream 5de7a54), with the Python argument names.
use crate::{Result, VocoderError};
use chatterbox_dsp::with_setters;

/// `HiFTGenerator.__init__`'s arguments. `Default` is the Python defaults; S3Gen's vocoder is
/// [`HiFTConfig::s3gen`].
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default)]
pub struct HiFTConfig {
    /// Mel bins of the input. Default: `80`.
    pub in_channels: usize,
    /// Channels after `conv_pre`; halved by every upsampling stage. Default: `512`.
    pub base_channels: usize,
    /// Harmonics above the fundamental in the sine source. Default: `8`.
    pub nb_harmonics: usize,
    /// Output sample rate in Hz. Default: `22050`.
    pub sampling_rate: usize,
    /// Sine amplitude of the source (`sine_amp`). Default: `0.1`.
    pub nsf_alpha: f64,
    /// Noise standard deviation in voiced regions. Default: `0.003`.
    pub nsf_sigma: f64,
    /// F0 above which a sample is voiced, in Hz. Default: `10.0`.
    pub nsf_voiced_threshold: f64,
    /// Stride of each transposed-convolution upsampling stage. Default: `[8, 8]`.
    pub upsample_rates: Vec<usize>,
    /// Kernel size of each upsampling stage. Default: `[16, 16]`.
    pub upsample_kernel_sizes: Vec<usize>,
    /// The output iSTFT. Default: `n_fft` 16, `hop_len` 4.
    pub istft_params: IstftParams,
    /// Kernel sizes of the resblocks of each stage. Default: `[3, 7, 11]`.
    pub resblock_kernel_sizes: Vec<usize>,
    /// Dilations of those resblocks. Default: `[[1, 3, 5]; 3]`.
    pub resblock_dilation_sizes: Vec<Vec<usize>>,
    /// Kernel size of the source resblock of each stage. Default: `[7, 11]`.
    pub source_resblock_kernel_sizes: Vec<usize>,
    /// Dilations of the source resblocks. Default: `[[1, 3, 5]; 2]`.
    pub source_resblock_dilation_sizes: Vec<Vec<usize>>,
    /// Leaky-ReLU slope before each upsampling stage (the one before `conv_post` is torch's
    /// default 0.01 regardless). Default: `0.1`.
    pub lrelu_slope: f64,
    /// Output clamp. Default: `0.99`.
    pub audio_limit: f64,
    /// The F0 predictor (a module argument in Python).
    pub f0_predictor: F0PredictorConfig,
}

/// `istft_params` of [`HiFTConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct IstftParams {
    /// FFT size. Default: `16`.
    pub n_fft: usize,
    /// Hop in samples. Default: `4`.
    pub hop_len: usize,
}

/// `ConvRNNF0Predictor.__init__`'s arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct F0PredictorConfig {
    /// Outputs of the classifier. Default: `1`.
    pub num_class: usize,
    /// Mel bins. Default: `80`.
    pub in_channels: usize,
    /// Width of the five convolutions. Default: `512`.
    pub cond_channels: usize,
}

impl Default for IstftParams {
    fn default() -> Self {
        Self {
            n_fft: 16,
            hop_len: 4,
        }
    }
}

impl Default for F0PredictorConfig {
    fn default() -> Self {
        Self {
            num_class: 1,
            in_channels: 80,
            cond_channels: 512,
        }
    }
}

impl Default for HiFTConfig {
    fn default() -> Self {
        Self {
            in_channels: 80,
            base_channels: 512,
            nb_harmonics: 8,
            sampling_rate: 22050,
            nsf_alpha: 0.1,
            nsf_sigma: 0.003,
            nsf_voiced_threshold: 10.0,
            upsample_rates: vec![8, 8],
            upsample_kernel_sizes: vec![16, 16],
            istft_params: IstftParams::default(),
            resblock_kernel_sizes: vec![3, 7, 11],
            resblock_dilation_sizes: vec![vec![1, 3, 5]; 3],
            source_resblock_kernel_sizes: vec![7, 11],
            source_resblock_dilation_sizes: vec![vec![1, 3, 5]; 2],
            lrelu_slope: 0.1,
            audio_limit: 0.99,
            f0_predictor: F0PredictorConfig::default(),
        }
    }
}

with_setters!(HiFTConfig {
    with_in_channels => in_channels: usize,
    with_base_channels => base_channels: usize,
    with_nb_harmonics => nb_harmonics: usize,
    with_sampling_rate => sampling_rate: usize,
    with_nsf_alpha => nsf_alpha: f64,
    with_nsf_sigma => nsf_sigma: f64,
    with_nsf_voiced_threshold => nsf_voiced_threshold: f64,
    with_upsample_rates => upsample_rates: Vec<usize>,
    with_upsample_kernel_sizes => upsample_kernel_sizes: Vec<usize>,
    with_istft_params => istft_params: IstftParams,
    with_resblock_kernel_sizes => resblock_kernel_sizes: Vec<usize>,
    with_resblock_dilation_sizes => resblock_dilation_sizes: Vec<Vec<usize>>,
    with_source_resblock_kernel_sizes => source_resblock_kernel_sizes: Vec<usize>,
    with_source_resblock_dilation_sizes => source_resblock_dilation_sizes: Vec<Vec<usize>>,
    with_lrelu_slope => lrelu_slope: f64,
    with_audio_limit => audio_limit: f64,
    with_f0_predictor => f0_predictor: F0PredictorConfig,
});

with_setters!(IstftParams {
    with_n_fft => n_fft: usize,
    with_hop_len => hop_len: usize,
});

with_setters!(F0PredictorConfig {
    with_num_class => num_class: usize,
    with_in_channels => in_channels: usize,
    with_cond_channels => cond_channels: usize,
});

impl HiFTConfig {
    /// The vocoder of S3Gen (`S3Token2Wav.mel2wav`): 24 kHz, upsampling 8 x 5 x 3 x hop 4 =
    /// 480 samples per mel frame, 512 base channels, the default F0 predictor.
    pub fn s3gen() -> Self {
        Self {
            sampling_rate: 24_000,
            upsample_rates: vec![8, 5, 3],
            upsample_kernel_sizes: vec![16, 11, 7],
            source_resblock_kernel_sizes: vec![7, 7, 11],
            source_resblock_dilation_sizes: vec![vec![1, 3, 5]; 3],
            ..Self::default()
        }
    }

    /// The output sample rate in Hz as a `u32`, the type every other chatterbox crate uses for
    /// sample rates ([`sampling_rate`](Self::sampling_rate) keeps the Python name and `usize`).
    /// Saturates at `u32::MAX`, which [`validate`](Self::validate) refuses.
    pub fn sample_rate(&self) -> u32 {
        u32::try_from(self.sampling_rate).unwrap_or(u32::MAX)
    }

    /// Output samples per mel frame: the product of the upsampling rates times the iSTFT hop.
    pub fn samples_per_frame(&self) -> usize {
        self.upsample_rates.iter().product::<usize>() * self.istft_params.hop_len
    }

    /// Checks that the lists agree in length and the channel counts divide.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(VocoderError::InvalidConfig(m));
        let n = self.upsample_rates.len();
        if n == 0 || self.upsample_kernel_sizes.len() != n {
            return bad(format!(
                "upsample_rates ({n}) and upsample_kernel_sizes ({}) must be non-empty and of equal length",
                self.upsample_kernel_sizes.len()
            ));
        }
        if self.source_resblock_kernel_sizes.len() != n
            || self.source_resblock_dilation_sizes.len() != n
        {
            return bad(format!(
                "one source resblock per upsampling stage ({n}): got {} kernel sizes and {} dilation lists",
                self.source_resblock_kernel_sizes.len(),
                self.source_resblock_dilation_sizes.len()
            ));
        }
        if self.resblock_kernel_sizes.is_empty()
            || self.resblock_kernel_sizes.len() != self.resblock_dilation_sizes.len()
        {
            return bad("resblock_kernel_sizes and resblock_dilation_sizes must be non-empty and of equal length".into());
        }
        if !self.base_channels.is_multiple_of(1 << n) || self.base_channels >> n == 0 {
            return bad(format!(
                "base_channels {} must be divisible by 2^{n}",
                self.base_channels
            ));
        }
        for (&u, &k) in self.upsample_rates.iter().zip(&self.upsample_kernel_sizes) {
            if u == 0 || k < u {
                return bad(format!("upsample kernel {k} must be >= its rate {u} > 0"));
            }
        }
        let IstftParams { n_fft, hop_len } = self.istft_params;
        if n_fft < 2 || n_fft % 2 != 0 || hop_len == 0 || hop_len > n_fft {
            return bad(format!(
                "istft n_fft {n_fft} must be even and hop_len {hop_len} in 1..=n_fft"
            ));
        }
        if self.sampling_rate == 0 || u32::try_from(self.sampling_rate).is_err() {
            return bad(format!(
                "sampling_rate {} must be in 1..={}",
                self.sampling_rate,
                u32::MAX
            ));
        }
        if self.f0_predictor.in_channels != self.in_channels || self.f0_predictor.num_class != 1 {
            return bad(format!(
                "the F0 predictor must read the {} mel bins and predict 1 class (got {} and {})",
                self.in_channels, self.f0_predictor.in_channels, self.f0_predictor.num_class
            ));
        }
        Ok(())
    }
}
