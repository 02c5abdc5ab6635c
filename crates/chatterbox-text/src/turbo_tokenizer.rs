//! The Turbo/Nano text tokenizer: transformers' GPT-2 byte-level BPE as chatterbox/tts_turbo.py
//! (upstream 5de7a54) loads it with `AutoTokenizer.from_pretrained(ckpt_dir)` and calls it with
//! `truncation=True`.
use crate::error::{read_to_string, Result, TextError};
use crate::loading::{checked_tokenizer, in_memory, tokenizer_from_bytes, tokenizer_from_file};
use crate::special_tokens::encode_ids;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::BPE;
use tokenizers::{AddedToken, Tokenizer};

/// Vocabulary size of the released Turbo tokenizer: GPT-2's 50257 plus the paralinguistic and
/// style tags (`[laugh]`, `[chuckle]`, `[clear throat]`, ...).
pub const TURBO_VOCAB_SIZE: usize = 50276;

/// transformers writes `int(1e30)` for "no limit".
const NO_MAX_LENGTH: f64 = 1e15;

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum TokenSpec {
    Plain(String),
    Full { content: String },
}

impl TokenSpec {
    fn content(&self) -> &str {
        match self {
            TokenSpec::Plain(s) | TokenSpec::Full { content: s } => s,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct AddedTokenSpec {
    content: String,
    #[serde(default)]
    special: bool,
    #[serde(default)]
    lstrip: bool,
    #[serde(default)]
    rstrip: bool,
    #[serde(default)]
    single_word: bool,
    #[serde(default = "default_true")]
    normalized: bool,
}

fn default_true() -> bool {
    true
}

/// The parts of `tokenizer_config.json` that change encoding.
#[derive(Debug, Clone, Default, Deserialize)]
struct TokenizerConfig {
    #[serde(default)]
    model_max_length: Option<f64>,
    #[serde(default)]
    add_bos_token: Option<bool>,
    #[serde(default)]
    add_eos_token: Option<bool>,
    #[serde(default)]
    add_prefix_space: Option<bool>,
    #[serde(default)]
    bos_token: Option<TokenSpec>,
    #[serde(default)]
    eos_token: Option<TokenSpec>,
    #[serde(default)]
    unk_token: Option<TokenSpec>,
    #[serde(default)]
    pad_token: Option<TokenSpec>,
    #[serde(default)]
    added_tokens_decoder: Option<BTreeMap<String, AddedTokenSpec>>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path, what: &'static str) -> Result<T> {
    parse_json(read_to_string(path)?.as_bytes(), path, what)
}

fn parse_json<T: serde::de::DeserializeOwned>(
    json: &[u8],
    path: &Path,
    what: &'static str,
) -> Result<T> {
    serde_json::from_slice(json).map_err(|e| TextError::InvalidData {
        what,
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// `tokenizer_config.json` given in memory (`None`: no config, as a directory without one).
fn config_from_bytes(config_json: Option<&[u8]>) -> Result<TokenizerConfig> {
    config_json.map_or_else(
        || Ok(TokenizerConfig::default()),
        |json| parse_json(json, &in_memory(), "tokenizer config"),
    )
}

/// GPT-2 byte-level BPE tokenizer of the Turbo and Nano checkpoints.
///
/// Reads `tokenizer.json` when the directory has one, else builds the tokenizer from
/// `vocab.json` + `merges.txt` + `added_tokens.json` as transformers' `GPT2Tokenizer` does.
/// `tokenizer_config.json` (optional) gives `model_max_length` (ids are truncated to it, as
/// `truncation=True` does), `add_bos_token`/`add_eos_token` and the special tokens.
#[derive(Clone)]
pub struct TurboTokenizer {
    tokenizer: Tokenizer,
    dir: PathBuf,
    max_length: Option<usize>,
    bos: Option<u32>,
    eos: u32,
    add_bos: bool,
    add_eos: bool,
}

impl std::fmt::Debug for TurboTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurboTokenizer")
            .field("dir", &self.dir)
            .field("vocab_size", &self.vocab_size())
            .field("max_length", &self.max_length)
            .finish()
    }
}

impl TurboTokenizer {
    /// Loads the tokenizer files of a Turbo/Nano checkpoint directory.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let config_path = dir.join("tokenizer_config.json");
        let config: TokenizerConfig = if config_path.is_file() {
            read_json(&config_path, "tokenizer config")?
        } else {
            TokenizerConfig::default()
        };
        let json = dir.join("tokenizer.json");
        let (tokenizer, source) = if json.is_file() {
            (tokenizer_from_file(&json)?, json)
        } else {
            (
                Self::build_from_vocab_merges(&dir, &config)?,
                dir.join("vocab.json"),
            )
        };
        Self::build(tokenizer, &config, source, config_path, dir)
    }

    /// Builds the tokenizer from the content of `tokenizer.json` and, optionally, of
    /// `tokenizer_config.json` (`None` behaves as a directory without that file), with the same
    /// checks as [`TurboTokenizer::from_dir`].
    pub fn from_json(tokenizer_json: &str, config_json: Option<&str>) -> Result<Self> {
        Self::from_bytes(tokenizer_json.as_bytes(), config_json.map(str::as_bytes))
    }

    /// [`TurboTokenizer::from_json`] over raw bytes (embedded or downloaded files).
    pub fn from_bytes(tokenizer_json: &[u8], config_json: Option<&[u8]>) -> Result<Self> {
        let config = config_from_bytes(config_json)?;
        let tokenizer = tokenizer_from_bytes(tokenizer_json, &in_memory())?;
        Self::build(tokenizer, &config, in_memory(), in_memory(), in_memory())
    }

    /// Wraps a `tokenizers` tokenizer, with the content of `tokenizer_config.json` if any.
    pub fn from_tokenizer(tokenizer: Tokenizer, config_json: Option<&str>) -> Result<Self> {
        let config = config_from_bytes(config_json.map(str::as_bytes))?;
        let tokenizer = checked_tokenizer(tokenizer)?;
        Self::build(tokenizer, &config, in_memory(), in_memory(), in_memory())
    }

    /// Registers the config's special tokens and reads the settings `encode` applies. `source`
    /// and `config_path` name the files in errors; `dir` names the tokenizer in later ones.
    fn build(
        mut tokenizer: Tokenizer,
        config: &TokenizerConfig,
        source: PathBuf,
        config_path: PathBuf,
        dir: PathBuf,
    ) -> Result<Self> {
        // transformers registers its special tokens with the backend as special added tokens.
        let specials: Vec<AddedToken> = [
            &config.bos_token,
            &config.eos_token,
            &config.unk_token,
            &config.pad_token,
        ]
        .into_iter()
        .flatten()
        .map(|t| AddedToken::from(t.content().to_string(), true))
        .collect();
        tokenizer.add_special_tokens(&specials);

        let token_id = |token: &str| {
            tokenizer
                .token_to_id(token)
                .ok_or_else(|| TextError::MissingSpecialToken {
                    path: source.clone(),
                    token: token.to_string(),
                })
        };
        let eos = token_id(
            config
                .eos_token
                .as_ref()
                .map_or("<|endoftext|>", TokenSpec::content),
        )?;
        let bos = match &config.bos_token {
            Some(t) => Some(token_id(t.content())?),
            None => None,
        };
        let add_bos = config.add_bos_token.unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err(TextError::MissingSpecialToken {
                path: config_path,
                token: "bos_token".into(),
            });
        }
        let max_length = config
            .model_max_length
            .filter(|m| (0.0..NO_MAX_LENGTH).contains(m))
            .map(|m| m as usize);
        let this = Self {
            tokenizer,
            dir,
            max_length,
            bos,
            eos,
            add_bos,
            add_eos: config.add_eos_token.unwrap_or(false),
        };
        if this.vocab_size() != TURBO_VOCAB_SIZE {
            tracing::warn!("Tokenizer len {} != {TURBO_VOCAB_SIZE}", this.vocab_size());
        }
        Ok(this)
    }

    fn build_from_vocab_merges(dir: &Path, config: &TokenizerConfig) -> Result<Tokenizer> {
        let vocab = dir.join("vocab.json");
        let merges = dir.join("merges.txt");
        for p in [&vocab, &merges] {
            if !p.is_file() {
                return Err(TextError::Io {
                    path: dir.join("tokenizer.json"),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "neither tokenizer.json nor vocab.json + merges.txt",
                    ),
                });
            }
        }
        let err = |e: tokenizers::Error| TextError::Tokenizer {
            path: vocab.clone(),
            message: e.to_string(),
        };
        let bpe = BPE::from_file(&vocab.to_string_lossy(), &merges.to_string_lossy())
            .continuing_subword_prefix(String::new())
            .end_of_word_suffix(String::new())
            .fuse_unk(false)
            .build()
            .map_err(err)?;
        let mut tokenizer = Tokenizer::new(bpe);
        let add_prefix_space = config.add_prefix_space.unwrap_or(false);
        tokenizer.with_pre_tokenizer(Some(
            tokenizers::pre_tokenizers::byte_level::ByteLevel::default()
                .add_prefix_space(add_prefix_space),
        ));
        tokenizer.with_decoder(Some(ByteLevel::default()));

        // Added tokens in id order: tokenizer_config's added_tokens_decoder, else
        // added_tokens.json ({content: id}).
        let mut added: Vec<(u32, AddedToken)> = Vec::new();
        if let Some(dec) = &config.added_tokens_decoder {
            for (id, t) in dec {
                let id: u32 = id.parse().map_err(|_| TextError::InvalidData {
                    what: "tokenizer config",
                    path: dir.join("tokenizer_config.json"),
                    message: format!("added token id {id:?} is not a number"),
                })?;
                let token = AddedToken::from(t.content.clone(), t.special)
                    .lstrip(t.lstrip)
                    .rstrip(t.rstrip)
                    .single_word(t.single_word)
                    .normalized(t.normalized);
                added.push((id, token));
            }
        } else {
            let path = dir.join("added_tokens.json");
            if path.is_file() {
                let map: BTreeMap<String, u32> = read_json(&path, "added tokens")?;
                added.extend(
                    map.into_iter()
                        .map(|(content, id)| (id, AddedToken::from(content, false))),
                );
            }
        }
        added.sort_by_key(|(id, _)| *id);
        for (id, token) in added {
            let content = token.content.clone();
            if token.special {
                tokenizer.add_special_tokens(&[token]);
            } else {
                tokenizer.add_tokens(&[token]);
            }
            if tokenizer.token_to_id(&content) != Some(id) {
                return Err(TextError::InvalidData {
                    what: "added tokens",
                    path: dir.to_path_buf(),
                    message: format!(
                        "{content:?} should have id {id}, got {:?}",
                        tokenizer.token_to_id(&content)
                    ),
                });
            }
        }
        Ok(tokenizer)
    }

    /// Token ids of `text` (already `punc_norm`-ed), truncated to `model_max_length`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend(encode_ids(&self.tokenizer, &self.dir, text)?);
        if self.add_eos {
            ids.push(self.eos);
        }
        if let Some(max) = self.max_length {
            ids.truncate(max);
        }
        Ok(ids)
    }

    /// Text of `ids` (special tokens kept).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, false)
            .map_err(|e| TextError::Tokenizer {
                path: self.dir.clone(),
                message: e.to_string(),
            })
    }

    /// Id of the end-of-text token (`<|endoftext|>`; also the padding token).
    pub fn eos(&self) -> u32 {
        self.eos
    }

    /// `model_max_length`, if the config sets one.
    pub fn max_length(&self) -> Option<usize> {
        self.max_length
    }

    /// Vocabulary size including added tokens (`len(tokenizer)`).
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.tokenizer
    }
}
