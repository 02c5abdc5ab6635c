//! The tiny parity models of `parity/fixtures/t3` and their inputs, shared by the behaviour
//! tests (included with `#[path]`; not a test target of its own).
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_t3::{T3Cond, T3Config, T3};
use chatterbox_testkit::{fixtures_root, Fixture};

/// The fixture of `case` (`en`, `mtl`, `turbo`, ...).
pub fn fixture(case: &str) -> anyhow::Result<Fixture> {
    Ok(Fixture::load(
        &fixtures_root().join(format!("t3/{case}.json")),
    )?)
}

/// The fixture's tiny T3 (f32, CPU) and the fixture.
pub fn model(case: &str) -> anyhow::Result<(T3, Fixture)> {
    let fx = fixture(case)?;
    let hp: T3Config = fx.config("hp")?;
    // SAFETY: fixture files are not modified while the tests run.
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(&[fx.safetensors_path()], DType::F32, &Device::Cpu)?
    };
    Ok((T3::new(&hp, vb)?, fx))
}

/// An integer input of the fixture as ids.
pub fn ids(fx: &Fixture, name: &str) -> anyhow::Result<Vec<u32>> {
    Ok(fx.input_i64(name)?.data.iter().map(|&v| v as u32).collect())
}

/// The conditioning prefix of the fixture's speaker embedding and prompt tokens.
pub fn cond_emb(t3: &T3, fx: &Fixture) -> anyhow::Result<Tensor> {
    let dev = Device::Cpu;
    let spk = fx.input("speaker_emb")?;
    let spk = Tensor::from_vec(spk.data, spk.shape, &dev)?;
    let prompt = Tensor::new(ids(fx, "prompt_tokens")?.as_slice(), &dev)?.unsqueeze(0)?;
    Ok(t3.prepare_conditioning(&T3Cond::new(spk).with_prompt(prompt))?)
}
