//! `Conditionals` (chatterbox/tts.py, upstream 5de7a54): everything a voice contributes to
//! generation, saved in this crate's safetensors format or read from the reference's
//! `conds.pt`.
use crate::s3gen::S3GenRef;
use crate::{PipelineError, Result};
use candle_core::{DType, Device, Tensor};
use chatterbox_t3::T3Cond;
use std::collections::HashMap;
use std::path::Path;

/// The conditioning of one voice: T3's part (speaker embedding, prompt tokens, exaggeration)
/// and S3Gen's (`ref_dict`).
#[derive(Debug, Clone)]
pub struct Conditionals {
    /// `T3Cond`: `speaker_emb` `(1, 256)`, `cond_prompt_speech_tokens` `(1, n)`,
    /// `emotion_adv`.
    pub t3: T3Cond,
    /// S3Gen's reference voice.
    pub gen: S3GenRef,
}

/// Tensor names of the safetensors format (the field names of the reference's `conds.pt`).
const SPEAKER_EMB: &str = "t3.speaker_emb";
const PROMPT_TOKENS: &str = "t3.cond_prompt_speech_tokens";
const EMOTION_ADV: &str = "t3.emotion_adv";
const PROMPT_TOKEN: &str = "gen.prompt_token";
const PROMPT_FEAT: &str = "gen.prompt_feat";
const EMBEDDING: &str = "gen.embedding";

impl Conditionals {
    /// Saves to a safetensors file: `t3.speaker_emb`, `t3.cond_prompt_speech_tokens` (u32, when
    /// present), `t3.emotion_adv` `(1, 1, 1)`, `gen.prompt_token` (u32), `gen.prompt_feat` and
    /// `gen.embedding` (f32). Written atomically (a temporary file renamed over `path`).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let cpu = Device::Cpu;
        let mut map: HashMap<String, Tensor> = HashMap::new();
        map.insert(
            SPEAKER_EMB.into(),
            self.t3.speaker_emb.to_dtype(DType::F32)?.to_device(&cpu)?,
        );
        if let Some(t) = &self.t3.cond_prompt_speech_tokens {
            map.insert(PROMPT_TOKENS.into(), to_u32(t)?.to_device(&cpu)?);
        }
        map.insert(
            EMOTION_ADV.into(),
            Tensor::full(self.t3.emotion_adv, (1, 1, 1), &cpu)?,
        );
        map.insert(PROMPT_TOKEN.into(), self.gen.prompt_token.to_device(&cpu)?);
        map.insert(PROMPT_FEAT.into(), self.gen.prompt_feat.to_device(&cpu)?);
        map.insert(EMBEDDING.into(), self.gen.embedding.to_device(&cpu)?);
        let io = |source: std::io::Error| PipelineError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Atomically: into a temporary file beside `path`, renamed over it when complete, so
        // an interruption never leaves half a voice file or loses the one that was there.
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut builder = tempfile::Builder::new();
        builder.prefix(".voice-").suffix(".partial");
        // a user's file's permissions (0666 less the umask), not a temporary file's 0600
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let temp = builder.tempfile_in(dir).map_err(io)?.into_temp_path();
        candle_core::safetensors::save(&map, &temp)
            .map_err(|e| io(std::io::Error::other(e.to_string())))?;
        std::fs::File::open(&temp)
            .and_then(|f| f.sync_all())
            .map_err(io)?;
        temp.persist(path).map_err(|e| io(e.error))
    }

    /// Loads a voice saved by [`Conditionals::save`] (`.safetensors`) or the reference's
    /// `conds.pt` (any other extension: a torch pickle with `t3` and `gen` dicts).
    pub fn load(path: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(PipelineError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "file not found"),
            });
        }
        let bad = |reason: String| PipelineError::InvalidConditionals {
            path: path.to_path_buf(),
            reason,
        };
        let tensors: HashMap<String, Tensor> =
            if path.extension().is_some_and(|e| e == "safetensors") {
                candle_core::safetensors::load(path, &Device::Cpu)
                    .map_err(|e| bad(e.to_string()))?
            } else {
                crate::torch_file::check_torch_file(path)
                    .map_err(|e| bad(format!("not a conds.pt torch file ({e})")))?;
                let mut m = HashMap::new();
                for group in ["t3", "gen"] {
                    let items = candle_core::pickle::read_all_with_key(path, Some(group))
                        .map_err(|e| bad(format!("not a conds.pt torch file ({e})")))?;
                    for (k, v) in items {
                        m.insert(format!("{group}.{k}"), v);
                    }
                }
                m
            };
        // Everything is checked and converted on the CPU first, so that any error there is
        // the file's (and names it); only then does the voice move to `device`.
        let checked = |k: &str| -> Result<Option<Tensor>> {
            match tensors.get(k) {
                // Safetensors allows empty tensors of any dims (`[0, 2^62]`): those overflowed
                // candle's stride arithmetic in `generate`. A voice has no empty part.
                Some(t) if t.elem_count() == 0 => {
                    Err(bad(format!("{k} is empty (shape {:?})", t.dims())))
                }
                Some(t) => Ok(Some(t.clone())),
                None => Ok(None),
            }
        };
        let get = |k: &str| checked(k)?.ok_or_else(|| bad(format!("no tensor {k:?}")));
        // `(1, n)`, or `(n,)` made so
        let row = |k: &str, t: Tensor| -> Result<Tensor> {
            match t.rank() {
                1 => Ok(t.unsqueeze(0)?),
                2 if t.dim(0)? == 1 => Ok(t),
                _ => Err(bad(format!(
                    "{k} has shape {:?}, expected (1, n)",
                    t.dims()
                ))),
            }
        };
        let cpu_part = || -> Result<_> {
            let emotion_adv = match checked(EMOTION_ADV)? {
                Some(t) => t
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .get(0)?
                    .to_scalar::<f32>()?,
                None => 0.5,
            };
            let prompt = match checked(PROMPT_TOKENS)? {
                Some(t) => Some(row(PROMPT_TOKENS, to_u32(&t)?)?),
                None => None,
            };
            let speaker_emb = row(SPEAKER_EMB, get(SPEAKER_EMB)?.to_dtype(DType::F32)?)?;
            // The reference keeps a prompt mel one frame longer than twice the prompt tokens
            // (odd clip lengths); the flow here needs exactly twice: the extra frame is cut,
            // as `S3Gen::embed_ref` does.
            let prompt_token = get(PROMPT_TOKEN)?;
            let mut prompt_feat = get(PROMPT_FEAT)?;
            let n_tok = prompt_token.dims().last().copied().unwrap_or(0);
            if prompt_feat.rank() == 3 && prompt_feat.dim(1)? > 2 * n_tok && n_tok > 0 {
                tracing::warn!("conditionals: prompt mel longer than 2 x prompt tokens, cut");
                prompt_feat = prompt_feat.narrow(1, 0, 2 * n_tok)?;
            }
            let gen = S3GenRef::new(prompt_token, prompt_feat, get(EMBEDDING)?, &Device::Cpu)?;
            Ok((emotion_adv, prompt, speaker_emb, gen))
        };
        let (emotion_adv, prompt, speaker_emb, gen) = cpu_part().map_err(|e| match e {
            e @ PipelineError::InvalidConditionals { .. } => e,
            e => bad(e.to_string()),
        })?;
        let mut t3 = T3Cond::new(speaker_emb.to_device(device)?).with_emotion_adv(emotion_adv);
        if let Some(p) = prompt {
            t3 = t3.with_prompt(p.to_device(device)?);
        }
        let gen = S3GenRef::new(gen.prompt_token, gen.prompt_feat, gen.embedding, device)?;
        Ok(Self { t3, gen })
    }

    /// The same voice with another exaggeration (`emotion_adv`).
    pub fn with_exaggeration(&self, exaggeration: f32) -> Self {
        let mut c = self.clone();
        c.t3.emotion_adv = exaggeration;
        c
    }
}

fn to_u32(t: &Tensor) -> Result<Tensor> {
    Ok(match t.dtype() {
        DType::U32 => t.clone(),
        _ => t.to_dtype(DType::I64)?.to_dtype(DType::U32)?,
    })
}
