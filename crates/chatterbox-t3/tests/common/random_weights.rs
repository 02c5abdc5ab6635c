//! Random full-size T3 weights with the real key names and shapes, shared by the t3 bench and
//! the CUDA-graph test (included with `#[path]`; not a test target of its own).
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_t3::{BackboneConfig, LlamaConfig, T3Config, T3};
use std::collections::HashMap;

/// `(key, shape)` of every tensor T3 loads for `hp` (the real checkpoint names).
pub fn tensor_shapes(hp: &T3Config) -> Vec<(String, Vec<usize>)> {
    let c = hp.n_channels();
    let mut v: Vec<(String, Vec<usize>)> = Vec::new();
    let mut add = |k: String, s: &[usize]| v.push((k, s.to_vec()));
    match &hp.backbone {
        BackboneConfig::Llama(l) => {
            let (hd, i) = (l.num_attention_heads * l.head_dim, l.intermediate_size);
            for n in 0..l.num_hidden_layers {
                let p = format!("tfmr.layers.{n}");
                for w in ["q_proj", "k_proj", "v_proj"] {
                    add(format!("{p}.self_attn.{w}.weight"), &[hd, c]);
                }
                add(format!("{p}.self_attn.o_proj.weight"), &[c, hd]);
                add(format!("{p}.mlp.gate_proj.weight"), &[i, c]);
                add(format!("{p}.mlp.up_proj.weight"), &[i, c]);
                add(format!("{p}.mlp.down_proj.weight"), &[c, i]);
                add(format!("{p}.input_layernorm.weight"), &[c]);
                add(format!("{p}.post_attention_layernorm.weight"), &[c]);
            }
            add("tfmr.norm.weight".into(), &[c]);
        }
        BackboneConfig::Gpt2(g) => {
            add("tfmr.wpe.weight".into(), &[g.n_positions, c]);
            for n in 0..g.n_layer {
                let p = format!("tfmr.h.{n}");
                for ln in ["ln_1", "ln_2"] {
                    add(format!("{p}.{ln}.weight"), &[c]);
                    add(format!("{p}.{ln}.bias"), &[c]);
                }
                for (w, i, o) in [
                    ("attn.c_attn", c, 3 * c),
                    ("attn.c_proj", c, c),
                    ("mlp.c_fc", c, 4 * c),
                    ("mlp.c_proj", 4 * c, c),
                ] {
                    add(format!("{p}.{w}.weight"), &[i, o]);
                    add(format!("{p}.{w}.bias"), &[o]);
                }
            }
            add("tfmr.ln_f.weight".into(), &[c]);
            add("tfmr.ln_f.bias".into(), &[c]);
        }
    }
    add(
        "cond_enc.spkr_enc.weight".into(),
        &[c, hp.speaker_embed_size],
    );
    add("cond_enc.spkr_enc.bias".into(), &[c]);
    if hp.emotion_adv {
        add("cond_enc.emotion_adv_fc.weight".into(), &[c, 1]);
    }
    if hp.use_perceiver_resampler {
        let p = &hp.perceiver;
        let d = p.embedding_dim;
        add(
            "cond_enc.perceiver.pre_attention_query".into(),
            &[1, p.pre_attention_query_token, p.pre_attention_query_size],
        );
        add("cond_enc.perceiver.attn.norm.weight".into(), &[d]);
        add("cond_enc.perceiver.attn.norm.bias".into(), &[d]);
        for w in ["to_q", "to_k", "to_v", "proj_out"] {
            add(format!("cond_enc.perceiver.attn.{w}.weight"), &[d, d]);
            add(format!("cond_enc.perceiver.attn.{w}.bias"), &[d]);
        }
    }
    add("text_emb.weight".into(), &[hp.text_tokens_dict_size, c]);
    add("speech_emb.weight".into(), &[hp.speech_tokens_dict_size, c]);
    if hp.has_learned_pos_emb() {
        add("text_pos_emb.emb.weight".into(), &[hp.text_positions(), c]);
        add(
            "speech_pos_emb.emb.weight".into(),
            &[hp.speech_positions(), c],
        );
    }
    add(
        "speech_head.weight".into(),
        &[hp.speech_tokens_dict_size, c],
    );
    if hp.is_gpt() {
        add("speech_head.bias".into(), &[hp.speech_tokens_dict_size]);
    }
    v
}

/// A T3 of `hp` with random weights: N(0, 0.02) matrices, unit norm weights, zero biases.
pub fn random_t3(hp: &T3Config, dtype: DType, dev: &Device) -> candle_core::Result<T3> {
    let mut m = HashMap::new();
    for (k, s) in tensor_shapes(hp) {
        let t = if s.len() == 1 && k.ends_with("weight") {
            Tensor::ones(s, DType::F32, dev)?
        } else if s.len() == 1 {
            Tensor::zeros(s, DType::F32, dev)?
        } else {
            Tensor::randn(0f32, 0.02, s, dev)?
        };
        m.insert(k, t.to_dtype(dtype)?);
    }
    T3::new(hp, VarBuilder::from_tensors(m, dtype, dev))
        .map_err(|e| candle_core::Error::Msg(e.to_string()))
}

/// Deterministic values in about [-a, a] (a fixed hash of the index), `shape`.
#[allow(dead_code)] // the quantized tests' (the benches and CUDA tests include this file too)
pub fn fixed(shape: &[usize], a: f32, salt: u64) -> candle_core::Result<Tensor> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n as u64)
        .map(|i| {
            let mut x = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
            x ^= x >> 29;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x ^= x >> 32;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu)
}

/// A 2-layer Llama T3 256 wide (wide enough for q4's blocks) and its weights: [`fixed`]
/// values (uniform, std 0.02) for matrices, ones for 1-D weights, zeros for biases.
#[allow(dead_code)] // the quantized tests' (the benches and CUDA tests include this file too)
pub fn wide_llama_weights() -> candle_core::Result<(T3Config, HashMap<String, Tensor>)> {
    let mut hp = T3Config::english_only();
    hp.backbone = BackboneConfig::Llama(LlamaConfig {
        hidden_size: 256,
        intermediate_size: 512,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 4,
        head_dim: 64,
        ..LlamaConfig::llama_520m()
    });
    hp.perceiver.embedding_dim = 256;
    hp.perceiver.pre_attention_query_size = 256;
    let mut m = HashMap::new();
    for (i, (k, s)) in tensor_shapes(&hp).into_iter().enumerate() {
        let t = if s.len() == 1 && k.ends_with("weight") {
            Tensor::ones(s, DType::F32, &Device::Cpu)?
        } else if s.len() == 1 {
            Tensor::zeros(s, DType::F32, &Device::Cpu)?
        } else {
            fixed(&s, 0.0346, i as u64)?
        };
        m.insert(k, t);
    }
    Ok((hp, m))
}
