//! A Turbo (or English) checkpoint folder whose T3 is full size with random weights (N(0, 0.02)
//! matrices, the real key names and shapes) and whose other parts are the pipeline's tiny test
//! models: what `chatterbox quantize` and the load time and memory of `chatterbox speak` are
//! measured on in docs/benchmarks.md (T3 is what quantizing changes), without Python or a
//! download.
//!
//! `cargo run -p chatterbox-cli --example full_t3_checkpoint -- OUT_DIR [turbo|english]`
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

type R<T> = anyhow::Result<T>;

/// Turbo's T3 hyper-parameters (`T3Config::turbo()`: GPT-2 medium, the real vocabularies).
const WIDTH: usize = 1024;
const LAYERS: usize = 24;
const POSITIONS: usize = 8196;
const TEXT_VOCAB: usize = 50276;
const SPEECH_VOCAB: usize = 6563;
const SPEAKER: usize = 256;

/// English's T3 (`T3Config::english_only()`: Llama 520M, learned positions, perceiver).
const EN_LAYERS: usize = 30;
const EN_MLP: usize = 4096;
const EN_TEXT_VOCAB: usize = 704;
const EN_SPEECH_VOCAB: usize = 8194;
const EN_TEXT_POSITIONS: usize = 2048 + 2;
const EN_SPEECH_POSITIONS: usize = 4096 + 4;

/// `(key, shape)` of every tensor English's T3 reads (`text_head` and `tfmr.embed_tokens`, never
/// read, are left out).
fn english_shapes() -> Vec<(String, Vec<usize>)> {
    let c = WIDTH;
    let mut v = Vec::new();
    for n in 0..EN_LAYERS {
        let p = format!("tfmr.layers.{n}");
        for w in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            v.push((format!("{p}.self_attn.{w}.weight"), vec![c, c]));
        }
        v.push((format!("{p}.mlp.gate_proj.weight"), vec![EN_MLP, c]));
        v.push((format!("{p}.mlp.up_proj.weight"), vec![EN_MLP, c]));
        v.push((format!("{p}.mlp.down_proj.weight"), vec![c, EN_MLP]));
        v.push((format!("{p}.input_layernorm.weight"), vec![c]));
        v.push((format!("{p}.post_attention_layernorm.weight"), vec![c]));
    }
    let a = "cond_enc.perceiver.attn";
    for (k, s) in [
        ("tfmr.norm.weight".to_string(), vec![c]),
        ("cond_enc.spkr_enc.weight".into(), vec![c, SPEAKER]),
        ("cond_enc.spkr_enc.bias".into(), vec![c]),
        ("cond_enc.emotion_adv_fc.weight".into(), vec![c, 1]),
        (
            "cond_enc.perceiver.pre_attention_query".into(),
            vec![1, 32, c],
        ),
        (format!("{a}.norm.weight"), vec![c]),
        (format!("{a}.norm.bias"), vec![c]),
        ("text_emb.weight".into(), vec![EN_TEXT_VOCAB, c]),
        ("speech_emb.weight".into(), vec![EN_SPEECH_VOCAB, c]),
        ("text_pos_emb.emb.weight".into(), vec![EN_TEXT_POSITIONS, c]),
        (
            "speech_pos_emb.emb.weight".into(),
            vec![EN_SPEECH_POSITIONS, c],
        ),
        ("speech_head.weight".into(), vec![EN_SPEECH_VOCAB, c]),
    ] {
        v.push((k, s));
    }
    for w in ["to_q", "to_k", "to_v", "proj_out"] {
        v.push((format!("{a}.{w}.weight"), vec![c, c]));
        v.push((format!("{a}.{w}.bias"), vec![c]));
    }
    v
}

/// `(key, shape)` of every tensor Turbo's T3 reads (`text_head` and `wte`, never read, are
/// left out).
fn tensor_shapes() -> Vec<(String, Vec<usize>)> {
    let c = WIDTH;
    let mut v = vec![("tfmr.wpe.weight".to_string(), vec![POSITIONS, c])];
    for n in 0..LAYERS {
        let p = format!("tfmr.h.{n}");
        for ln in ["ln_1", "ln_2"] {
            v.push((format!("{p}.{ln}.weight"), vec![c]));
            v.push((format!("{p}.{ln}.bias"), vec![c]));
        }
        for (w, i, o) in [
            ("attn.c_attn", c, 3 * c),
            ("attn.c_proj", c, c),
            ("mlp.c_fc", c, 4 * c),
            ("mlp.c_proj", 4 * c, c),
        ] {
            v.push((format!("{p}.{w}.weight"), vec![i, o]));
            v.push((format!("{p}.{w}.bias"), vec![o]));
        }
    }
    for (k, s) in [
        ("tfmr.ln_f.weight", vec![c]),
        ("tfmr.ln_f.bias", vec![c]),
        ("cond_enc.spkr_enc.weight", vec![c, SPEAKER]),
        ("cond_enc.spkr_enc.bias", vec![c]),
        ("text_emb.weight", vec![TEXT_VOCAB, c]),
        ("speech_emb.weight", vec![SPEECH_VOCAB, c]),
        ("speech_head.weight", vec![SPEECH_VOCAB, c]),
        ("speech_head.bias", vec![SPEECH_VOCAB]),
    ] {
        v.push((k.to_string(), s));
    }
    v
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../parity/fixtures")
}

fn main() -> R<()> {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or_else(|| anyhow::anyhow!("usage: full_t3_checkpoint OUT_DIR [turbo|english]"))?;
    let english = match std::env::args().nth(2).as_deref() {
        None | Some("turbo") => false,
        Some("english") => true,
        Some(other) => anyhow::bail!("{other:?}: expected turbo or english"),
    };
    std::fs::create_dir_all(&out)?;
    if english {
        return english_folder(&out);
    }
    save_random(&tensor_shapes(), &out.join("t3_turbo_v1.safetensors"))?;

    // the pipeline fixtures' Turbo VoiceEncoder and S3Gen (the English flow plus Turbo's
    // meanflow tensors), its tokenizer and config with the full-size T3's hyper-parameters
    let load = |case: &str| {
        candle_core::safetensors::load(
            fixtures().join(format!("pipeline/{case}.safetensors")),
            &Device::Cpu,
        )
    };
    let (en, tu) = (load("english")?, load("turbo")?);
    let part = |t: &HashMap<String, Tensor>, prefix: &str| -> HashMap<String, Tensor> {
        t.iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
            .collect()
    };
    candle_core::safetensors::save(&part(&tu, "ve."), out.join("ve.safetensors"))?;
    let mut s3 = part(&en, "s3gen.");
    s3.extend(part(&tu, "s3gen."));
    candle_core::safetensors::save(&s3, out.join("s3gen_meanflow.safetensors"))?;
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixtures().join("text/assets/turbo").join(f), out.join(f))?;
    }
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        fixtures().join("pipeline/turbo.json"),
    )?)?;
    let mut cfg = fx["config"]["chatterbox"].clone();
    let t = &mut cfg["t3"];
    for (k, v) in [
        ("n_embd", WIDTH),
        ("hidden_size", WIDTH),
        ("n_head", WIDTH / 64),
        ("n_layer", LAYERS),
        ("n_positions", POSITIONS),
        ("n_ctx", POSITIONS),
        ("vocab_size", TEXT_VOCAB),
    ] {
        t["backbone"][k] = v.into();
    }
    t["text_tokens_dict_size"] = TEXT_VOCAB.into();
    t["max_text_tokens"] = 2048.into();
    t["max_speech_tokens"] = 4096.into();
    t["llama_config_name"] = "GPT2_medium".into();
    std::fs::write(
        out.join(chatterbox_pipeline::CONFIG_FILE),
        serde_json::to_string(&cfg)?,
    )?;
    // a 6 s voice clip (Turbo needs more than 5 s): the English case's reference, repeated
    let clip = en
        .get("in.ref_24k")
        .ok_or_else(|| anyhow::anyhow!("no reference clip"))?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    chatterbox_dsp::audio::write_wav(
        out.join("voice.wav"),
        &chatterbox_dsp::Audio::new(clip.repeat(6), 24_000),
        chatterbox_dsp::WavFormat::Float32,
    )?;
    println!("wrote {}", out.display());
    Ok(())
}

/// [`main`] for English: the full-size T3 and the English case's tiny VoiceEncoder, S3Gen,
/// tokenizer and config (its T3 part resized), and its reference clip.
fn english_folder(out: &Path) -> R<()> {
    save_random(&english_shapes(), &out.join("t3_cfg.safetensors"))?;
    let en = candle_core::safetensors::load(
        fixtures().join("pipeline/english.safetensors"),
        &Device::Cpu,
    )?;
    for (prefix, file) in [("ve.", "ve.safetensors"), ("s3gen.", "s3gen.safetensors")] {
        let part: HashMap<String, Tensor> = en
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
            .collect();
        candle_core::safetensors::save(&part, out.join(file))?;
    }
    std::fs::copy(
        fixtures().join("text/assets/en/tokenizer.json"),
        out.join("tokenizer.json"),
    )?;
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        fixtures().join("pipeline/english.json"),
    )?)?;
    let mut cfg = fx["config"]["chatterbox"].clone();
    let t = &mut cfg["t3"];
    for (k, v) in [
        ("hidden_size", WIDTH),
        ("intermediate_size", EN_MLP),
        ("num_hidden_layers", EN_LAYERS),
        ("num_attention_heads", WIDTH / 64),
        ("num_key_value_heads", WIDTH / 64),
        ("head_dim", 64),
    ] {
        t["backbone"][k] = v.into();
    }
    t["perceiver"]["embedding_dim"] = WIDTH.into();
    t["perceiver"]["pre_attention_query_size"] = WIDTH.into();
    t["max_text_tokens"] = (EN_TEXT_POSITIONS - 2).into();
    t["max_speech_tokens"] = (EN_SPEECH_POSITIONS - 4).into();
    t["llama_config_name"] = "Llama_520M".into();
    std::fs::write(
        out.join(chatterbox_pipeline::CONFIG_FILE),
        serde_json::to_string(&cfg)?,
    )?;
    let clip = en
        .get("in.ref_24k")
        .ok_or_else(|| anyhow::anyhow!("no reference clip"))?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    chatterbox_dsp::audio::write_wav(
        out.join("voice.wav"),
        &chatterbox_dsp::Audio::new(clip.repeat(6), 24_000),
        chatterbox_dsp::WavFormat::Float32,
    )?;
    println!("wrote {}", out.display());
    Ok(())
}

/// N(0, 0.02) matrices, unit norm weights (1-D `weight`), zero biases, saved to `path`.
fn save_random(shapes: &[(String, Vec<usize>)], path: &Path) -> R<()> {
    let mut t = HashMap::new();
    for (k, s) in shapes {
        let v = if s.len() == 1 && k.ends_with("weight") {
            Tensor::ones(s.as_slice(), DType::F32, &Device::Cpu)?
        } else if s.len() == 1 {
            Tensor::zeros(s.as_slice(), DType::F32, &Device::Cpu)?
        } else {
            Tensor::randn(0f32, 0.02, s.as_slice(), &Device::Cpu)?
        };
        t.insert(k.clone(), v);
    }
    Ok(candle_core::safetensors::save(&t, path)?)
}
