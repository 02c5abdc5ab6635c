//! Loading from the Hugging Face hub through chatterbox-pipeline's `hub` feature (the files
//! are cached in `~/.cache/huggingface`, so only the first run downloads).
use crate::args::Model;
use crate::model::Tts;
use anyhow::Result;
use candle_core::{DType, Device};
use chatterbox_pipeline::{ChatterboxVc, MultilingualT3};

#[cfg(feature = "hub")]
mod enabled {
    use super::*;
    use chatterbox_pipeline::{
        download_checkpoint, download_vc_checkpoint, ChatterboxMultilingualTts, ChatterboxTts,
        ChatterboxTurboTts,
    };

    // The downloads, then `from_dir`: the command decides about the watermark itself
    // (`from_hub` would fetch Perth even with --no-watermark).
    pub fn tts(model: Model, mtl: &MultilingualT3, dev: &Device, dtype: DType) -> Result<Tts> {
        let dir = download_checkpoint(crate::model::variant(model), mtl)?;
        Ok(match model {
            Model::English => Tts::English(ChatterboxTts::from_dir(dir, dev, dtype)?),
            Model::Multilingual => Tts::Multilingual(
                ChatterboxMultilingualTts::from_dir_with_model(dir, mtl, dev, dtype)?,
            ),
            Model::Turbo | Model::Nano => Tts::Turbo(ChatterboxTurboTts::from_dir(
                dir,
                model == Model::Nano,
                dev,
                dtype,
            )?),
        })
    }

    pub fn vc(dev: &Device, dtype: DType) -> Result<ChatterboxVc> {
        Ok(ChatterboxVc::from_dir(
            download_vc_checkpoint()?,
            dev,
            dtype,
        )?)
    }

    pub fn checkpoint_dir(model: Model, mtl: &MultilingualT3) -> Result<std::path::PathBuf> {
        Ok(download_checkpoint(crate::model::variant(model), mtl)?)
    }
}

#[cfg(not(feature = "hub"))]
mod enabled {
    use super::*;

    const NO_HUB: &str = "this chatterbox was built without the `hub` cargo feature: pass \
                          --model-dir DIR";

    pub fn tts(_: Model, _: &MultilingualT3, _: &Device, _: DType) -> Result<Tts> {
        anyhow::bail!(NO_HUB)
    }

    pub fn vc(_: &Device, _: DType) -> Result<ChatterboxVc> {
        anyhow::bail!(NO_HUB)
    }

    pub fn checkpoint_dir(_: Model, _: &MultilingualT3) -> Result<std::path::PathBuf> {
        anyhow::bail!(NO_HUB)
    }
}

/// The text-to-speech `model` from its hub repository.
pub fn tts(model: Model, mtl: &MultilingualT3, dev: &Device, dtype: DType) -> Result<Tts> {
    enabled::tts(model, mtl, dev, dtype)
}

/// The voice conversion model (`ResembleAI/chatterbox`'s `s3gen.safetensors`, `conds.pt`).
pub fn vc(dev: &Device, dtype: DType) -> Result<ChatterboxVc> {
    enabled::vc(dev, dtype)
}

/// The hub checkpoint folder of `model` (downloaded on first use).
pub fn checkpoint_dir(model: Model, mtl: &MultilingualT3) -> Result<std::path::PathBuf> {
    enabled::checkpoint_dir(model, mtl)
}
