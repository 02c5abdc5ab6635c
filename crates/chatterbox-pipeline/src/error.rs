//! The crate's error type: loading errors (a checkpoint directory, a voice file) apart from
//! run errors (bad input, a component failing), each naming what went wrong.
use std::path::PathBuf;

/// Everything that can go wrong in chatterbox-pipeline. Bad input is an error, never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    // ---- loading
    /// A checkpoint directory lacks a file the model needs.
    #[error("{dir}: missing {file} (the {what}); is this a {variant} checkpoint directory?")]
    MissingFile {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The file name expected in it.
        file: String,
        /// What the file holds.
        what: &'static str,
        /// The model variant being loaded.
        variant: &'static str,
    },
    /// A checkpoint file exists but cannot be used (corrupt, wrong variant, missing tensors).
    #[error("cannot load {path}: {source}")]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: Box<PipelineError>,
    },
    /// A saved voice (conditionals) file that is not one this crate reads.
    #[error("invalid voice file {path}: {reason}")]
    InvalidConditionals {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Downloading from the Hugging Face hub failed.
    #[error("hub download of {repo}/{file} failed: {reason}")]
    Hub {
        /// The hub repository.
        repo: String,
        /// The file.
        file: String,
        /// What the hub client said.
        reason: String,
    },
    /// Perth's weights (for the watermark) are not where they were looked for.
    #[error(
        "the Perth watermark weights were not found: {why}. Give the path of \
         perth_net_250000.pth.tar (in the resemble-perth wheel on PyPI, under \
         perth/perth_net/pretrained/implicit/) with --watermark-weights PATH (or \
         CHATTERBOX_WATERMARK_WEIGHTS), or turn the watermark off with --no-watermark"
    )]
    WatermarkWeights {
        /// Where they were looked for, and why that failed.
        why: String,
    },

    // ---- running
    /// `generate` without a voice: no `prepare_conditionals` and no built-in `conds.pt`.
    #[error(
        "no voice: call prepare_conditionals with a reference clip first (this checkpoint has no built-in conds.pt)"
    )]
    NoConditionals,
    /// A reference clip too short for the model.
    #[error("reference clip is {seconds:.2} s long; {model} needs more than {min_seconds} s")]
    ReferenceTooShort {
        /// Duration of the clip.
        seconds: f64,
        /// The minimum.
        min_seconds: f64,
        /// The model that requires it.
        model: &'static str,
    },
    /// A reference clip that is digital silence.
    #[error("{what} is silent (all {len} samples are zero)")]
    SilentAudio {
        /// The clip.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// An option out of range, or an input that cannot be used.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// The option or input.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// A batched decode step failed (a device error): every stream decoding in it fails with
    /// this, as their state is unknown.
    #[error("the batched decode step failed: {0}")]
    BatchStep(String),
    /// A flow or HiFT call shared by several streams of a batch failed: each of them fails
    /// with this.
    #[error("the batched flow or vocoder call failed: {0}")]
    FlowBatch(String),
    /// T3 produced no speech token to synthesise.
    #[error("T3 generated no speech tokens for chunk {chunk} ({text:?})")]
    NoSpeechTokens {
        /// Index of the text chunk.
        chunk: usize,
        /// The chunk's text.
        text: String,
    },
    /// The generation was stopped through its [`crate::Cancel`].
    #[error("the generation was cancelled")]
    Cancelled,
    /// The watermarker failed.
    #[error("watermarker: {0}")]
    Watermark(String),

    // ---- components
    /// Perth (the watermark).
    #[error("watermark: {0}")]
    Perth(#[from] chatterbox_watermark::WatermarkError),
    /// Tensor operations.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// Audio I/O and signal processing.
    #[error(transparent)]
    Dsp(#[from] chatterbox_dsp::DspError),
    /// Text normalisation and tokenizers (includes unknown languages).
    #[error(transparent)]
    Text(#[from] chatterbox_text::TextError),
    /// VoiceEncoder and CAMPPlus.
    #[error(transparent)]
    Speaker(#[from] chatterbox_speaker::SpeakerError),
    /// Speech tokenizer and flow.
    #[error(transparent)]
    S3Gen(#[from] chatterbox_s3gen::S3GenError),
    /// HiFT vocoder.
    #[error(transparent)]
    Vocoder(#[from] chatterbox_vocoder::VocoderError),
    /// T3.
    #[error(transparent)]
    T3(#[from] chatterbox_t3::T3Error),
    /// safetensors serialisation.
    #[error("safetensors: {0}")]
    Safetensors(String),
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, PipelineError>;

pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> PipelineError {
    PipelineError::InvalidInput {
        what,
        reason: reason.into(),
    }
}

/// Wraps an error raised while loading `path`.
pub(crate) fn loading(path: &std::path::Path) -> impl FnOnce(PipelineError) -> PipelineError + '_ {
    move |e| PipelineError::Checkpoint {
        path: path.to_path_buf(),
        source: Box::new(e),
    }
}
