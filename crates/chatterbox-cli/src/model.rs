//! Which model `chatterbox speak` (and `serve`, `quantize`) runs: a loaded model of any variant
//! ([`Tts`]), the hub variant of a `--model`, its generation options and language from the
//! command line, the T3 weight format of `--quantize`, and loading it from a folder or the hub.
use crate::args::{GenerationArgs, Model, QuantizeArg};
use crate::hub;
use crate::source::Source;
use anyhow::{bail, Context, Result};
use chatterbox_pipeline::{
    Audio, ChatterboxConfig, ChatterboxMultilingualTts, ChatterboxTts, ChatterboxTurboTts,
    Conditionals, GenerateOptions, MultilingualT3, Progress as Event, SpeechReport, SpeechStream,
    Variant, Watermarker, WeightFormat,
};
use std::sync::Arc;

/// A loaded text-to-speech model of any variant.
pub enum Tts {
    /// `ChatterboxTts`.
    English(ChatterboxTts),
    /// `ChatterboxMultilingualTts`.
    Multilingual(ChatterboxMultilingualTts),
    /// `ChatterboxTurboTts` (Turbo or Nano).
    Turbo(ChatterboxTurboTts),
}

/// `$body` with `$m` bound to the model, whatever its type.
macro_rules! each {
    ($tts:expr, $m:ident => $body:expr) => {
        match $tts {
            Tts::English($m) => $body,
            Tts::Multilingual($m) => $body,
            Tts::Turbo($m) => $body,
        }
    };
}

impl Tts {
    /// The model with `w` applied to its output (`None`: unmarked).
    pub fn with_watermarker(self, w: Option<Arc<dyn Watermarker>>) -> Self {
        match self {
            Tts::English(m) => Tts::English(m.with_watermarker(w)),
            Tts::Multilingual(m) => Tts::Multilingual(m.with_watermarker(w)),
            Tts::Turbo(m) => Tts::Turbo(m.with_watermarker(w)),
        }
    }

    /// The model with T3's backbone weights stored in `format` (unchanged for f32).
    pub fn with_t3_format(self, format: WeightFormat) -> Result<Self> {
        if format.is_exact() {
            return Ok(self);
        }
        Ok(match self {
            Tts::English(m) => Tts::English(m.with_t3_format(format)?),
            Tts::Multilingual(m) => Tts::Multilingual(m.with_t3_format(format)?),
            Tts::Turbo(m) => Tts::Turbo(m.with_t3_format(format)?),
        })
    }

    /// How T3's backbone weights are stored (a quantized checkpoint's format, or f32).
    pub fn t3_format(&self) -> WeightFormat {
        each!(self, m => m.t3_format())
    }

    pub(crate) fn conditionals(&self) -> Option<&Conditionals> {
        each!(self, m => m.conditionals())
    }

    pub(crate) fn set_conditionals(&mut self, c: Conditionals) {
        each!(self, m => m.set_conditionals(c))
    }

    pub(crate) fn prepare_conditionals(&mut self, audio: &Audio, exaggeration: f32) -> Result<()> {
        Ok(each!(self, m => m.prepare_conditionals_from_audio(audio, exaggeration))?)
    }

    pub(crate) fn generate_stream(
        &self,
        text: &str,
        opts: &GenerateOptions,
        progress: &mut dyn FnMut(&Event),
        on_audio: &mut dyn FnMut(&[f32]) -> chatterbox_pipeline::Result<()>,
    ) -> Result<SpeechReport> {
        Ok(each!(self, m => m.generate_stream_with_report(text, opts, progress, on_audio))?)
    }

    pub(crate) fn stream(&self, text: &str, opts: &GenerateOptions) -> Result<SpeechStream<'_>> {
        Ok(each!(self, m => m.stream(text, opts))?)
    }
}

/// The pipeline's variant of a `--model`.
pub fn variant(model: Model) -> Variant {
    match model {
        Model::English => Variant::English,
        Model::Multilingual => Variant::Multilingual,
        Model::Turbo => Variant::Turbo,
        Model::Nano => Variant::Nano,
    }
}

/// The model's defaults with the options given on the command line.
pub fn options(
    model: Model,
    g: &GenerationArgs,
    language: Option<&str>,
    seed: u64,
) -> Result<GenerateOptions> {
    let mut o = GenerateOptions::for_variant(variant(model)).with_seed(seed);
    if let Some(v) = g.exaggeration {
        o.exaggeration = v;
    }
    if let Some(v) = g.cfg_weight {
        o.cfg_weight = v;
    }
    if let Some(v) = g.temperature {
        o.temperature = v;
    }
    if let Some(v) = g.top_p {
        o.top_p = v;
    }
    if let Some(v) = g.min_p {
        o.min_p = v;
    }
    if let Some(v) = g.top_k {
        o.top_k = v;
    }
    if let Some(v) = g.repetition_penalty {
        o.repetition_penalty = v;
    }
    if let Some(v) = g.max_new_tokens {
        o.max_new_tokens = v;
    }
    if let Some(v) = g.chunk_chars {
        o.max_chunk_chars = v;
    }
    if let Some(v) = g.speed {
        o.speed = v;
    }
    o.greedy = g.greedy;
    o.language = language.map(str::to_string);
    o.validate()?;
    Ok(o)
}

/// `--language`, checked against the model: any supported code for the multilingual model
/// (default `en`), only `en` for the others.
pub fn language(model: Model, arg: Option<&str>) -> Result<Option<String>> {
    let Some(code) = arg else {
        return Ok((model == Model::Multilingual).then(|| "en".to_string()));
    };
    let lang =
        chatterbox_text::Language::parse(code).with_context(|| format!("--language {code}"))?;
    if model != Model::Multilingual && lang != chatterbox_text::Language::English {
        bail!(
            "--language {code}: the {} model speaks English only; use --model multilingual",
            variant(model).name()
        );
    }
    Ok(Some(lang.id().to_string()))
}

/// The format `--quantize` asks for on `dev` with T3 in `dtype`: `auto` is f32 (exact); the
/// others run on the CPU only, with T3 in f32 (a clear error before anything loads otherwise).
pub fn t3_format(
    arg: QuantizeArg,
    dev: &candle_core::Device,
    dtype: candle_core::DType,
) -> Result<WeightFormat> {
    let format = match arg {
        QuantizeArg::Auto | QuantizeArg::F32 => WeightFormat::F32,
        QuantizeArg::Q8 => WeightFormat::Q8,
        QuantizeArg::Q4 => WeightFormat::Q4,
        QuantizeArg::Bf16 => WeightFormat::Bf16,
    };
    if !format.is_exact() && !dev.is_cpu() {
        bail!(
            "--quantize {format} runs on the CPU only; on a GPU use --dtype bf16 (or --device cpu)"
        );
    }
    if !format.is_exact() && dtype != candle_core::DType::F32 {
        bail!("--quantize {format} needs T3 in f32 (--dtype f32 or auto), not {dtype:?}");
    }
    Ok(format)
}

/// `--quantize` against a checkpoint whose T3 is already stored quantized (`chatterbox
/// quantize` wrote it): `auto` or its own format is fine, another format an error (the
/// full-precision weights are not there to convert).
pub fn check_stored_format(arg: QuantizeArg, stored: WeightFormat) -> Result<()> {
    if stored.is_exact() || arg == QuantizeArg::Auto {
        return Ok(());
    }
    let asked = t3_format_name(arg);
    if asked != stored.name() {
        bail!(
            "--quantize {asked}: this checkpoint's T3 is stored in {stored} (a folder written by \
             `chatterbox quantize`); leave --quantize out, pass {stored}, or use the \
             full-precision checkpoint for {asked}"
        );
    }
    Ok(())
}

fn t3_format_name(arg: QuantizeArg) -> &'static str {
    match arg {
        QuantizeArg::Auto => "auto",
        QuantizeArg::Q8 => "q8",
        QuantizeArg::Q4 => "q4",
        QuantizeArg::Bf16 => "bf16",
        QuantizeArg::F32 => "f32",
    }
}

/// The model, from a directory (with `config` hyper-parameters when given) or the hub.
pub fn load(
    model: Model,
    mtl: &MultilingualT3,
    src: &Source,
    config: Option<&ChatterboxConfig>,
    dev: &candle_core::Device,
    dtype: candle_core::DType,
) -> Result<Tts> {
    if let (Source::Dir(d), Some(cfg)) = (src, config) {
        return Ok(match model {
            Model::English => {
                Tts::English(ChatterboxTts::from_dir_with_config(d, cfg, dev, dtype)?)
            }
            Model::Multilingual => Tts::Multilingual(
                ChatterboxMultilingualTts::from_dir_with_config(d, mtl, cfg, dev, dtype)?,
            ),
            Model::Turbo | Model::Nano => Tts::Turbo(ChatterboxTurboTts::from_dir_with_config(
                d,
                model == Model::Nano,
                cfg,
                dev,
                dtype,
            )?),
        });
    }
    Ok(match (src, model) {
        (Source::Dir(d), Model::English) => Tts::English(ChatterboxTts::from_dir(d, dev, dtype)?),
        (Source::Dir(d), Model::Multilingual) => Tts::Multilingual(
            ChatterboxMultilingualTts::from_dir_with_model(d, mtl, dev, dtype)?,
        ),
        (Source::Dir(d), Model::Turbo | Model::Nano) => Tts::Turbo(ChatterboxTurboTts::from_dir(
            d,
            model == Model::Nano,
            dev,
            dtype,
        )?),
        (Source::Hub(_), _) => hub::tts(model, mtl, dev, dtype)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_resolves_on_the_cpu_and_is_refused_where_it_cannot_run() -> Result<()> {
        use candle_core::{DType, Device};
        let cpu = Device::Cpu;
        assert_eq!(
            t3_format(QuantizeArg::Auto, &cpu, DType::F32)?,
            WeightFormat::F32
        );
        assert_eq!(
            t3_format(QuantizeArg::F32, &cpu, DType::BF16)?,
            WeightFormat::F32
        );
        assert_eq!(
            t3_format(QuantizeArg::Q8, &cpu, DType::F32)?,
            WeightFormat::Q8
        );
        assert_eq!(
            t3_format(QuantizeArg::Q4, &cpu, DType::F32)?,
            WeightFormat::Q4
        );
        assert_eq!(
            t3_format(QuantizeArg::Bf16, &cpu, DType::F32)?,
            WeightFormat::Bf16
        );
        let err = t3_format(QuantizeArg::Q8, &cpu, DType::BF16).map_err(|e| e.to_string());
        assert!(
            matches!(&err, Err(m) if m.contains("--dtype f32")),
            "{err:?}"
        );
        Ok(())
    }

    #[test]
    fn options_start_from_the_models_defaults() -> Result<()> {
        let g = GenerationArgs {
            temperature: Some(0.5),
            ..Default::default()
        };
        let o = options(Model::Turbo, &g, None, 7)?;
        assert_eq!(o.top_p, 0.95);
        assert_eq!(o.temperature, 0.5);
        assert_eq!(o.seed, Some(7));
        let o = options(Model::English, &GenerationArgs::default(), None, 0)?;
        assert_eq!(o, GenerateOptions::english().with_seed(0));
        let bad = GenerationArgs {
            top_p: Some(1.5),
            ..Default::default()
        };
        assert!(options(Model::English, &bad, None, 0).is_err());
        Ok(())
    }

    #[test]
    fn languages_are_checked_against_the_model() -> Result<()> {
        assert_eq!(language(Model::Multilingual, None)?, Some("en".into()));
        assert_eq!(
            language(Model::Multilingual, Some("FR"))?,
            Some("fr".into())
        );
        assert_eq!(language(Model::English, None)?, None);
        assert!(language(Model::English, Some("fr")).is_err());
        assert!(language(Model::Multilingual, Some("xx")).is_err());
        Ok(())
    }
}
