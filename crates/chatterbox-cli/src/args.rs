//! The command line: subcommands, options and their help texts (clap).
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const ABOUT: &str = "Text to speech with voice cloning, and voice conversion, with Resemble AI's \
Chatterbox models (native Rust, CPU/CUDA/Metal).";

const LONG_ABOUT: &str = "\
Text to speech with voice cloning, and voice conversion, with Resemble AI's Chatterbox models.

The first run downloads the model from the Hugging Face hub (a few GB, cached in
~/.cache/huggingface); --model-dir DIR uses a checkpoint directory on disk instead.";

const EXAMPLES: &str = "\
Examples:
  # Speak a sentence in the model's built-in voice
  chatterbox speak \"Hello from Chatterbox.\" -o hello.wav

  # Clone a voice from a short reference clip (5 to 10 s of clean speech)
  chatterbox speak \"Nice to meet you.\" --voice me.wav -o me-hello.wav

  # Other languages with the multilingual model
  chatterbox speak \"Bonjour tout le monde.\" --model multilingual --language fr -o bonjour.wav

  # Read a long text from a file (or from stdin with `-`) with the fast Turbo model
  chatterbox speak --file chapter1.txt --model turbo --voice narrator.wav -o chapter1.wav
  cat notes.txt | chatterbox speak - -o notes.wav

  # Hear the speech while it is generated
  chatterbox speak --file chapter1.txt --stream -o - | aplay

  # Offline, from a checkpoint directory, on a GPU
  chatterbox speak \"Hi.\" --model-dir ./chatterbox-ckpt --device cuda -o hi.wav

  # Voice conversion: the words of source.wav, spoken in the voice of target.wav
  chatterbox vc source.wav --target target.wav -o converted.wav

  # An OpenAI-compatible speech server (POST /v1/audio/speech) with a voice library
  chatterbox serve --model turbo --voices ./voices --port 8000";

/// `chatterbox`: the command line.
#[derive(Debug, Parser)]
#[command(
    name = "chatterbox",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = "`chatterbox --help` shows examples; `chatterbox speak --help`, `chatterbox vc --help`, `chatterbox serve --help` and `chatterbox quantize --help` every option.",
    after_long_help = EXAMPLES,
    propagate_version = true
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Synthesise speech from text, optionally in the voice of a reference clip.
    #[command(
        long_about = "Synthesise speech from text, optionally in the voice of a reference clip.\n\n\
            The text comes from the TEXT argument, from --file, or from standard input (TEXT \
            `-` or absent). Long texts are split into sentences and spoken chunk by chunk in \
            the same voice. Sampling options left out take the chosen model's defaults (the \
            Python reference's).",
        after_long_help = SPEAK_EXAMPLES
    )]
    Speak(Box<SpeakArgs>),
    /// Voice conversion: re-speak a recording in another voice.
    #[command(
        long_about = "Voice conversion: the words and timing of SOURCE, re-synthesised in the \
            voice of --target (the first 10 s of it are used). Without --target the checkpoint's \
            built-in voice is used, when it has one.",
        after_long_help = VC_EXAMPLES
    )]
    Vc(VcArgs),
    /// An OpenAI-compatible speech server: POST /v1/audio/speech, streaming, a voice library.
    #[command(long_about = SERVE_ABOUT, after_long_help = SERVE_EXAMPLES)]
    Serve(Box<ServeArgs>),
    /// Detect or apply Resemble AI's Perth watermark (what Chatterbox marks its speech with).
    #[command(subcommand)]
    Watermark(WatermarkCommand),
    /// Write a checkpoint folder whose T3 is stored in 8 or 4 bits: smaller, faster to load,
    /// less memory (CPU).
    #[command(long_about = QUANTIZE_ABOUT, after_long_help = QUANTIZE_EXAMPLES)]
    Quantize(QuantizeArgs),
}

const QUANTIZE_ABOUT: &str = "\
Write a checkpoint folder whose T3 is stored in 8-bit (q8) or 4-bit (q4) blocks, or bf16: the \
model's files in the hub layout, T3 as one GGUF file (t3_cfg.gguf, t3_turbo_v1.gguf, ...) in \
place of its full-precision .safetensors, every other file copied. `speak`, `vc` and `serve` \
load it with --model-dir like any checkpoint, reading T3 in its stored format (no conversion at \
load, no full-precision T3 in memory); --quantize then may be left out or name the same format.

Quantized T3 runs on the CPU only (on a GPU use the full-precision checkpoint with --dtype \
bf16). The output folder must not exist: it is written under a hidden temporary name beside it \
and appears only once complete and loaded back once, so a failure leaves nothing.";

const QUANTIZE_EXAMPLES: &str = "\
Examples:
  chatterbox quantize --model-dir ./chatterbox --format q8 -o ./chatterbox-q8
  chatterbox speak \"Hello.\" --model-dir ./chatterbox-q8 -o hello.wav
  chatterbox quantize --model turbo --format q4 -o ./chatterbox-turbo-q4   # from the hub";

/// `chatterbox quantize --format`: the stored formats (f32 is the checkpoint itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckpointFormat {
    /// 8-bit blocks (GGUF Q8_0, 8.5 bits a weight).
    Q8,
    /// 4-bit blocks (GGUF Q4_K, 4.5 bits a weight).
    Q4,
    /// bfloat16 (16 bits a weight).
    Bf16,
}

/// `chatterbox quantize`.
#[derive(Debug, Args)]
pub struct QuantizeArgs {
    /// Which model's checkpoint.
    #[arg(short, long, value_enum, default_value = "english")]
    pub model: Model,
    /// Multilingual T3 checkpoint: v2 (default), v3, or a .safetensors file name in the model
    /// directory.
    #[arg(long, value_name = "VERSION")]
    pub mtl_version: Option<String>,
    /// The full-precision checkpoint directory (hub layout). Without it the model is
    /// downloaded from the hub on first use.
    #[arg(long, value_name = "DIR", env = "CHATTERBOX_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,
    /// Hyper-parameters of a resized checkpoint (as for speak; the folder's own
    /// chatterbox_config.json is copied).
    #[arg(
        long,
        value_name = "JSON",
        requires = "model_dir",
        hide_short_help = true
    )]
    pub config: Option<PathBuf>,
    /// How T3's backbone weights are stored.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: CheckpointFormat,
    /// The folder to write (must not exist).
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    /// No summary; errors are still printed.
    #[arg(short, long)]
    pub quiet: bool,
}

/// `chatterbox watermark ...`.
#[derive(Debug, Subcommand)]
pub enum WatermarkCommand {
    /// Print whether each file carries the Perth watermark. Exit status 0: every file is
    /// watermarked; 3: at least one is not; 1: an error.
    Detect {
        /// Audio files (WAV, FLAC, MP3, Ogg Vorbis, M4A/AAC/ALAC).
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
        /// The Perth weights.
        #[command(flatten)]
        weights: WeightsArg,
    },
    /// Watermark an audio file (at its own sample rate, downmixed to mono).
    Apply {
        /// The audio file.
        #[arg(value_name = "FILE")]
        input: PathBuf,
        /// The watermarked WAV file.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Format of the output.
        #[arg(long, value_enum, default_value = "pcm16")]
        wav_format: WavFormatArg,
        /// The Perth weights.
        #[command(flatten)]
        weights: WeightsArg,
    },
}

/// Where Perth's weights are.
#[derive(Debug, Args, Clone, Default)]
pub struct WeightsArg {
    /// Perth's weights, perth_net_250000.pth.tar (from the resemble-perth wheel on PyPI).
    /// Default: the copy cached beside the hub's files, downloaded on first use.
    #[arg(long, value_name = "FILE", env = "CHATTERBOX_WATERMARK_WEIGHTS")]
    pub watermark_weights: Option<PathBuf>,
}

/// The watermark of generated speech.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Watermark")]
pub struct WatermarkArgs {
    /// Do not watermark the output. By default it carries Resemble AI's imperceptible Perth
    /// watermark, as the Python reference's does.
    #[arg(long, env = "CHATTERBOX_NO_WATERMARK", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_watermark: bool,
    /// Where Perth's weights are.
    #[command(flatten)]
    pub weights: WeightsArg,
}

const SERVE_ABOUT: &str = "\
An OpenAI-compatible speech server: POST /v1/audio/speech (whole files, chunked audio streams \
or OpenAI's SSE events), GET /v1/models, a voice library (POST/GET /v1/voices, DELETE \
/v1/voices/NAME), GET /health, GET /ready (200 once the models are loaded) and GET /metrics \
(Prometheus).

The address is printed on standard error once bound (`listening on http://HOST:PORT`; --port 0 \
picks a free port). One worker per --device owns its own copy of every --model; requests \
beyond the workers and --queue get 429 at once. SIGINT (Ctrl-C) or SIGTERM stops it \
gracefully: new requests get 503, requests in flight finish, then it exits with status 0. \
Logs go to standard error (RUST_LOG=debug for more; the text spoken is never logged at info).";

const SERVE_EXAMPLES: &str = "\
Examples:
  # The English model from the Hugging Face hub, on 127.0.0.1:8000
  chatterbox serve

  # English and Multilingual from one checkpoint directory (ResembleAI/chatterbox), on a GPU
  chatterbox serve --model-dir ./chatterbox --model english --model multilingual --device cuda:0

  # Each model from its own directory; two GPUs; a key; a voice library
  chatterbox serve --model turbo=./chatterbox-turbo --model english=./chatterbox \\
      --device cuda:0 --device cuda:1 --api-key secret --voices ./voices

  # Then
  curl -sS http://127.0.0.1:8000/v1/audio/speech -H 'Content-Type: application/json' \\
      -d '{\"model\":\"tts-1\",\"input\":\"Hello!\",\"voice\":\"alloy\",\"response_format\":\"wav\"}' \\
      -o hello.wav";

const SPEAK_EXAMPLES: &str = "\
Examples:
  chatterbox speak \"Hello from Chatterbox.\" -o hello.wav
  chatterbox speak \"Nice to meet you.\" --voice me.wav --exaggeration 0.7 -o hello.wav
  chatterbox speak \"Hola a todos.\" --model multilingual --language es -o hola.wav
  chatterbox speak --file story.txt --model turbo -o story.wav
  echo \"Piped text.\" | chatterbox speak -o piped.wav

  # Play the speech as it is generated: a WAV stream, or raw 16-bit PCM
  chatterbox speak --file story.txt --stream -o - | aplay
  chatterbox speak --file story.txt --stream --wav-format raw -o - | aplay -f S16_LE -r 24000 -c 1
  chatterbox speak --file story.txt --stream --wav-format raw -o - | ffplay -f s16le -ar 24000 -ac 1 -

  # Prepare a voice once, reuse it without the clip (faster start)
  chatterbox speak \"First line.\" --voice me.wav --save-voice me.voice.safetensors -o 1.wav
  chatterbox speak \"Second line.\" --voice-file me.voice.safetensors -o 2.wav";

const STREAM_HELP: &str = "\
Stream the speech: the audio is synthesised and written while the speech tokens are drawn, so \
the first audio comes after the first chunk of speech tokens (12 of them, about half a second \
of speech; 10 with turbo and nano) instead of after each whole sentence, and the rest follows \
chunk by chunk. The time to the first audio is reported.

With -o - the audio goes to standard output as it comes, flushed after every chunk: a WAV \
stream of unknown length (the RIFF and data sizes are 0xFFFFFFFF, as ffmpeg writes to pipes; \
aplay, sox and ffmpeg read it to its end), or headerless PCM with --wav-format raw. A file is \
written as it comes too, and renamed into place at the end.

Where generation runs slower than real time (most models on a CPU), standard output holds the \
audio back until the rest can follow in time, so a player that starts at the first audio never \
stops to wait: from the measured rate (seconds of audio per second) and the length the text \
will take, the progress says how much it buffers (\"buffering 2.1 s of audio before playing: \
generation runs at 0.60x real time\"). At or above real time the first chunk goes out at once. \
--prebuffer SECS sets the buffer instead (0: none). A file is never held back.

The same --seed draws the same speech tokens as without --stream, so the speech and its length \
are the same; the audio differs slightly around the chunk joins, where each chunk is \
synthesised before the tokens after it are known.";

/// `--prebuffer SECS`: seconds of audio, 0 to an hour.
fn prebuffer_secs(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds from 0 to 3600")),
    }
}

const VC_EXAMPLES: &str = "\
Examples:
  chatterbox vc my-speech.wav --target someone.wav -o my-speech-as-someone.wav
  chatterbox vc input.flac --target ref.wav --model-dir ./chatterbox-ckpt -o out.wav

  # A long recording: converted and written in 20 s windows (--window-ms 0: one pass)
  chatterbox vc lecture.mp3 --target ref.wav --window-ms 30000 --overlap-ms 3000 -o out.wav";

/// Which Chatterbox model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Model {
    /// Chatterbox, English (ResembleAI/chatterbox), 0.5B.
    English,
    /// Chatterbox Multilingual, 23 languages (ResembleAI/chatterbox); pick one with --language.
    Multilingual,
    /// Chatterbox Turbo, English, fast (ResembleAI/chatterbox-turbo); voice clips must be > 5 s.
    Turbo,
    /// Chatterbox Nano, the smallest Turbo (ResembleAI/chatterbox-nano).
    Nano,
}

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceArg {
    /// CUDA if built in and present, else Metal if built in and present, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// An NVIDIA GPU (ordinal).
    Cuda(usize),
    /// An Apple GPU (ordinal).
    Metal(usize),
}

impl std::str::FromStr for DeviceArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        let (kind, ordinal) = match lower.split_once(':') {
            Some((k, n)) => {
                let n = n
                    .parse::<usize>()
                    .map_err(|_| format!("{s:?}: the GPU number after ':' must be an integer"))?;
                (k, n)
            }
            None => (lower.as_str(), 0),
        };
        match kind {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(ordinal)),
            "metal" | "mps" => Ok(Self::Metal(ordinal)),
            _ => Err(format!(
                "{s:?}; expected auto, cpu, cuda, cuda:N, metal or metal:N"
            )),
        }
    }
}

/// Floating-point precision of T3 and the flow estimator (the rest runs in f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// The device's fastest: bf16 on CUDA GPUs with native bf16 (compute capability 8.0 and
    /// newer), f32 elsewhere.
    Auto,
    /// 32-bit float: exact.
    F32,
    /// 16-bit float (GPUs).
    F16,
    /// bfloat16 (recent GPUs).
    Bf16,
}

/// `--quantize`: how T3's backbone weights are stored (the flow, HiFT and the speaker encoders
/// are unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuantizeArg {
    /// The measured default: f32 (exact) everywhere for now.
    Auto,
    /// 8-bit blocks (GGUF Q8_0; CPU only).
    Q8,
    /// 4-bit blocks (GGUF Q4_K; CPU only).
    Q4,
    /// bfloat16 weights (CPU only, slower than f32 there today; on a GPU use --dtype bf16).
    Bf16,
    /// The checkpoint's weights in --dtype, unchanged (exact).
    F32,
}

const QUANTIZE_HELP: &str = "\
How T3's backbone weights (its attention and MLP projections, most of what each speech token \
reads) are stored: q8 (8-bit blocks), q4 (4-bit blocks), bf16, or f32 (the checkpoint's, \
exact). The weights are converted at load from the full-precision checkpoint (a few seconds). \
On 2 CPU cores q8 halves T3's time per token (Turbo 68 -> 38 ms, English 116 -> 54) and moves \
its next-token distributions slightly; q4 is no faster than q8 today and moves them more; bf16 \
has no fast CPU kernel and is much slower than f32 (docs/benchmarks.md). q8, q4 and bf16 run on \
the CPU only, with T3 in f32. On a CPU that other busy processes share, also set \
CANDLE_NUM_THREADS=1 (candle's quantized kernels wait for each other's threads after every \
product). auto is f32.";

/// Format of the written audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WavFormatArg {
    /// WAV, 16-bit integer PCM (plays everywhere).
    Pcm16,
    /// WAV, 32-bit float.
    F32,
    /// Raw 16-bit little-endian PCM, mono, 24 kHz, no header (s16le: `aplay -f S16_LE -r 24000
    /// -c 1`, `ffplay -f s16le -ar 24000 -ac 1 -`).
    Raw,
}

/// Options shared by every subcommand: where the model comes from and where it runs.
#[derive(Debug, Args)]
#[command(next_help_heading = "Model, device and output")]
pub struct RuntimeArgs {
    /// Checkpoint directory in the Hugging Face hub layout (e.g. a downloaded
    /// ResembleAI/chatterbox). Without it the model is downloaded from the hub on first use.
    #[arg(long, value_name = "DIR", env = "CHATTERBOX_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,
    /// Hyper-parameters of a resized checkpoint (JSON of chatterbox-pipeline's
    /// `ChatterboxConfig`: `t3`, `ve`, `s3gen`), for test checkpoints; released checkpoints
    /// need none.
    #[arg(
        long,
        value_name = "JSON",
        requires = "model_dir",
        hide_short_help = true
    )]
    pub config: Option<PathBuf>,
    /// Where to run: auto, cpu, cuda, cuda:N, metal (GPU support must be compiled in with the
    /// `cuda` or `metal` cargo feature).
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub device: DeviceArg,
    /// Precision of T3 and the flow estimator: auto (bf16 on CUDA GPUs of compute capability
    /// 8.0 and newer, f32 elsewhere), f32, f16 or bf16 (half precision is for GPUs).
    #[arg(long, value_enum, default_value = "auto")]
    pub dtype: DtypeArg,
    /// Output file ('-' writes it to standard output; `speak --stream` writes it as the
    /// audio is generated).
    #[arg(short, long, value_name = "FILE", default_value = "output.wav")]
    pub output: PathBuf,
    /// Format of the output: a WAV file of 16-bit PCM or 32-bit float samples, or raw 16-bit
    /// PCM without a header (for players reading a pipe).
    #[arg(long, value_enum, default_value = "pcm16")]
    pub wav_format: WavFormatArg,
    /// Seed of the random sampling: the same seed, text and voice give the same audio.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// No progress bars or summary; errors are still printed.
    #[arg(short, long)]
    pub quiet: bool,
    /// The watermark.
    #[command(flatten)]
    pub watermark: WatermarkArgs,
}

/// `chatterbox speak`.
#[derive(Debug, Args)]
pub struct SpeakArgs {
    /// The text to speak; '-' or nothing reads it from standard input.
    #[arg(value_name = "TEXT", conflicts_with = "file")]
    pub text: Option<String>,
    /// Read the text from this file (UTF-8).
    #[arg(short, long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Which model speaks.
    #[arg(short, long, value_enum, default_value = "english")]
    pub model: Model,
    /// Language of the text, an ISO 639-1 code (multilingual model only; default en): ar da de
    /// el en es fi fr he hi it ja ko ms nl no pl pt ru sv sw tr zh.
    #[arg(short, long, value_name = "CODE")]
    pub language: Option<String>,
    /// Japanese kanji readings for the multilingual model: the dictionary exported from
    /// pykakasi (crates/chatterbox-kakasi/README.md). Needs a chatterbox built with
    /// `--features kakasi` (GPL-3.0-or-later).
    #[arg(long, value_name = "FILE", env = "CHATTERBOX_KAKASI_DICT")]
    pub kakasi_dict: Option<PathBuf>,
    /// Multilingual T3 checkpoint: v2 (default), v3, or a .safetensors file name in the model
    /// directory.
    #[arg(long, value_name = "VERSION")]
    pub mtl_version: Option<String>,
    /// Reference clip of the voice to clone (WAV, FLAC, MP3, Ogg Vorbis, M4A/AAC/ALAC; 5-10 s
    /// of clean speech;
    /// Turbo and Nano need more than 5 s). Default: the checkpoint's built-in voice.
    #[arg(short, long, value_name = "AUDIO", conflicts_with = "voice_file")]
    pub voice: Option<PathBuf>,
    /// Use a voice saved earlier with --save-voice (skips analysing a clip).
    #[arg(long, value_name = "FILE")]
    pub voice_file: Option<PathBuf>,
    /// Save the voice prepared from --voice to this file (.safetensors) for --voice-file.
    #[arg(long, value_name = "FILE")]
    pub save_voice: Option<PathBuf>,
    /// Stream: write the audio while the speech tokens are drawn; the first audio comes after
    /// the first chunk of tokens instead of after each whole sentence (-o - to play it live).
    #[arg(long, long_help = STREAM_HELP)]
    pub stream: bool,
    /// With --stream -o -: hold the audio back until SECS seconds of it are ready (or the
    /// speech ends), then play; 0 plays the first chunk at once [default: as much as a
    /// generation slower than real time needs, none otherwise].
    #[arg(long, value_name = "SECS", requires = "stream", value_parser = prebuffer_secs)]
    pub prebuffer: Option<f64>,
    /// Write the timings of the speech to this file: SubRip (.srt) or WebVTT (.vtt), a cue per
    /// sentence, or JSON (.json) with each word's times too: from T3's alignment heads with
    /// the English and multilingual models, estimated by characters inside its sentence with
    /// Turbo and Nano (each word says which). Works with --stream. Pauses and SSML in the
    /// text: see the README's controls section.
    #[arg(long, value_name = "FILE")]
    pub captions: Option<PathBuf>,
    /// Pronunciations: a UTF-8 file of `word = respelling` lines (# comments), applied to the
    /// text's whole words before it is spoken; a lower-case word matches in any case, a word
    /// with a capital only as written.
    #[arg(long, value_name = "FILE")]
    pub lexicon: Option<PathBuf>,
    /// Storage of T3's weights: q8 (CPU only, about 2x faster decode), q4, bf16, f32 (exact) or
    /// auto (f32).
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "auto", long_help = QUANTIZE_HELP, env = "CHATTERBOX_QUANTIZE", help_heading = "Model, device and output")]
    pub quantize: QuantizeArg,
    /// The sampling and conditioning knobs.
    #[command(flatten)]
    pub gen: GenerationArgs,
    /// Model, device and output.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// Generation options; absent ones take the model's defaults.
#[derive(Debug, Args, Default, Clone)]
#[command(next_help_heading = "Generation (defaults: the model's own)")]
pub struct GenerationArgs {
    /// Expressiveness, 0 (flat) to ~2 (dramatic) [english, multilingual: 0.5; turbo, nano:
    /// ignored].
    #[arg(long, value_name = "X")]
    pub exaggeration: Option<f32>,
    /// Classifier-free guidance weight; lower gives slower, more deliberate speech, 0 disables
    /// it [english, multilingual: 0.5; turbo, nano: ignored].
    #[arg(long, value_name = "X")]
    pub cfg_weight: Option<f32>,
    /// Sampling temperature [0.8].
    #[arg(long, value_name = "T")]
    pub temperature: Option<f32>,
    /// Nucleus sampling: keep the smallest set of tokens with this total probability [english,
    /// multilingual: 1.0; turbo, nano: 0.95].
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,
    /// Drop tokens less likely than this fraction of the most likely one [english,
    /// multilingual: 0.05; turbo, nano: ignored].
    #[arg(long, value_name = "P")]
    pub min_p: Option<f32>,
    /// Keep only the K most likely tokens [turbo, nano: 1000; english, multilingual: unused].
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Penalty on repeating speech tokens, 1 = none [1.2].
    #[arg(long, value_name = "X")]
    pub repetition_penalty: Option<f32>,
    /// Most speech tokens per text chunk (25 tokens = 1 s of audio) [1000].
    #[arg(long, value_name = "N")]
    pub max_new_tokens: Option<usize>,
    /// Split texts longer than this many characters at sentence ends and speak them chunk by
    /// chunk; 0 never splits [250].
    #[arg(long, value_name = "N")]
    pub chunk_chars: Option<usize>,
    /// Always pick the most likely token instead of sampling (deterministic, often flat).
    #[arg(long)]
    pub greedy: bool,
    /// Play the speech this many times faster at the same pitch, 0.25 to 4 (time-stretched
    /// after generation; captions follow) [1: no stretching].
    #[arg(long, value_name = "X")]
    pub speed: Option<f32>,
}

/// A `--model` of `chatterbox serve`: the model and, optionally, its own checkpoint directory
/// (`turbo=DIR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// Which model.
    pub model: Model,
    /// Its checkpoint directory; `None`: `--model-dir`, else the hub.
    pub dir: Option<PathBuf>,
}

impl std::str::FromStr for ModelSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, dir) = match s.split_once('=') {
            Some((n, "")) => return Err(format!("{s:?}: the directory after '{n}=' is empty")),
            Some((n, d)) => (n, Some(PathBuf::from(d))),
            None => (s, None),
        };
        let model = Model::from_str(name, true).map_err(|_| {
            format!("{name:?}; expected english, multilingual, turbo or nano, optionally =DIR")
        })?;
        Ok(Self { model, dir })
    }
}

/// A `NAME=VALUE` option (`--model-alias`, `--voice-alias`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    /// The name requests use.
    pub name: String,
    /// What it stands for.
    pub target: String,
}

impl std::str::FromStr for Alias {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('=') {
            Some((n, t)) if !n.is_empty() && !t.is_empty() => Ok(Self {
                name: n.to_string(),
                target: t.to_string(),
            }),
            _ => Err(format!("{s:?}: expected NAME=VALUE")),
        }
    }
}

/// `chatterbox serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Checkpoint directory in the Hugging Face hub layout, for every --model without its own
    /// `=DIR`. One directory can hold English and Multilingual (ResembleAI/chatterbox has
    /// both); Turbo and Nano reuse their file names (tokenizer.json, conds.pt), so give them
    /// their own: --model turbo=DIR. Without either, models are downloaded from the hub.
    #[arg(long, value_name = "DIR", env = "CHATTERBOX_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,
    /// A model to serve: english, multilingual, turbo or nano (API names chatterbox,
    /// chatterbox-multilingual, chatterbox-turbo, chatterbox-nano), optionally from its own
    /// checkpoint directory as MODEL=DIR. Repeat it to serve several; the first is what
    /// OpenAI's model names (tts-1, tts-1-hd, gpt-4o-mini-tts) map to. [default: english]
    #[arg(short, long = "model", value_name = "MODEL[=DIR]")]
    pub models: Vec<ModelSpec>,
    /// Multilingual T3 checkpoint: v2 (default), v3, or a .safetensors file name in the model
    /// directory.
    #[arg(long, value_name = "VERSION")]
    pub mtl_version: Option<String>,
    /// Address to listen on (0.0.0.0 or :: to accept other machines: set --api-key then).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; 0 picks a free one (the address is printed once bound).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The voice library's directory (created if missing; voices uploaded with POST
    /// /v1/voices are kept there across restarts). Without it uploads are refused.
    #[arg(long, value_name = "DIR", env = "CHATTERBOX_VOICES")]
    pub voices: Option<PathBuf>,
    /// Where to run: auto, cpu, cuda:N, metal:N. Repeat it for one worker per device, each
    /// with its own copy of the models. [default: auto]
    #[arg(long = "device", value_name = "DEVICE")]
    pub devices: Vec<DeviceArg>,
    /// Precision of T3 and the flow estimator: auto (bf16 on CUDA GPUs of compute capability
    /// 8.0 and newer, f32 elsewhere), f32, f16 or bf16 (half precision is for GPUs).
    #[arg(long, value_enum, default_value = "auto")]
    pub dtype: DtypeArg,
    /// Storage of T3's weights: q8 (CPU only, about 2x faster decode), q4, bf16, f32 (exact) or
    /// auto (f32).
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "auto", long_help = QUANTIZE_HELP, env = "CHATTERBOX_QUANTIZE")]
    pub quantize: QuantizeArg,
    /// Bearer token every /v1 request must carry (`Authorization: Bearer KEY`, the scheme in
    /// any case); /health, /ready and /metrics stay open. Without it anyone who reaches the
    /// port may use it. An empty key (CHATTERBOX_API_KEY= set but empty) is an error, not
    /// "no key": unset the variable to serve without one.
    #[arg(
        long,
        value_name = "KEY",
        env = "CHATTERBOX_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
    /// Requests that may wait per model beyond those being generated; more get 429 at once.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub queue: usize,
    /// A 429's shortest Retry-After, in seconds, and its value before the queue's pace has
    /// been measured; once it has, Retry-After is the queue's expected wait (at most 60 s).
    #[arg(long, value_name = "SECS", default_value_t = 1, env = "CHATTERBOX_RETRY_AFTER",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub retry_after: u64,
    /// How a batching model seats requests: `capacity` (while its measured costs say every
    /// seated stream keeps ahead of its listener; a request that does not fit waits in the
    /// queue, and beyond the queue gets 429) or `slots` (whenever the batch has a free slot:
    /// under load every stream slows down together and playback stalls; more throughput, see
    /// docs/benchmarks.md).
    #[arg(long, value_name = "POLICY", default_value = "capacity",
          value_parser = ["capacity", "slots"])]
    pub admission: String,
    /// Requests each model speaks at once per device (continuous batching: one batched T3
    /// step for all of them, the flow and HiFT chunks that fall due together in shared calls;
    /// each request's audio is what it gets alone, up to float rounding); 0 speaks one at a
    /// time. On an H100 with 16 clients it serves Turbo at 67x real time against 18x, first
    /// byte after 0.3 s against 4.2 s; streamed playback can then stall briefly (Turbo from 16
    /// clients, English from 4), where one at a time makes the later requests wait instead.
    /// Each slot holds a KV cache for --max-new-tokens + 512 positions (English in bf16: 0.23
    /// MB a position). [default: 16 on CUDA, 0 elsewhere]
    #[arg(long, value_name = "N", env = "CHATTERBOX_BATCH")]
    pub batch: Option<usize>,
    /// Longest a speech request may take, queueing included, in seconds (then it stops: 504,
    /// or a cut stream).
    #[arg(long, value_name = "SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Longest wait for a request head, in seconds (from its first byte, or for the next
    /// request on a kept-alive connection); the connection is closed then.
    #[arg(long, value_name = "SECS", default_value_t = 30, env = "CHATTERBOX_HEADER_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout: u64,
    /// Longest pause while a request body arrives, in seconds; the request gets 408 then.
    #[arg(long, value_name = "SECS", default_value_t = 30, env = "CHATTERBOX_BODY_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout: u64,
    /// Longest a whole request body may take to arrive, in seconds, however steadily it
    /// trickles; the request gets 408 then.
    #[arg(long, value_name = "SECS", default_value_t = 120, env = "CHATTERBOX_BODY_DEADLINE",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub body_deadline: u64,
    /// Longest a response write may stay blocked, in seconds: a client that stops reading a
    /// response (a stream, say) is disconnected then, and its generation stops.
    #[arg(long, value_name = "SECS", default_value_t = 30, env = "CHATTERBOX_WRITE_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub write_timeout: u64,
    /// Most connections open at once; one more is answered 503 (too_many_connections, with
    /// Retry-After) and closed.
    #[arg(long, value_name = "N", default_value_t = 512, env = "CHATTERBOX_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
    /// Largest JSON request body (`/v1/audio/speech`), in bytes; a larger one gets 413.
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024, env = "CHATTERBOX_MAX_JSON_BYTES",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_json_bytes: u64,
    /// Largest voice upload (`POST /v1/voices`, the whole multipart body), in bytes; a larger
    /// one gets 413.
    #[arg(long, value_name = "BYTES", default_value_t = 20 * 1024 * 1024,
          env = "CHATTERBOX_MAX_UPLOAD_BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_upload_bytes: u64,
    /// Caps the speech tokens per sentence chunk of every request (25 tokens = 1 s of audio;
    /// the models' default is 1000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_new_tokens: Option<u64>,
    /// Map another model name to a served one, e.g. tts-1-hd=chatterbox (repeatable; OpenAI's
    /// names map to the first --model unless mapped here).
    #[arg(long = "model-alias", value_name = "NAME=MODEL")]
    pub model_aliases: Vec<Alias>,
    /// Map a voice name to a library voice, e.g. alloy=narrator (repeatable; OpenAI's voice
    /// names use the checkpoint's built-in voice unless mapped here).
    #[arg(long = "voice-alias", value_name = "NAME=VOICE")]
    pub voice_aliases: Vec<Alias>,
    /// A pronunciation lexicon requests name in their `lexicon` field, e.g. names=names.txt
    /// (repeatable; the file as for `speak --lexicon`, read and checked at start).
    #[arg(long = "lexicon", value_name = "NAME=FILE")]
    pub lexicons: Vec<Alias>,
    /// The watermark of the speech served.
    #[command(flatten)]
    pub watermark: WatermarkArgs,
}

/// `chatterbox vc`.
#[derive(Debug, Args)]
pub struct VcArgs {
    /// The recording whose words are kept (WAV, FLAC, MP3, Ogg Vorbis, M4A/AAC/ALAC).
    #[arg(value_name = "SOURCE")]
    pub source: PathBuf,
    /// Reference clip of the voice to convert to (the first 10 s are used). Default: the
    /// checkpoint's built-in voice.
    #[arg(short, long, value_name = "AUDIO")]
    pub target: Option<PathBuf>,
    /// Longest stretch of source converted in one pass, in milliseconds: a longer source is
    /// converted in overlapping windows of this length, written as each is done, so time grows
    /// linearly with its length and memory stays flat. 0: one pass, however long (time grows
    /// with the square of the length).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 20_000,
        help_heading = "Conversion"
    )]
    pub window_ms: u32,
    /// Overlap of consecutive windows, in milliseconds (at least 160, at most half of
    /// --window-ms); each join is crossfaded at the overlap's quietest point.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 2_000,
        help_heading = "Conversion"
    )]
    pub overlap_ms: u32,
    /// Model, device and output.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

#[cfg(test)]
mod tests;
