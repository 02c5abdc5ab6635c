//! CUDA-graph replay of the decode step gives the same tokens as eager decoding, at full size
//! (random weights, bf16) for the English (Llama, CFG batch 2) and Turbo (GPT-2) models.
//! Built only with `--features cuda`; needs a GPU, so it runs on the device machine:
//! `cargo test --release -p chatterbox-t3 --features cuda --test cuda_graph`.
#![cfg(feature = "cuda")]
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use chatterbox_t3::{GenerateOptions, Sampling, T3Cond, T3Config, TurboOptions, T3};

type R<T> = anyhow::Result<T>;

/// Random weights on the device: N(0, 0.02) matrices, unit norm weights, zero biases.
struct RandomWeights;

impl SimpleBackend for RandomWeights {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let t = if s.rank() > 1 {
            Tensor::randn(0f32, 0.02, s, dev)?
        } else if name.ends_with("weight") {
            Tensor::ones(s, DType::F32, dev)?
        } else {
            Tensor::zeros(s, DType::F32, dev)?
        };
        t.to_dtype(dtype)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("random weights need a shape ({name})")
    }

    fn contains_tensor(&self, _: &str) -> bool {
        true
    }
}

fn model(hp: &T3Config, dev: &Device) -> R<T3> {
    let vb = VarBuilder::from_backend(Box::new(RandomWeights), DType::BF16, dev.clone());
    Ok(T3::new(hp, vb)?)
}

fn cond(t3: &T3, prompt_len: u32, dev: &Device) -> R<Tensor> {
    let speaker = Tensor::randn(0f32, 0.06, (1, 256), dev)?;
    let prompt: Vec<u32> = (0..prompt_len).map(|i| (i * 37 + 11) % 6561).collect();
    let prompt = Tensor::new(prompt.as_slice(), dev)?.unsqueeze(0)?;
    Ok(t3.prepare_conditioning(&T3Cond::new(speaker).with_prompt(prompt))?)
}

/// Tokens to draw: enough to cross an attention bucket, so at least two graphs are captured
/// and replayed.
const TOKENS: usize = 300;

#[test]
fn english_graph_replay_matches_eager() -> R<()> {
    let dev = Device::new_cuda(0)?;
    let t3 = model(&T3Config::english_only(), &dev)?;
    let ce = cond(&t3, 150, &dev)?;
    let text = t3.pad_text_tokens(&(0..60u32).map(|i| 20 + (i * 7) % 600).collect::<Vec<_>>());
    let run = |graphs: bool| -> R<(Vec<u32>, usize)> {
        let mut o = GenerateOptions::default();
        o.max_new_tokens = TOKENS;
        o.stop_on_eos = false;
        o.sampling = Sampling::Seeded(7);
        o.cuda_graphs = graphs;
        let mut s = t3.generate(&ce, &text, &o)?;
        let mut out = Vec::new();
        for t in s.by_ref() {
            out.push(t?);
        }
        Ok((out, s.cuda_graphs_captured()))
    };
    let (eager, none) = run(false)?;
    let (graph, captured) = run(true)?;
    assert_eq!(none, 0);
    assert!(captured >= 2, "only {captured} graphs captured");
    assert_eq!(eager.len(), TOKENS);
    assert_eq!(graph, eager);
    // sampling really happened: not one token repeated throughout
    assert!(eager.iter().any(|&t| t != eager[0]));
    Ok(())
}

#[test]
fn turbo_graph_replay_matches_eager() -> R<()> {
    let dev = Device::new_cuda(0)?;
    let t3 = model(&T3Config::turbo(), &dev)?;
    let ce = cond(&t3, 375, &dev)?;
    let text: Vec<u32> = (0..60u32).map(|i| 1000 + i * 13).collect();
    let run = |graphs: bool| -> R<(Vec<u32>, usize)> {
        let mut o = TurboOptions::default();
        o.max_gen_len = TOKENS;
        o.stop_on_eos = false;
        o.sampling = Sampling::Seeded(7);
        o.cuda_graphs = graphs;
        let mut s = t3.generate_turbo(&ce, &text, &o)?;
        let mut out = Vec::new();
        for t in s.by_ref() {
            out.push(t?);
        }
        Ok((out, s.cuda_graphs_captured()))
    };
    let (eager, none) = run(false)?;
    let (graph, captured) = run(true)?;
    assert_eq!(none, 0);
    assert!(captured >= 2, "only {captured} graphs captured");
    assert_eq!(eager.len(), TOKENS);
    assert_eq!(graph, eager);
    assert!(eager.iter().any(|&t| t != eager[0]));
    Ok(())
}
