//! [`RefEncoder::embed_ref`] against the reference: the S3Gen half of the voice that the
//! pipeline's `english` fixture records (`parity/recorders/pipeline.py`: chatterbox's
//! `prepare_conditionals`, whose `S3Gen.embed_ref` gives `prompt_token`, `prompt_feat` and
//! `embedding` for the 24 kHz reference clip). The tiny case's checkpoint holds the S3Gen
//! tensors under `s3gen.`; a full-size recording (`CHATTERBOX_FIXTURES`) names its checkpoint
//! directory instead.
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use chatterbox_s3gen::{RefEncoder, RefEncoderConfig, DEC_COND_LEN};
use chatterbox_testkit::{compare, fixtures_root, Fixture};
use std::path::PathBuf;

fn host_f64(t: &Tensor) -> anyhow::Result<Vec<f64>> {
    Ok(t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?)
}

#[test]
fn embed_ref_matches_the_reference() -> anyhow::Result<()> {
    let fx = Fixture::load(&fixtures_root().join("pipeline").join("english.json"))?;
    let dev = Device::Cpu;
    let tensors = candle_core::safetensors::load(fx.safetensors_path(), &dev)?;
    let checkpoint_dir: Option<String> = fx.config_or("checkpoint_dir", None)?;
    let encoder = match checkpoint_dir {
        Some(dir) => {
            let path = PathBuf::from(dir).join("s3gen.safetensors");
            // SAFETY: the checkpoint is not modified while the test runs.
            let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, &dev)? };
            RefEncoder::new(&RefEncoderConfig::s3gen(), vb)?
        }
        None => {
            // the `s3gen` part of the case's ChatterboxConfig: its tokenizer and speaker_encoder
            let chatterbox: serde_json::Value = fx.config("chatterbox")?;
            let cfg: RefEncoderConfig = serde_json::from_value(chatterbox["s3gen"].clone())?;
            let vb = VarBuilder::from_tensors(tensors.clone(), DType::F32, &dev);
            RefEncoder::new(&cfg, vb.pp("s3gen"))?
        }
    };
    let wav = tensors["in.ref_24k"]
        .to_dtype(DType::F32)?
        .to_vec1::<f32>()?;
    let wav = &wav[..wav.len().min(DEC_COND_LEN)];
    let prompt = encoder.embed_ref(wav, 24_000)?;

    for (name, actual) in [
        ("prompt_token", &prompt.prompt_token),
        ("prompt_feat", &prompt.prompt_feat),
        ("embedding", &prompt.embedding),
    ] {
        let expected = &tensors[&format!("out.{name}")];
        let tolerance = fx.meta.tolerances[name];
        let check = compare(
            name,
            actual.dims(),
            &host_f64(actual)?,
            expected.dims(),
            &host_f64(expected)?,
            tolerance,
        );
        eprintln!(
            "{name}: max abs {:.2e}, max rel {:.2e} ({tolerance})",
            check.max_abs, check.max_rel
        );
        assert!(check.passed, "{check:?}");
    }
    Ok(())
}
