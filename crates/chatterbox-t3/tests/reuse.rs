//! T3 as another project uses it: a tiny configuration from JSON, a model from an in-memory
//! state_dict (random, real key names), and generation driven step by step through the public
//! API (`generation_embeds`, `DecodeStep`, the processors), which must draw exactly the tokens
//! of `T3::generate`.
#[path = "common/random_weights.rs"]
mod random_weights;

use candle_core::{DType, Device, Tensor};
use chatterbox_t3::sampling::{LogitsProcessorList, TokenPicker};
use chatterbox_t3::{
    AttentionSpan, DecodeStep, GenerateOptions, Sampling, T3Cond, T3Config, T3Error,
};

type R<T> = anyhow::Result<T>;

/// A 2-layer, 32-wide English T3 (the field names of the reference's `T3Config`).
const TINY: &str = r#"{
  "backbone": {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "max_position_embeddings": 131072,
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
      "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
  "emotion_adv": true, "encoder_type": "voice_encoder", "input_pos_emb": "learned",
  "max_speech_tokens": 508, "max_text_tokens": 254,
  "perceiver": {"embedding_dim": 32, "num_attn_heads": 4, "pre_attention_query_size": 32,
    "pre_attention_query_token": 32},
  "speaker_embed_size": 256, "speech_cond_prompt_len": 150, "speech_tokens_dict_size": 8194,
  "start_speech_token": 6561, "start_text_token": 255, "stop_speech_token": 6562,
  "stop_text_token": 0, "text_tokens_dict_size": 704, "use_perceiver_resampler": true
}"#;

#[test]
fn a_config_from_json_and_a_model_from_a_state_dict() -> R<()> {
    let hp = T3Config::from_json(TINY)?;
    assert_eq!(hp.n_channels(), 32);
    assert!(!hp.is_gpt() && hp.has_learned_pos_emb());
    let bad = T3Config::from_json("{\"backbone\": 3}").unwrap_err();
    assert!(matches!(bad, T3Error::InvalidConfig(_)), "{bad}");
    assert!(bad.to_string().contains("T3 config JSON"), "{bad}");
    // the presets are the released models'
    assert_eq!(T3Config::english_only().n_channels(), 1024);
    assert!(T3Config::turbo().is_gpt());
    Ok(())
}

#[test]
fn stepping_by_hand_draws_what_generate_draws() -> R<()> {
    let dev = Device::Cpu;
    let hp = T3Config::from_json(TINY)?;
    let t3 = random_weights::random_t3(&hp, DType::F32, &dev)?;
    let speaker = Tensor::randn(0f32, 1.0, (1, 256), &dev)?;
    let prompt = Tensor::new(&[[1u32, 2, 3, 4, 5, 6]], &dev)?;
    let cond = t3.prepare_conditioning(&T3Cond::new(speaker).with_prompt(prompt))?;
    let text = t3.pad_text_tokens(&[20, 21, 22, 23]);
    let mut opts = GenerateOptions::default();
    opts.sampling = Sampling::Greedy;
    opts.max_new_tokens = 12;
    opts.stop_on_eos = false;
    let want = t3.inference(&cond, &text, &opts)?;
    assert_eq!(want.len(), 12);

    // the same loop through the public step API
    let embeds = t3.generation_embeds(&cond, &text, true)?;
    assert_eq!(embeds.dim(0)?, 2);
    let len = embeds.dim(1)?;
    let vocab = hp.speech_tokens_dict_size;
    let mut step = DecodeStep::new(&t3, 2, len + 12, Some(opts.cfg_weight))?;
    let processors = LogitsProcessorList::t3(
        opts.repetition_penalty,
        opts.temperature,
        opts.min_p,
        opts.top_p,
        vocab,
        &dev,
    )?;
    let picker = TokenPicker::new(vocab, &dev)?;
    step.history()
        .push(&Tensor::new(&[[hp.start_speech_token]], &dev)?)?;
    step.prefill(&t3, &embeds)?;
    let mut got = Vec::new();
    for i in 0..12 {
        if i > 0 {
            step.set_inputs(got[i - 1], len + i - 1, i)?;
            let hidden = step.forward_hidden(&t3, AttentionSpan::Exact)?;
            assert_eq!(hidden.dims(), &[2, 1, 32]);
            // the logits are the speech head on the hidden state
            let logits = t3.speech_logits(&hidden)?;
            let d = (logits - step.logits())?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert_eq!(d, 0.0);
        }
        step.select(&processors, &picker)?;
        let probs = candle_nn::ops::softmax_last_dim(step.processed())?;
        let sum = probs.sum_all()?.to_scalar::<f32>()?;
        assert!((sum - 1.0).abs() < 1e-4, "{sum}");
        let token = step.read_token()?.expect("a finite score");
        let top = probs.argmax(1)?.to_vec1::<u32>()?[0];
        assert_eq!(token, top, "greedy takes the most probable token");
        got.push(token);
    }
    assert_eq!(got, want);

    // the stream's probabilities are the processors' own
    let mut stream = t3.generate(&cond, &text, &opts)?;
    stream.next().expect("a token")?;
    let p = stream.probabilities()?;
    assert_eq!(p.dims(), &[1, vocab]);
    let first = p.argmax(1)?.to_vec1::<u32>()?[0];
    assert_eq!(first, want[0]);
    Ok(())
}
