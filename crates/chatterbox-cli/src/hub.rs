//! Loading from the Hugging Face hub through chatterbox-pipeline's `hub` feature (the files
//! are cached in `~/.cache/huggingface`, so only the first run downloads).
use crate::args::Model;
use crate::speak::Tts;
use anyhow::Result;
use candle_core::{DType, Device};
use chatterbox_pipeline::{ChatterboxVc, MultilingualT3};

#[cfg(feature = "hub")]
mod enabled {
    use super::*;
    use chatterbox_pipeline::{ChatterboxMultilingualTts, ChatterboxTts, ChatterboxTurboTts};

    pub fn tts(model: Model, mtl: &MultilingualT3, dev: &Device, dtype: DType) -> Result<Tts> {
        Ok(match model {
            Model::English => Tts::English(ChatterboxTts::from_hub(dev, dtype)?),
            Model::Multilingual => {
                Tts::Multilingual(ChatterboxMultilingualTts::from_hub(mtl, dev, dtype)?)
            }
            Model::Turbo | Model::Nano => Tts::Turbo(ChatterboxTurboTts::from_hub(
                model == Model::Nano,
                dev,
                dtype,
            )?),
        })
    }

    pub fn vc(dev: &Device, dtype: DType) -> Result<ChatterboxVc> {
        Ok(ChatterboxVc::from_hub(dev, dtype)?)
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
}

/// The text-to-speech `model` from its hub repository.
pub fn tts(model: Model, mtl: &MultilingualT3, dev: &Device, dtype: DType) -> Result<Tts> {
    enabled::tts(model, mtl, dev, dtype)
}

/// The voice conversion model (`ResembleAI/chatterbox`'s `s3gen.safetensors`, `conds.pt`).
pub fn vc(dev: &Device, dtype: DType) -> Result<ChatterboxVc> {
    enabled::vc(dev, dtype)
}
