//! Decoding allocates nothing that outlives a step: live heap bytes after 40 tokens equal those
//! after 10 (the KV cache and every buffer are allocated before the first token).
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_t3::{GenerateOptions, Sampling, T3Cond, T3Config, T3};
use chatterbox_testkit::{fixtures_root, live, CountingAlloc, Fixture};

/// Counts live heap bytes, to check that decoding does not grow memory.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
fn decoding_does_not_grow_the_heap() -> anyhow::Result<()> {
    let dev = Device::Cpu;
    let fx = Fixture::load(&fixtures_root().join("t3/en.json"))?;
    let hp: T3Config = fx.config("hp")?;
    // SAFETY: fixture files are not modified while the tests run.
    let vb =
        unsafe { VarBuilder::from_mmaped_safetensors(&[fx.safetensors_path()], DType::F32, &dev)? };
    let t3 = T3::new(&hp, vb)?;
    let spk = fx.input("speaker_emb")?;
    let cond = T3Cond::new(Tensor::from_vec(spk.data, spk.shape, &dev)?);
    let cond_emb = t3.prepare_conditioning(&cond)?;
    let mut opts = GenerateOptions::default();
    opts.max_new_tokens = 41;
    opts.stop_on_eos = false;
    opts.sampling = Sampling::Seeded(1);
    let mut stream = t3.generate(&cond_emb, &[255, 10, 20, 0], &opts)?;
    let mut at_10 = 0;
    for i in 0..41 {
        stream.next().transpose()?;
        if i == 10 {
            at_10 = live();
        }
    }
    let growth = live() - at_10;
    assert!(
        growth.abs() < 4096,
        "live heap changed by {growth} B over 30 decode steps"
    );
    Ok(())
}
