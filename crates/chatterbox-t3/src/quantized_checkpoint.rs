//! Quantized T3 checkpoints: one GGUF file holding the backbone's projections in their block
//! format ([`WeightFormat`]) and every other tensor T3 reads in f32, written by
//! [`T3::write_quantized`] and loaded by [`T3::load_quantized`] without the full-precision file
//! (a smaller download, a faster start, less memory).
//!
//! GGUF rather than safetensors: it is candle's own container for block-quantized tensors
//! (`candle_core::quantized::gguf_file` writes and reads it, and llama.cpp's tools read it): each
//! tensor carries its block type and shape, and a read gives a `QTensor` ready for candle's
//! quantized matmul. Safetensors has no block types, so the blocks would travel as bytes with
//! their type and shape in side metadata that this crate alone would know how to put back.
//!
//! A projection is stored as the model holds it (q/k/v and gate/up fused, the query scale folded
//! in) under its own name (`tfmr.layers.0.self_attn.qkv_proj.weight`, a Conv1D's as `[out, in]`),
//! with its bias in f32; the metadata names them. Projections whose width the format's blocks do
//! not fit stay as their checkpoint tensors. The tensors T3 does not read (`text_head`, the
//! backbones' token tables) are left out.
use crate::backbone::{Linear, Preloaded, QuantizeReport, QuantizedWeight};
use crate::config::T3Config;
use crate::weight_format::WeightFormat;
use crate::{Result, T3Error, T3};
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Metadata key: the format of the stored projections (`q8`, `q4`, `bf16`).
const FORMAT_KEY: &str = "chatterbox.t3.weight_format";
/// Metadata key: the version of this layout.
const VERSION_KEY: &str = "chatterbox.t3.file_version";
/// Metadata key: the stored projections' names (each has `NAME.weight`, maybe `NAME.bias`).
const PROJECTIONS_KEY: &str = "chatterbox.t3.projections";
/// Metadata key: the variant the file was written for (informative).
const VARIANT_KEY: &str = "chatterbox.t3.variant";
/// The layout this crate writes and reads.
const VERSION: u32 = 1;

impl T3 {
    /// Writes a quantized checkpoint of the full-precision checkpoint `src` (as
    /// [`T3::load_with_config`] reads it) to `out`: the backbone's projections in `format`
    /// (8 or 4-bit blocks, or bf16), everything else T3 reads in f32, as one GGUF file (see
    /// the module's documentation). The file appears at `out` only when it is complete (it is
    /// written beside it and renamed). Returns what [`T3::quantize`] did; an error when
    /// `format` is exact, or when no projection fits its blocks.
    pub fn write_quantized<P: AsRef<Path>>(
        cfg: &T3Config,
        src: &[P],
        format: WeightFormat,
        out: &Path,
    ) -> Result<QuantizeReport> {
        let Some(_) = format.ggml_dtype() else {
            return Err(T3Error::InvalidConfig(format!(
                "{format} is the full-precision checkpoint itself: nothing to quantize (q8, q4 \
                 or bf16)"
            )));
        };
        // SAFETY: the checkpoint files are memory-mapped read-only and must not be modified
        // while they are read (candle's mmaped loader's contract).
        let st = Arc::new(unsafe { MmapedSafetensors::multi(src)? });
        let read = Arc::new(Mutex::new(BTreeSet::new()));
        let backend = Recording {
            st: st.clone(),
            read: read.clone(),
        };
        let vb = VarBuilder::from_backend(Box::new(backend), DType::F32, Device::Cpu);
        let mut t3 = T3::new(cfg, vb)?;
        let report = t3.quantize(format)?;
        if report.quantized == 0 {
            return Err(T3Error::InvalidConfig(format!(
                "no projection of this T3 takes {format}'s blocks of {} inputs (it is {} wide): \
                 nothing to quantize",
                format.block_size(),
                cfg.n_channels()
            )));
        }
        let projections: Vec<_> = t3
            .backbone()
            .named_projections("tfmr")
            .into_iter()
            .filter(|p| p.linear.quantized_weight().is_some())
            .collect();
        let replaced: HashSet<&str> = projections
            .iter()
            .flat_map(|p| p.sources.iter().map(String::as_str))
            .collect();
        let read: Vec<String> = read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|k| !replaced.contains(k.as_str()))
            .cloned()
            .collect();
        let mut owned: Vec<(String, QTensor)> = Vec::with_capacity(read.len());
        for key in read {
            let t = st.load(&key, &Device::Cpu)?.to_dtype(DType::F32)?;
            owned.push((key, f32_tensor(&t)?));
        }
        let mut names = Vec::with_capacity(projections.len());
        for p in &projections {
            names.push(Value::String(p.name.clone()));
            if let Some(b) = p.linear.bias() {
                owned.push((format!("{}.bias", p.name), f32_tensor(b)?));
            }
        }
        let weights: Vec<(String, &QTensor)> = projections
            .iter()
            .filter_map(|p| {
                let q = p.linear.quantized_weight()?;
                Some((format!("{}.weight", p.name), q.blocks()))
            })
            .collect();
        let mut tensors: Vec<(&str, &QTensor)> =
            weights.iter().map(|(k, q)| (k.as_str(), *q)).collect();
        tensors.extend(owned.iter().map(|(k, q)| (k.as_str(), q)));
        let meta = [
            (FORMAT_KEY, Value::String(format.name().to_string())),
            (VERSION_KEY, Value::U32(VERSION)),
            (PROJECTIONS_KEY, Value::Array(names)),
            (VARIANT_KEY, Value::String(cfg.variant_name().to_string())),
        ];
        let meta: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (*k, v)).collect();
        write_atomically(out, |w| Ok(gguf_file::write(w, &meta, &tensors)?))?;
        Ok(report)
    }

    /// Loads a quantized checkpoint that [`T3::write_quantized`] wrote, in its own format
    /// (the full-precision file is not read): the model [`T3::load_with_config`] and
    /// [`T3::quantize`] would give, exactly. Quantized weights run on the CPU with T3 in f32
    /// (another `device` or `dtype` is an error, as is a CPU that cannot run the format: see
    /// [`WeightFormat`]). A damaged or foreign file is a [`T3Error::QuantizedFile`] error, a file
    /// of another variant or size a shape error naming the tensor.
    pub fn load_quantized(
        cfg: &T3Config,
        path: &Path,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let file = read_file(path)?;
        let format = file.format;
        if !device.is_cpu() || dtype != DType::F32 {
            return Err(T3Error::InvalidConfig(format!(
                "this T3 is stored in {format}, which runs on the CPU with T3 in f32 (asked: \
                 {device:?}, {dtype:?}); on a GPU load the full-precision checkpoint"
            )));
        }
        let mut layers = HashMap::new();
        let mut dense = file.dense;
        for (name, q) in file.projections {
            let bias = dense.remove(&format!("{name}.bias"));
            let w = QuantizedWeight::from_blocks(q, format)?;
            layers.insert(name, Linear::from_quantized(w, bias));
        }
        let pre = Preloaded::new(layers);
        let vb = VarBuilder::from_tensors(dense, DType::F32, device);
        let t3 = T3::build(cfg, vb, &pre)?;
        let untaken = pre.untaken();
        if !untaken.is_empty() {
            return Err(T3Error::WrongVariant {
                expected: cfg.variant_name(),
                reason: format!(
                    "the file stores projections this configuration has no place for: {}",
                    untaken.join(", ")
                ),
            });
        }
        Ok(t3)
    }
}

/// Whether `path` is a quantized T3 file by its name (`.gguf`).
pub fn is_quantized_file(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// `t` as a GGUF f32 tensor.
fn f32_tensor(t: &Tensor) -> Result<QTensor> {
    Ok(QTensor::quantize(
        &t.to_dtype(DType::F32)?.contiguous()?,
        GgmlDType::F32,
    )?)
}

/// A safetensors backend that records the names of the tensors read (the ones T3 uses).
struct Recording {
    st: Arc<MmapedSafetensors>,
    read: Arc<Mutex<BTreeSet<String>>>,
}

impl Recording {
    fn note(&self, name: &str) {
        self.read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string());
    }
}

impl SimpleBackend for Recording {
    fn get(
        &self,
        s: Shape,
        name: &str,
        h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        self.note(name);
        SimpleBackend::get(self.st.as_ref(), s, name, h, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.note(name);
        SimpleBackend::get_unchecked(self.st.as_ref(), name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        SimpleBackend::contains_tensor(self.st.as_ref(), name)
    }
}

/// `write` into `out`'s folder under a temporary name, synced and renamed to `out`; nothing is
/// left behind on an error.
fn write_atomically(
    out: &Path,
    write: impl FnOnce(&mut BufWriter<std::fs::File>) -> Result<()>,
) -> Result<()> {
    let io = |path: &Path, e: std::io::Error| {
        T3Error::QuantizedFile(format!("cannot write {}: {e}", path.display()))
    };
    let name = out
        .file_name()
        .ok_or_else(|| io(out, std::io::ErrorKind::InvalidInput.into()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".partial-{}", std::process::id()));
    let tmp: PathBuf = out.with_file_name(tmp_name);
    let result = (|| {
        let file = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        let mut w = BufWriter::new(file);
        write(&mut w)?;
        w.flush().map_err(|e| io(&tmp, e))?;
        let file = w.into_inner().map_err(|e| io(&tmp, e.into_error()))?;
        file.sync_all().map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, out).map_err(|e| io(out, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// What a quantized file holds, checked.
struct QuantizedFile {
    format: WeightFormat,
    /// Projection name -> its blocks.
    projections: Vec<(String, QTensor)>,
    /// Every other tensor (the projections' biases included), f32 on the CPU.
    dense: HashMap<String, Tensor>,
}

/// Reads and checks `path`. candle's GGUF reader bounds every length by the file's size, but
/// divides by the file's alignment unchecked (a zero is a panic): that is checked first
/// ([`crate::gguf_guard`]), and the read runs under `catch_unwind` besides, so a damaged file
/// is an error here whatever it holds.
fn read_file(path: &Path) -> Result<QuantizedFile> {
    let bad = |why: String| T3Error::QuantizedFile(format!("{}: {why}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut r = BufReader::new(file);
    if crate::gguf_guard::has_zero_alignment(&mut r) {
        return Err(bad("damaged GGUF header (an alignment of 0)".into()));
    }
    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse(&mut r)));
    match parsed {
        Ok(Ok(f)) => Ok(f),
        Ok(Err(T3Error::QuantizedFile(why))) => Err(bad(why)),
        Ok(Err(e)) => Err(bad(e.to_string())),
        Err(_) => Err(bad("damaged GGUF header (the reader gave up)".into())),
    }
}

/// An f32 tensor of the file, read straight into its storage a megabyte at a time (candle's
/// `TensorInfo::read` holds the bytes, a copy and the dequantized tensor at once: 3x the
/// largest table, Turbo's 206 MB `text_emb`, at the peak of the load).
fn read_f32<R: std::io::Read + std::io::Seek>(
    r: &mut R,
    data_offset: u64,
    info: &gguf_file::TensorInfo,
) -> Result<Tensor> {
    use std::io::SeekFrom;
    let bad = |why: String| T3Error::QuantizedFile(why);
    let elems = info.shape.elem_count();
    let bytes = elems
        .checked_mul(4)
        .and_then(|b| u64::try_from(b).ok())
        .ok_or_else(|| bad(format!("f32 tensor of shape {:?}", info.shape)))?;
    let start = data_offset
        .checked_add(info.offset)
        .ok_or_else(|| bad(format!("tensor offset {}", info.offset)))?;
    let size = r.seek(SeekFrom::End(0)).map_err(|e| bad(e.to_string()))?;
    if start.checked_add(bytes).is_none_or(|end| end > size) {
        return Err(bad(format!(
            "a tensor of {bytes} bytes at {start} runs past the end ({size} bytes)"
        )));
    }
    r.seek(SeekFrom::Start(start))
        .map_err(|e| bad(e.to_string()))?;
    let mut values = Vec::with_capacity(elems);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = elems * 4;
    while left > 0 {
        let n = left.min(buf.len());
        r.read_exact(&mut buf[..n])
            .map_err(|e| bad(e.to_string()))?;
        values.extend(
            buf[..n]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        left -= n;
    }
    Ok(Tensor::from_vec(values, info.shape.clone(), &Device::Cpu)?)
}

fn parse<R: std::io::Read + std::io::Seek>(r: &mut R) -> Result<QuantizedFile> {
    let bad = |why: String| T3Error::QuantizedFile(why);
    let content =
        gguf_file::Content::read(r).map_err(|e| bad(format!("not a readable GGUF file ({e})")))?;
    let meta = |k: &str| content.metadata.get(k);
    match meta(VERSION_KEY) {
        Some(Value::U32(VERSION)) => {}
        Some(v) => {
            return Err(bad(format!(
                "layout version {v:?}; this build reads {VERSION}"
            )))
        }
        None => {
            return Err(bad(
                "a GGUF file without chatterbox T3 metadata (not written by `chatterbox \
                 quantize`)"
                    .into(),
            ))
        }
    }
    let format = match meta(FORMAT_KEY) {
        Some(Value::String(s)) => s
            .parse::<WeightFormat>()
            .map_err(|e| bad(format!("weight format: {e}")))?,
        other => return Err(bad(format!("weight format {other:?}"))),
    };
    let Some(block) = format.ggml_dtype() else {
        return Err(bad(
            "weight format f32 (a quantized file holds q8, q4 or bf16)".into(),
        ));
    };
    let names: Vec<String> = match meta(PROJECTIONS_KEY) {
        Some(Value::Array(v)) => v
            .iter()
            .map(|n| match n {
                Value::String(s) => Ok(s.clone()),
                other => Err(bad(format!("projection name {other:?}"))),
            })
            .collect::<Result<_>>()?,
        other => return Err(bad(format!("projection list {other:?}"))),
    };
    // every shape's element count fits a usize before anything is read
    for (name, info) in &content.tensor_infos {
        let fits = info
            .shape
            .dims()
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .is_some();
        if !fits {
            return Err(bad(format!("tensor {name}: shape {:?}", info.shape)));
        }
    }
    let weight_keys: HashSet<String> = names.iter().map(|n| format!("{n}.weight")).collect();
    let mut projections = Vec::with_capacity(names.len());
    for name in &names {
        let key = format!("{name}.weight");
        let info = content
            .tensor_infos
            .get(&key)
            .ok_or_else(|| bad(format!("projection {name} has no tensor {key}")))?;
        if info.ggml_dtype != block {
            return Err(bad(format!(
                "{key} is stored as {:?}, the file says {format}",
                info.ggml_dtype
            )));
        }
        let q = content.tensor(r, &key, &Device::Cpu)?;
        projections.push((name.clone(), q));
    }
    let mut dense = HashMap::new();
    for (key, info) in &content.tensor_infos {
        if weight_keys.contains(key) {
            continue;
        }
        if info.ggml_dtype != GgmlDType::F32 {
            return Err(bad(format!(
                "{key} is stored as {:?}; only projections are quantized",
                info.ggml_dtype
            )));
        }
        let t = read_f32(r, content.tensor_data_offset, info)?;
        dense.insert(key.clone(), t);
    }
    Ok(QuantizedFile {
        format,
        projections,
        dense,
    })
}
