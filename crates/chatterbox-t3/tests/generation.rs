//! Behaviour beyond the recorded cases, on the tiny parity models: decode steps against a
//! full prefill, bucketed (graph-shaped) attention against exact attention, seeded sampling,
//! and typed errors.
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_t3::sampling::{Sampler, TokenPicker};
use chatterbox_t3::{GenerateOptions, Sampling, T3Cond, T3Config, T3Error, TurboOptions, T3};

#[path = "common/fixtures.rs"]
mod fixtures;

use fixtures::{cond_emb, fixture, ids, model};

type R<T> = anyhow::Result<T>;

fn max_rel(a: &Tensor, b: &Tensor) -> R<f32> {
    let d = (a - b)?.abs()?.max_all()?.to_scalar::<f32>()?;
    let m = b.abs()?.max_all()?.to_scalar::<f32>()?;
    Ok(d / m)
}

fn greedy(max: usize) -> GenerateOptions {
    let mut o = GenerateOptions::default();
    o.sampling = Sampling::Greedy;
    o.max_new_tokens = max;
    o.stop_on_eos = false;
    o
}

#[test]
fn decode_steps_match_a_full_prefill() {
    let (t3, fx) = model("en").unwrap();
    let dev = Device::Cpu;
    let ce = cond_emb(&t3, &fx).unwrap();
    let text = ids(&fx, "text_tokens").unwrap();
    let forced = ids(&fx, "tf_tokens").unwrap();
    let mut stream = t3.generate(&ce, &text, &greedy(10)).unwrap();
    // the whole sequence as one prompt: [cond | text | BOS] + BOS@0 + forced[i]@(i+1)
    let start = t3.config().start_speech_token;
    let mut parts = vec![t3.prepare_input_embeds(&ce, &text, &[start], true).unwrap()];
    for (i, &t) in [start].iter().chain(&forced[..6]).enumerate() {
        let e = t3
            .speech_step_embed(
                &Tensor::new(&[t], &dev).unwrap(),
                &Tensor::new(&[i as u32], &dev).unwrap(),
            )
            .unwrap();
        parts.push(
            e.broadcast_as((2, 1, e.dim(2).unwrap()))
                .unwrap()
                .contiguous()
                .unwrap(),
        );
    }
    for &t in &forced[..6] {
        stream.next().unwrap().unwrap();
        stream.feed(t).unwrap();
    }
    let full = Tensor::cat(&parts, 1).unwrap();
    let hidden = t3.hidden_states(&full).unwrap().pop().unwrap();
    let last = hidden.narrow(1, full.dim(1).unwrap() - 1, 1).unwrap();
    let want = t3.speech_logits(&last).unwrap();
    let err = max_rel(stream.logits(), &want).unwrap();
    assert!(err < 1e-5, "decode vs prefill: {err}");
}

#[test]
fn bucketed_attention_matches_exact_attention() {
    for case in ["en", "turbo"] {
        let (t3, fx) = model(case).unwrap();
        let ce = cond_emb(&t3, &fx).unwrap();
        let text = ids(&fx, "text_tokens").unwrap();
        let run = |bucket: Option<usize>| -> (Vec<u32>, Tensor) {
            let mut s = if case == "turbo" {
                let mut o = TurboOptions::default();
                o.sampling = Sampling::Greedy;
                o.max_gen_len = 11;
                o.stop_on_eos = false;
                t3.generate_turbo(&ce, &text, &o).unwrap()
            } else {
                t3.generate(&ce, &text, &greedy(12)).unwrap()
            };
            if let Some(b) = bucket {
                s.use_buckets(b);
            }
            let toks: Vec<u32> = s.by_ref().map(|t| t.unwrap()).collect();
            (toks, s.logits().copy().unwrap())
        };
        let (a, la) = run(None);
        let (b, lb) = run(Some(16));
        assert_eq!(a.len(), 12);
        assert_eq!(a, b, "{case}");
        assert!(max_rel(&lb, &la).unwrap() < 1e-5, "{case}");
    }
}

#[test]
fn seeded_sampling_reproduces_and_differs_by_seed() {
    let (t3, fx) = model("en").unwrap();
    let ce = cond_emb(&t3, &fx).unwrap();
    let text = ids(&fx, "text_tokens").unwrap();
    let run = |seed| {
        let mut o = greedy(15);
        o.sampling = Sampling::Seeded(seed);
        t3.inference(&ce, &text, &o).unwrap()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn gumbel_draws_follow_the_softmax() {
    let dev = Device::Cpu;
    let logits = [0.0f32, 1.0, 2.0, f32::NEG_INFINITY];
    let scores = Tensor::new(&[logits], &dev).unwrap();
    let picker = TokenPicker::new(4, &dev).unwrap();
    let mut sampler = Sampler::new(Sampling::Seeded(3), 4);
    let n = 20_000;
    let mut counts = [0usize; 4];
    for _ in 0..n {
        let noise = Tensor::new(sampler.next_noise(), &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let t = picker
            .pick(&scores, &noise)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<u32>()
            .unwrap()[0];
        counts[t as usize] += 1;
    }
    let z: f32 = logits[..3].iter().map(|l| l.exp()).sum();
    for i in 0..3 {
        let p = logits[i].exp() / z;
        let f = counts[i] as f32 / n as f32;
        assert!((f - p).abs() < 0.015, "token {i}: {f} vs {p}");
    }
    assert_eq!(counts[3], 0);
    // every score -inf: the picker reports no valid token (vocab)
    let all = Tensor::new(&[[f32::NEG_INFINITY; 4]], &dev).unwrap();
    let zero = Tensor::zeros((1, 4), DType::F32, &dev).unwrap();
    let t = picker
        .pick(&all, &zero)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<u32>()
        .unwrap();
    assert_eq!(t, vec![4]);
}

#[test]
fn variants_are_inferred_from_checkpoint_shapes() {
    let en = T3Config::from_safetensors(&[fixture("en").unwrap().safetensors_path()]).unwrap();
    assert!(!en.is_gpt() && !en.is_multilingual());
    assert_eq!(
        (
            en.text_tokens_dict_size,
            en.speech_tokens_dict_size,
            en.max_text_tokens
        ),
        (704, 8194, 254)
    );
    assert_eq!(en.backbone.num_layers(), 2);
    let mtl = T3Config::from_safetensors(&[fixture("mtl").unwrap().safetensors_path()]).unwrap();
    assert!(mtl.is_multilingual());
    let turbo =
        T3Config::from_safetensors(&[fixture("turbo").unwrap().safetensors_path()]).unwrap();
    assert!(turbo.is_gpt() && !turbo.has_learned_pos_emb() && !turbo.use_perceiver_resampler);
    assert_eq!(turbo.speech_tokens_dict_size, 6563);
    assert!(
        T3Config::from_safetensors(&[fixture("processors").unwrap().safetensors_path()]).is_err()
    );
}

#[test]
fn bad_inputs_are_typed_errors() {
    let (t3, fx) = model("en").unwrap();
    let ce = cond_emb(&t3, &fx).unwrap();
    let o = greedy(3);
    let err = |r: chatterbox_t3::Result<Vec<u32>>| r.unwrap_err();
    assert!(matches!(
        err(t3.inference(&ce, &[], &o)),
        T3Error::InvalidInput {
            what: "text_tokens",
            ..
        }
    ));
    assert!(
        matches!(
            err(t3.inference(&ce, &[12, 0], &o)),
            T3Error::InvalidInput { .. }
        ),
        "no SOT"
    );
    assert!(
        matches!(
            err(t3.inference(&ce, &[255, 12], &o)),
            T3Error::InvalidInput { .. }
        ),
        "no EOT"
    );
    assert!(
        matches!(
            err(t3.inference(&ce, &[255, 704, 0], &o)),
            T3Error::InvalidInput { .. }
        ),
        "id >= vocab"
    );
    let long: Vec<u32> = std::iter::once(255)
        .chain(std::iter::repeat_n(5, 300))
        .chain([0])
        .collect();
    assert!(matches!(
        err(t3.inference(&ce, &long, &o)),
        T3Error::TextTooLong { len: 302, max: 256 }
    ));
    let mut bad = o.clone();
    bad.top_p = 1.5;
    assert!(matches!(
        err(t3.inference(&ce, &[255, 1, 0], &bad)),
        T3Error::InvalidSampling { name: "top_p", .. }
    ));
    let mut bad = o.clone();
    bad.max_new_tokens = 100_000;
    assert!(matches!(
        err(t3.inference(&ce, &[255, 1, 0], &bad)),
        T3Error::SequenceTooLong { .. }
    ));
    assert!(matches!(
        t3.generate_turbo(&ce, &[1, 2], &TurboOptions::default())
            .err(),
        Some(T3Error::WrongVariant { .. })
    ));
    // feeding past the preallocated cache
    let mut s = t3.generate(&ce, &[255, 1, 0], &greedy(2)).unwrap();
    s.feed(1).unwrap();
    s.feed(2).unwrap();
    assert!(matches!(s.feed(3), Err(T3Error::SequenceTooLong { .. })));
    assert!(matches!(s.feed(9000), Err(T3Error::InvalidInput { .. })));
    // speaker embedding of the wrong width
    let spk = Tensor::zeros((1, 100), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(
        t3.prepare_conditioning(&T3Cond::new(spk)),
        Err(T3Error::InvalidInput { .. })
    ));
}

#[test]
fn checkpoints_of_another_variant_are_rejected() {
    let dev = Device::Cpu;
    let load = |case: &str, hp: &T3Config| {
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(
                &[fixture(case).unwrap().safetensors_path()],
                DType::F32,
                &dev,
            )
        }
        .unwrap();
        T3::new(hp, vb).err()
    };
    let en: T3Config = fixture("en").unwrap().config("hp").unwrap();
    // an English checkpoint loaded as multilingual (text vocab 2454)
    let mut mtl = en.clone();
    mtl.text_tokens_dict_size = 2454;
    match load("en", &mtl) {
        Some(T3Error::ShapeMismatch {
            key,
            expected,
            actual,
        }) => {
            assert_eq!(key, "text_emb.weight");
            assert_eq!((expected, actual), (vec![2454, 32], vec![704, 32]));
        }
        e => panic!("expected a shape mismatch, got {e:?}"),
    }
    match load("turbo", &en) {
        Some(T3Error::MissingWeight { key }) => assert_eq!(key, "text_pos_emb.emb.weight"),
        e => panic!("expected a missing weight, got {e:?}"),
    }
}
