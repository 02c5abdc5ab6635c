//! [`ServerConfig`]: where to listen, limits, timeouts, the API key, the voice directory and
//! the OpenAI name mappings. Its `Default` is a local server on 127.0.0.1:8000.
use crate::error::ServerError;
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
    /// `/ready` and `/metrics` stay open. An empty key (or one that could never match: blank,
    /// with surrounding whitespace or control characters) is refused at start-up rather than
    /// read as "no key". Default `None`.
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
    /// Longest a whole request body may take to arrive, from the end of its head, however
    /// steadily it trickles; the request gets 408 then. Default 120 s.
    pub body_deadline: Duration,
    /// Longest a response write may stay blocked (a client that stopped reading: its socket
    /// buffer is full); the connection is closed then, which stops the request's generation
    /// as a disconnect does. Default 30 s.
    pub write_timeout: Duration,
    /// Most connections open at once; a connection beyond it is answered `503`
    /// (`too_many_connections`, `Retry-After: 1`) and closed. Default 512.
    pub max_connections: usize,
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
    /// The shortest `Retry-After` of a 429, in seconds, and its value before the queue's pace
    /// has been measured (no request has left it yet). Otherwise a 429's `Retry-After` is the
    /// queue's expected wait: the requests admitted for the model over the pace at which they
    /// have been leaving, rounded up, at most 60 s (or this value, when longer). Default `1`.
    pub retry_after_secs: u64,
    /// Pronunciation lexicons a request names in its `lexicon` field (name → lexicon; see
    /// `chatterbox_text::Lexicon`). Default: none.
    pub lexicons: BTreeMap<String, std::sync::Arc<chatterbox_pipeline::Lexicon>>,
    /// Whether a batched model seats a request only while its measured costs say every
    /// seated stream keeps ahead of its listener (issue 43, see `capacity.rs`); a request that
    /// does not fit waits in the queue (and beyond it gets 429). `true` (the default); `false`
    /// seats a request whenever the batch has a free slot: more throughput, and under load
    /// every stream stalls (docs/benchmarks.md).
    pub capacity_admission: bool,
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
            body_deadline: Duration::from_secs(120),
            write_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_json_bytes: 64 * 1024,
            max_upload_bytes: 20 * 1024 * 1024,
            max_new_tokens: None,
            model_aliases: BTreeMap::new(),
            voice_aliases: BTreeMap::new(),
            retry_after_secs: 1,
            lexicons: BTreeMap::new(),
            capacity_admission: true,
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

    /// Sets [`ServerConfig::body_deadline`].
    pub fn with_body_deadline(mut self, body_deadline: Duration) -> Self {
        self.body_deadline = body_deadline;
        self
    }

    /// Sets [`ServerConfig::write_timeout`].
    pub fn with_write_timeout(mut self, write_timeout: Duration) -> Self {
        self.write_timeout = write_timeout;
        self
    }

    /// Sets [`ServerConfig::max_connections`].
    pub fn with_max_connections(mut self, max_connections: usize) -> Self {
        self.max_connections = max_connections;
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

    /// Sets [`ServerConfig::capacity_admission`].
    pub fn with_capacity_admission(mut self, on: bool) -> Self {
        self.capacity_admission = on;
        self
    }

    /// Sets [`ServerConfig::retry_after_secs`].
    pub fn with_retry_after_secs(mut self, retry_after_secs: u64) -> Self {
        self.retry_after_secs = retry_after_secs;
        self
    }

    /// Checks what would make the server misbehave quietly: an API key that is empty or could
    /// never match (an unset key is `None`; `Some("")` is a mistake, e.g.
    /// `CHATTERBOX_API_KEY=`, and is refused rather than read as "no authentication"), zero
    /// timeouts, limits or connection counts. [`Server::bind`](crate::Server::bind) calls it.
    pub fn validate(&self) -> Result<(), ServerError> {
        if let Some(key) = &self.api_key {
            check_api_key(key)?;
        }
        for (name, d) in [
            ("request_timeout", self.request_timeout),
            ("header_timeout", self.header_timeout),
            ("body_timeout", self.body_timeout),
            ("body_deadline", self.body_deadline),
            ("write_timeout", self.write_timeout),
        ] {
            if d.is_zero() {
                return Err(ServerError::Config(format!("{name} is zero")));
            }
        }
        for (name, n) in [
            ("max_connections", self.max_connections),
            ("max_json_bytes", self.max_json_bytes),
            ("max_upload_bytes", self.max_upload_bytes),
        ] {
            if n == 0 {
                return Err(ServerError::Config(format!("{name} is zero")));
            }
        }
        Ok(())
    }
}

/// Why `key` cannot be an API key, if it cannot.
fn check_api_key(key: &str) -> Result<(), ServerError> {
    let why = if key.trim().is_empty() {
        "the API key is empty: refusing to serve without authentication by mistake (unset \
         the key, e.g. CHATTERBOX_API_KEY, to serve without one)"
    } else if key.trim() != key {
        "the API key starts or ends with whitespace, which no `Authorization: Bearer` header \
         can carry"
    } else if key.chars().any(char::is_control) {
        "the API key contains control characters, which no `Authorization` header can carry"
    } else {
        return Ok(());
    };
    Err(ServerError::Config(why.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_or_unusable_keys_and_zero_limits_are_refused() {
        let ok = ServerConfig::default();
        assert!(ok.validate().is_ok());
        assert!(ok
            .clone()
            .with_api_key(Some("sk-1".into()))
            .validate()
            .is_ok());
        for bad in ["", "   ", " sk-1", "sk-1\n", "sk\u{7}1"] {
            let e = ok.clone().with_api_key(Some(bad.into())).validate();
            assert!(matches!(e, Err(ServerError::Config(_))), "{bad:?}");
        }
        let e = ok.clone().with_api_key(Some(String::new())).validate();
        assert!(format!("{}", e.unwrap_err()).contains("empty"));
        assert!(ok.clone().with_max_connections(0).validate().is_err());
        assert!(ok
            .clone()
            .with_body_deadline(Duration::ZERO)
            .validate()
            .is_err());
        assert!(ok.with_write_timeout(Duration::ZERO).validate().is_err());
    }
}
