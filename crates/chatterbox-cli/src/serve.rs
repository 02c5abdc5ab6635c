//! `chatterbox serve`: chatterbox-server's OpenAI-compatible speech server on the command line.
//! Every cheap check (devices compiled in, checkpoint files present, options) runs before
//! anything is bound; then one worker per `--device` loads its copy of every `--model` in the
//! background, the address is printed once bound, and SIGINT/SIGTERM stop it gracefully.
use crate::args::{Model, ModelSpec, QuantizeArg, ServeArgs};
use crate::model::{self, Tts};
use crate::source::Source;
use crate::{device, preflight};
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device};
use chatterbox_pipeline::{BatchOptions, MultilingualT3, WeightFormat};
use chatterbox_server::{
    shutdown_signal, DeviceModels, ModelError, ModelId, PipelineModel, Server, ServerConfig,
    SpeechModel,
};
use clap::ValueEnum;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Hub downloads one at a time: several devices loading the same model from the hub would
/// otherwise download the same files at once into the same cache.
static HUB: Mutex<()> = Mutex::new(());

/// The first model that failed to load on any device: the server stops and the command fails
/// with it.
#[derive(Default)]
struct LoadFailure {
    message: Mutex<Option<String>>,
    notify: tokio::sync::Notify,
}

impl LoadFailure {
    fn set(&self, message: String) {
        let mut m = self.message.lock().unwrap_or_else(PoisonError::into_inner);
        if m.is_none() {
            *m = Some(message);
        }
        self.notify.notify_one();
    }

    fn take(&self) -> Option<String> {
        self.message
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// What a worker loads: a model and where from.
#[derive(Debug, Clone)]
struct Planned {
    model: Model,
    src: Source,
}

/// The API name of a `--model`.
fn model_id(model: Model) -> ModelId {
    match model {
        Model::English => ModelId::English,
        Model::Multilingual => ModelId::Multilingual,
        Model::Turbo => ModelId::Turbo,
        Model::Nano => ModelId::Nano,
    }
}

/// `--model` (default english) with their sources, each checked once.
fn plan(args: &ServeArgs, mtl: &MultilingualT3) -> Result<Vec<Planned>> {
    let default = [ModelSpec {
        model: Model::English,
        dir: None,
    }];
    let specs: &[ModelSpec] = if args.models.is_empty() {
        &default
    } else {
        &args.models
    };
    let gpt2 = |m: Model| matches!(m, Model::Turbo | Model::Nano);
    let mut out: Vec<Planned> = Vec::new();
    for spec in specs {
        if out.iter().any(|p| p.model == spec.model) {
            bail!(
                "--model {} is given twice: each model is served once (per device)",
                model_id(spec.model)
            );
        }
        let dir = spec.dir.as_deref().or(args.model_dir.as_deref());
        let src = Source::resolve(dir, model::variant(spec.model).hub_repo())
            .with_context(|| format!("--model {}", model_id(spec.model)))?;
        let clash = out.iter().find(|p| {
            p.src == src && matches!(src, Source::Dir(_)) && gpt2(p.model) != gpt2(spec.model)
        });
        if let Some(other) = clash {
            let own = if gpt2(spec.model) {
                spec.model
            } else {
                other.model
            };
            bail!(
                "--model {} and --model {} cannot share the directory {}: Turbo and Nano have \
                 their own tokenizer.json and conds.pt; give them their own with --model \
                 {}=DIR",
                model_id(other.model),
                model_id(spec.model),
                src.describe(),
                own.to_possible_value()
                    .map_or_else(|| "turbo".to_string(), |v| v.get_name().to_string())
            );
        }
        out.push(Planned {
            model: spec.model,
            src,
        });
    }
    for p in &out {
        let variant = model::variant(p.model);
        // No built-in voice needed: library voices serve a checkpoint without conds.pt.
        preflight::check_checkpoint(variant, mtl, &p.src, false).with_context(|| {
            format!(
                "the {} model's files (pass MODEL=DIR when each model has its own directory)",
                variant.name()
            )
        })?;
    }
    Ok(out)
}

/// `--device` (default auto) opened, each once.
fn devices(args: &ServeArgs) -> Result<Vec<Device>> {
    let wanted = if args.devices.is_empty() {
        vec![crate::args::DeviceArg::Auto]
    } else {
        args.devices.clone()
    };
    for d in &wanted {
        device::check_available(*d)?;
    }
    let mut out: Vec<Device> = Vec::new();
    for d in wanted {
        let dev = device::open(d)?;
        let name = device::describe(&dev);
        if out.iter().any(|o| device::describe(o) == name) {
            bail!("--device {name} is given twice: one worker per device");
        }
        if let Some(w) = device::dtype_warning(&dev, device::dtype(args.dtype, &dev)) {
            tracing::warn!("{w}");
        }
        out.push(dev);
    }
    Ok(out)
}

/// `--api-key` (or CHATTERBOX_API_KEY): an empty one is an error, never "no key".
fn api_key(args: &ServeArgs) -> Result<Option<String>> {
    if args.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        bail!(
            "--api-key (or CHATTERBOX_API_KEY) is set but empty: refusing to start without \
             authentication by mistake; give a key, or unset CHATTERBOX_API_KEY to serve without \
             one"
        );
    }
    Ok(args.api_key.clone())
}

/// The server's settings from the options.
fn config(args: &ServeArgs, served: &[Planned]) -> Result<ServerConfig> {
    let mut c = ServerConfig::default();
    c.addr = (args.host.as_str(), args.port)
        .to_socket_addrs()
        .with_context(|| format!("--host {}: not an address or a known host name", args.host))?
        .next()
        .with_context(|| format!("--host {}: no address", args.host))?;
    c.api_key = api_key(args)?;
    c.voices_dir = args.voices.clone();
    c.queue_capacity = args.queue;
    c.retry_after_secs = args.retry_after;
    c.capacity_admission = args.admission == "capacity";
    c.request_timeout = Duration::from_secs(args.timeout);
    c.header_timeout = Duration::from_secs(args.header_timeout);
    c.body_timeout = Duration::from_secs(args.body_timeout);
    c.body_deadline = Duration::from_secs(args.body_deadline);
    c.write_timeout = Duration::from_secs(args.write_timeout);
    c.max_connections = usize::try_from(args.max_connections).unwrap_or(usize::MAX);
    c.max_json_bytes = usize::try_from(args.max_json_bytes).unwrap_or(usize::MAX);
    c.max_upload_bytes = usize::try_from(args.max_upload_bytes).unwrap_or(usize::MAX);
    c.max_new_tokens = args
        .max_new_tokens
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    for a in &args.model_aliases {
        let Some(id) = ModelId::from_name(&a.target) else {
            bail!(
                "--model-alias {}={}: no model {}; the models are chatterbox, \
                 chatterbox-multilingual, chatterbox-turbo and chatterbox-nano",
                a.name,
                a.target,
                a.target
            );
        };
        if !served.iter().any(|p| model_id(p.model) == id) {
            bail!(
                "--model-alias {}={}: {} is not served (add --model for it)",
                a.name,
                a.target,
                a.target
            );
        }
        c.model_aliases.insert(a.name.clone(), id);
    }
    for a in &args.voice_aliases {
        if !chatterbox_server::valid_voice_name(&a.target) {
            bail!(
                "--voice-alias {}={}: voice names are 1 to 64 of A-Z a-z 0-9 _ -",
                a.name,
                a.target
            );
        }
        c.voice_aliases.insert(a.name.clone(), a.target.clone());
    }
    for a in &args.lexicons {
        let lexicon = chatterbox_pipeline::Lexicon::from_file(&a.target)
            .with_context(|| format!("--lexicon {}={}", a.name, a.target))?;
        c.lexicons
            .insert(a.name.clone(), std::sync::Arc::new(lexicon));
    }
    c.validate().context("the server settings")?;
    Ok(c)
}

/// A loaded model as the server serves it, batching `batching.slots` requests (0: none).
fn speech_model(tts: Tts, batching: &BatchOptions) -> Box<dyn SpeechModel> {
    let m = match tts {
        Tts::English(m) => PipelineModel::from(m),
        Tts::Multilingual(m) => PipelineModel::from(m),
        Tts::Turbo(m) => PipelineModel::from(m),
    };
    Box::new(m.with_batching(batching.clone()))
}

/// Positions a batch slot holds beyond the speech tokens: the conditioning prefix and a
/// sentence chunk's text tokens (English's prefix is 34 + up to 150 prompt tokens; a
/// 300-character chunk is under 150 text tokens).
const BATCH_PREFIX_ROOM: usize = 512;

/// Requests a CUDA device speaks at once when `--batch` is not given (see docs/benchmarks.md:
/// on an H100 16 slots serve Turbo at 67x real time from 16 clients with a 317 ms first byte,
/// where one at a time gives 18x and 4.2 s).
const CUDA_DEFAULT_BATCH: usize = 16;

/// The batching of a worker on `dev`: `--batch` slots, by default [`CUDA_DEFAULT_BATCH`] on
/// CUDA and none elsewhere (a CPU gains little from batching; Metal is not measured).
fn batching(args: &ServeArgs, dev: &Device) -> BatchOptions {
    let slots = args
        .batch
        .unwrap_or(if dev.is_cuda() { CUDA_DEFAULT_BATCH } else { 0 });
    let tokens = args.max_new_tokens.map_or(1000, |n| n as usize);
    BatchOptions::default()
        .with_slots(slots)
        .with_positions(tokens + BATCH_PREFIX_ROOM)
}

/// What a worker loads.
struct Load {
    plan: Vec<Planned>,
    mtl: MultilingualT3,
    dtype: DType,
    /// The storage of T3's weights (`--quantize`).
    format: WeightFormat,
    /// `--quantize` as given (checked against a quantized checkpoint's stored format).
    quantize: QuantizeArg,
    /// Perth's checkpoint (`None`: no watermark).
    perth: Option<std::path::PathBuf>,
    /// Continuous batching per model.
    batching: BatchOptions,
}

/// The worker of `dev`: loads every planned model on it (on the worker's thread).
fn worker(dev: Device, load: Load, failure: Arc<LoadFailure>) -> DeviceModels {
    let Load {
        plan,
        mtl,
        dtype,
        format,
        quantize,
        perth,
        batching,
    } = load;
    let label = device::describe(&dev);
    let name = label.clone();
    let probed = dev.clone();
    let models = DeviceModels::new(label, move || {
        let mut models = Vec::with_capacity(plan.len());
        for p in &plan {
            let t0 = Instant::now();
            let variant = model::variant(p.model);
            let loaded = {
                let _one_download = matches!(p.src, Source::Hub(_))
                    .then(|| HUB.lock().unwrap_or_else(PoisonError::into_inner));
                model::load(p.model, &mtl, &p.src, None, &dev, dtype).and_then(|tts| {
                    model::check_stored_format(quantize, tts.t3_format())?;
                    Ok(tts
                        .with_t3_format(format)?
                        .with_watermarker(crate::watermark::load(perth.as_ref(), &dev)?))
                })
            };
            match loaded {
                Ok(tts) => {
                    tracing::info!(
                        model = %model_id(p.model),
                        device = %name,
                        from = %p.src.describe(),
                        t3_weights = %format,
                        secs = format!("{:.1}", t0.elapsed().as_secs_f64()),
                        "model loaded"
                    );
                    models.push(speech_model(tts, &batching));
                }
                Err(e) => {
                    let e = e.context(format!(
                        "cannot load the {} model from {} on {name}",
                        variant.name(),
                        p.src.describe()
                    ));
                    failure.set(crate::report(&e));
                    let boxed: ModelError = e.into();
                    return Err(boxed);
                }
            }
        }
        Ok(models)
    });
    if probed.is_cuda() {
        models.with_memory_probe(move || chatterbox_pipeline::device_memory(&probed))
    } else {
        models
    }
}

/// Runs `chatterbox serve`.
pub fn run(args: ServeArgs) -> Result<()> {
    // before anything that may take a while (the hub), the mistake that must not pass silently
    api_key(&args)?;
    let mtl = match &args.mtl_version {
        Some(v) if !args.models.iter().any(|m| m.model == Model::Multilingual) => {
            bail!("--mtl-version {v} applies to --model multilingual only")
        }
        Some(v) => MultilingualT3::parse(v)?,
        None => MultilingualT3::V2,
    };
    let planned = plan(&args, &mtl)?;
    let config = config(&args, &planned)?;
    let devices = devices(&args)?;
    let dirs: Vec<&std::path::Path> = planned
        .iter()
        .filter_map(|p| match &p.src {
            Source::Dir(d) => Some(d.as_path()),
            Source::Hub(_) => None,
        })
        .collect();
    let from_hub = planned.iter().any(|p| matches!(p.src, Source::Hub(_)));
    let perth = crate::watermark::checkpoint(&args.watermark, &dirs, from_hub)?;
    let failure = Arc::new(LoadFailure::default());
    let workers: Vec<DeviceModels> = devices
        .into_iter()
        .map(|d| {
            let dtype = device::dtype(args.dtype, &d);
            let load = Load {
                plan: planned.clone(),
                mtl: mtl.clone(),
                dtype,
                format: model::t3_format(args.quantize, &d, dtype)?,
                quantize: args.quantize,
                perth: perth.clone(),
                batching: batching(&args, &d),
            };
            Ok(worker(d, load, failure.clone()))
        })
        .collect::<Result<_>>()?;
    let models: Vec<&str> = planned.iter().map(|p| model_id(p.model).name()).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("chatterbox-http")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config, workers, &models, failure))
}

async fn serve(
    config: ServerConfig,
    workers: Vec<DeviceModels>,
    models: &[&str],
    failure: Arc<LoadFailure>,
) -> Result<()> {
    let addr: SocketAddr = config.addr;
    let server = Server::bind(config, workers)
        .await
        .with_context(|| format!("cannot start the server on {addr}"))?;
    let bound = server.local_addr()?;
    // The one line scripts and tests read for the address (port 0 picks one).
    eprintln!(
        "chatterbox serve: listening on http://{bound} (loading {}; GET /ready answers 200 once \
         loaded)",
        models.join(", ")
    );
    let failed = failure.clone();
    let shutdown = async move {
        tokio::select! {
            () = shutdown_signal() => {}
            () = failed.notify.notified() => {
                tracing::error!("a model failed to load: stopping");
            }
        }
    };
    server.run(shutdown).await.context("the server failed")?;
    if let Some(message) = failure.take() {
        bail!("{}", message.trim_start_matches("error: "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser;

    fn serve_args(extra: &[&str]) -> Result<ServeArgs> {
        let mut argv = vec!["chatterbox", "serve"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv)?.command {
            Command::Serve(a) => Ok(*a),
            other => bail!("not serve: {other:?}"),
        }
    }

    #[test]
    fn options_become_the_server_config() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let d = dir.path().display().to_string();
        let a = serve_args(&[
            "--model-dir",
            &d,
            "--port",
            "0",
            "--api-key",
            "k",
            "--queue",
            "3",
            "--timeout",
            "9",
            "--max-new-tokens",
            "40",
            "--model-alias",
            "tts-1-hd=chatterbox",
            "--voice-alias",
            "alloy=narrator",
        ])?;
        let planned = vec![Planned {
            model: Model::English,
            src: Source::Dir(dir.path().to_path_buf()),
        }];
        let c = config(&a, &planned)?;
        assert_eq!(c.addr.to_string(), "127.0.0.1:0");
        assert_eq!(c.api_key.as_deref(), Some("k"));
        assert_eq!(c.queue_capacity, 3);
        assert_eq!(c.request_timeout, Duration::from_secs(9));
        assert_eq!(c.max_new_tokens, Some(40));
        assert_eq!(c.model_aliases.get("tts-1-hd"), Some(&ModelId::English));
        assert_eq!(
            c.voice_aliases.get("alloy").map(String::as_str),
            Some("narrator")
        );
        let a = serve_args(&["--model-alias", "x=chatterbox-turbo"])?;
        let e = config(&a, &planned)
            .err()
            .context("an unserved alias target")?;
        assert!(e.to_string().contains("not served"), "{e}");
        let a = serve_args(&["--voice-alias", "x=../etc"])?;
        assert!(config(&a, &planned).is_err());
        Ok(())
    }

    #[test]
    fn an_empty_key_is_an_error_and_limits_are_read() -> Result<()> {
        let planned = vec![Planned {
            model: Model::English,
            src: Source::Dir(std::env::temp_dir()),
        }];
        for empty in ["", "  "] {
            let a = serve_args(&["--api-key", empty])?;
            let e = config(&a, &planned).err().context("an empty key")?;
            assert!(e.to_string().contains("set but empty"), "{e}");
        }
        let a = serve_args(&["--api-key", " sk-1"])?;
        let e = config(&a, &planned).err().context("a key with a space")?;
        assert!(format!("{e:#}").contains("whitespace"), "{e:#}");
        let a = serve_args(&[
            "--header-timeout",
            "5",
            "--body-timeout",
            "6",
            "--body-deadline",
            "7",
            "--write-timeout",
            "8",
            "--max-connections",
            "9",
            "--max-json-bytes",
            "1000",
            "--max-upload-bytes",
            "2000",
            "--retry-after",
            "3",
            "--admission",
            "slots",
        ])?;
        let c = config(&a, &planned)?;
        assert_eq!(c.header_timeout, Duration::from_secs(5));
        assert_eq!(c.body_timeout, Duration::from_secs(6));
        assert_eq!(c.body_deadline, Duration::from_secs(7));
        assert_eq!(c.write_timeout, Duration::from_secs(8));
        assert_eq!(c.max_connections, 9);
        assert_eq!((c.max_json_bytes, c.max_upload_bytes), (1000, 2000));
        assert_eq!(c.retry_after_secs, 3);
        assert!(!c.capacity_admission);
        let d = config(&serve_args(&[])?, &planned)?;
        let lib = ServerConfig::default();
        assert_eq!(
            (
                d.header_timeout,
                d.body_timeout,
                d.body_deadline,
                d.write_timeout,
                d.max_connections,
                d.max_json_bytes,
                d.max_upload_bytes,
                d.retry_after_secs,
                d.capacity_admission
            ),
            (
                lib.header_timeout,
                lib.body_timeout,
                lib.body_deadline,
                lib.write_timeout,
                lib.max_connections,
                lib.max_json_bytes,
                lib.max_upload_bytes,
                lib.retry_after_secs,
                lib.capacity_admission
            ),
            "the command's defaults are the library's"
        );
        assert!(serve_args(&["--max-connections", "0"]).is_err());
        assert!(serve_args(&["--retry-after", "0"]).is_err());
        assert!(
            d.capacity_admission,
            "seated by capacity unless told otherwise"
        );
        assert!(serve_args(&["--admission", "fifo"]).is_err());
        Ok(())
    }

    #[test]
    fn missing_files_and_repeated_models_fail_before_loading() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let d = dir.path().display().to_string();
        let a = serve_args(&["--model-dir", &d])?;
        let e = plan(&a, &MultilingualT3::V2)
            .err()
            .context("an empty dir")?;
        assert!(format!("{e:#}").contains("MODEL=DIR"), "{e:#}");
        let a = serve_args(&["-m", "turbo", "-m", "turbo", "--model-dir", &d])?;
        let e = plan(&a, &MultilingualT3::V2).err().context("twice")?;
        assert!(e.to_string().contains("twice"), "{e}");
        let a = serve_args(&["-m", "english", "-m", "nano", "--model-dir", &d])?;
        let e = plan(&a, &MultilingualT3::V2)
            .err()
            .context("a shared dir")?;
        assert!(e.to_string().contains("--model nano=DIR"), "{e}");
        Ok(())
    }
}
