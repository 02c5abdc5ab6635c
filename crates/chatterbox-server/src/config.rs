//! [`ServerConfig`]: where to listen, limits, timeouts, the API key, the voice directory and
//! the OpenAI name mappings. Its `Default` is a local server on 127.0.0.1:8000.
use crate::model::ModelId;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// OpenAI's model names, mapped by default to the first model loaded.
pub const OPENAI_MODELS: [&str; 3] = ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"];

/// OpenAI's voice names, mapped by default to the built-in voice.
pub const OPENAI_VOICES: [&str; 11] = [
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
];

/// Longest `input`, in characters (OpenAI's limit).
pub const MAX_INPUT_CHARS: usize = 4096;

/// Settings of a server. Build one with `ServerConfig::default()` and change fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Address to listen on (port 0: an ephemeral port). Default `127.0.0.1:8000`.
    pub addr: SocketAddr,
    /// Bearer token every `/v1` request must carry; `None` lets everyone in. `/health`,
    /// `/ready` and `/metrics` stay open. Default `None`.
    pub api_key: Option<String>,
    /// The voice library's directory (created if missing); `None` disables `/v1/voices`
    /// uploads. Default `None`.
    pub voices_dir: Option<PathBuf>,
    /// Requests waiting per model beyond those being generated; more get 429 at once.
    /// Default `16`.
    pub queue_capacity: usize,
    /// Longest a speech request may take from arrival to its last byte (queue included);
    /// the generation stops then. Default 300 s.
    pub request_timeout: Duration,
    /// Longest wait for a request's head (from its first byte, or for the next request on a
    /// kept-alive connection); the connection is closed then. Default 30 s.
    pub header_timeout: Duration,
    /// Longest pause while a request body arrives; the request gets 408 then. Default 30 s.
    pub body_timeout: Duration,
    /// Largest JSON body. Default 64 KiB.
    pub max_json_bytes: usize,
    /// Largest voice upload (multipart body). Default 20 MiB.
    pub max_upload_bytes: usize,
    /// Caps `max_new_tokens` (speech tokens per sentence chunk) of every generation, e.g. for
    /// tests or to bound a request's cost; `None` keeps the model's default. Default `None`.
    pub max_new_tokens: Option<usize>,
    /// OpenAI model names (and any other alias) → served model. Aliases to a model that is not
    /// loaded fall back to the first loaded model. Default: [`OPENAI_MODELS`] → the first
    /// loaded model (empty map).
    pub model_aliases: BTreeMap<String, ModelId>,
    /// OpenAI voice names (and any other alias) → library voice; names not listed in this map
    /// but in [`OPENAI_VOICES`] use the checkpoint's built-in voice. Default: empty.
    pub voice_aliases: BTreeMap<String, String>,
    /// `Retry-After` seconds of a 429. Default `1`.
    pub retry_after_secs: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8000)),
            api_key: None,
            voices_dir: None,
            queue_capacity: 16,
            request_timeout: Duration::from_secs(300),
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_json_bytes: 64 * 1024,
            max_upload_bytes: 20 * 1024 * 1024,
            max_new_tokens: None,
            model_aliases: BTreeMap::new(),
            voice_aliases: BTreeMap::new(),
            retry_after_secs: 1,
        }
    }
}

impl ServerConfig {
    /// Sets [`ServerConfig::addr`].
    pub fn with_addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Sets [`ServerConfig::api_key`].
    pub fn with_api_key(mut self, api_key: Option<String>) -> Self {
        self.api_key = api_key;
        self
    }

    /// Sets [`ServerConfig::voices_dir`].
    pub fn with_voices_dir(mut self, voices_dir: Option<PathBuf>) -> Self {
        self.voices_dir = voices_dir;
        self
    }

    /// Sets [`ServerConfig::queue_capacity`].
    pub fn with_queue_capacity(mut self, queue_capacity: usize) -> Self {
        self.queue_capacity = queue_capacity;
        self
    }

    /// Sets [`ServerConfig::request_timeout`].
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }

    /// Sets [`ServerConfig::header_timeout`].
    pub fn with_header_timeout(mut self, header_timeout: Duration) -> Self {
        self.header_timeout = header_timeout;
        self
    }

    /// Sets [`ServerConfig::body_timeout`].
    pub fn with_body_timeout(mut self, body_timeout: Duration) -> Self {
        self.body_timeout = body_timeout;
        self
    }

    /// Sets [`ServerConfig::max_json_bytes`].
    pub fn with_max_json_bytes(mut self, max_json_bytes: usize) -> Self {
        self.max_json_bytes = max_json_bytes;
        self
    }

    /// Sets [`ServerConfig::max_upload_bytes`].
    pub fn with_max_upload_bytes(mut self, max_upload_bytes: usize) -> Self {
        self.max_upload_bytes = max_upload_bytes;
        self
    }

    /// Sets [`ServerConfig::max_new_tokens`].
    pub fn with_max_new_tokens(mut self, max_new_tokens: Option<usize>) -> Self {
        self.max_new_tokens = max_new_tokens;
        self
    }

    /// Sets [`ServerConfig::model_aliases`].
    pub fn with_model_aliases(mut self, model_aliases: BTreeMap<String, ModelId>) -> Self {
        self.model_aliases = model_aliases;
        self
    }

    /// Sets [`ServerConfig::voice_aliases`].
    pub fn with_voice_aliases(mut self, voice_aliases: BTreeMap<String, String>) -> Self {
        self.voice_aliases = voice_aliases;
        self
    }

    /// Sets [`ServerConfig::retry_after_secs`].
    pub fn with_retry_after_secs(mut self, retry_after_secs: u64) -> Self {
        self.retry_after_secs = retry_after_secs;
        self
    }
}
