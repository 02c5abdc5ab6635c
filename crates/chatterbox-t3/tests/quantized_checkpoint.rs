//! Quantized checkpoint files ([`T3::write_quantized`], [`T3::load_quantized`]): the loaded
//! model is the in-memory [`T3::quantize`] model exactly (the tiny English and Turbo fixtures,
//! and a 256-wide Llama for 4-bit blocks), and damaged or mismatched files are typed errors.
use candle_core::{DType, Device, Tensor};
use chatterbox_t3::{T3Cond, T3Config, T3Error, WeightFormat, T3};
use std::path::{Path, PathBuf};

#[path = "common/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;
#[path = "common/random_weights.rs"]
#[allow(dead_code)]
mod random_weights;

use fixtures::{cond_emb, fixture, ids};

type R<T> = anyhow::Result<T>;

/// A folder of this test's own under the system's temporary folder, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> R<Self> {
        let dir =
            std::env::temp_dir().join(format!("chatterbox-t3-qfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Teacher-forced speech logits of `[cond | text | speech]` (both CFG rows for Llama).
fn logits(t3: &T3, ce: &Tensor, text: &[u32], speech: &[u32]) -> R<Tensor> {
    let embeds = t3.prepare_input_embeds(ce, text, speech, !t3.config().is_gpt())?;
    let hidden = t3
        .hidden_states(&embeds)?
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no hidden states"))?;
    let t = hidden.dim(1)?;
    Ok(t3.speech_logits(&hidden.narrow(1, t - speech.len(), speech.len())?)?)
}

/// The largest absolute difference.
fn max_diff(a: &Tensor, b: &Tensor) -> R<f32> {
    Ok((a - b)?.abs()?.max_all()?.to_scalar::<f32>()?)
}

/// Quantizes `src` in memory and through a file; both give the same logits, exactly.
/// Returns the loaded model and the file.
fn round_trip(
    hp: &T3Config,
    src: &Path,
    format: WeightFormat,
    out: &Path,
    inputs: (&Tensor, &[u32], &[u32]),
) -> R<T3> {
    let (ce, text, speech) = inputs;
    let mut in_memory = T3::load_with_config(hp, &[src], DType::F32, &Device::Cpu)?;
    let want_report = in_memory.quantize(format)?;
    let want = logits(&in_memory, ce, text, speech)?;
    let report = T3::write_quantized(hp, &[src], format, out)?;
    assert_eq!(report, want_report);
    let loaded = T3::load_quantized(hp, out, DType::F32, &Device::Cpu)?;
    assert_eq!(loaded.weight_format(), format);
    let got = logits(&loaded, ce, text, speech)?;
    assert_eq!(got.dims(), want.dims());
    assert_eq!(max_diff(&got, &want)?, 0.0, "{format}: loaded != in memory");
    Ok(loaded)
}

#[test]
fn english_q8_and_turbo_q8_files_load_to_the_in_memory_models() -> R<()> {
    let dir = Scratch::new("fixtures")?;
    let fx = fixture("en")?;
    let hp: T3Config = fx.config("hp")?;
    let f32 = T3::load_with_config(&hp, &[fx.safetensors_path()], DType::F32, &Device::Cpu)?;
    let ce = cond_emb(&f32, &fx)?;
    let text = ids(&fx, "text_tokens")?;
    let speech = ids(&fx, "tf_tokens")?;
    let out = dir.path("t3_cfg.gguf");
    let mut q8 = round_trip(
        &hp,
        fx.safetensors_path(),
        WeightFormat::Q8,
        &out,
        (&ce, &text, &speech),
    )?;
    // the loaded model's own format is accepted (and changes nothing); another is refused
    let again = q8.quantize(WeightFormat::Q8)?;
    assert_eq!((again.quantized, again.kept), (8, 0));
    assert_eq!(again.bytes_before, again.bytes_after);
    let err = q8.quantize(WeightFormat::Q4).err();
    assert!(
        matches!(&err, Some(T3Error::InvalidConfig(m)) if m.contains("already stored in q8")),
        "{err:?}"
    );
    // the same conditioning from the loaded model (cond_enc and embeddings are f32 copies)
    assert_eq!(max_diff(&cond_emb(&q8, &fx)?, &ce)?, 0.0);
    // no temporary file is left beside it
    let names: Vec<_> = std::fs::read_dir(&dir.0)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    assert_eq!(names, vec![std::ffi::OsString::from("t3_cfg.gguf")]);

    // Turbo (16 wide): the two MLP output projections (64 inputs, with biases) take q8's
    // blocks, the other six stay as their checkpoint tensors (c_attn with its folded scale)
    let tfx = fixture("turbo")?;
    let thp: T3Config = tfx.config("hp")?;
    let turbo = T3::load_with_config(&thp, &[tfx.safetensors_path()], DType::F32, &Device::Cpu)?;
    let tce = cond_emb(&turbo, &tfx)?;
    let ttext = ids(&tfx, "text_tokens")?;
    let tout = dir.path("t3_turbo_v1.gguf");
    round_trip(
        &thp,
        tfx.safetensors_path(),
        WeightFormat::Q8,
        &tout,
        (&tce, &ttext, &[6561, 5, 9]),
    )?;

    // a file of another variant is a typed error naming what does not fit
    let err = T3::load_quantized(&thp, &out, DType::F32, &Device::Cpu).err();
    assert!(
        matches!(
            err,
            Some(T3Error::ShapeMismatch { .. } | T3Error::MissingWeight { .. })
        ),
        "{err:?}"
    );
    // quantized weights run on the CPU with T3 in f32
    let err = T3::load_quantized(&hp, &out, DType::BF16, &Device::Cpu).err();
    assert!(matches!(err, Some(T3Error::InvalidConfig(_))), "{err:?}");
    // nothing to quantize: f32, or a format no projection fits (q4's 256 inputs)
    for format in [WeightFormat::F32, WeightFormat::Q4] {
        let bad = dir.path("bad.gguf");
        let err = T3::write_quantized(&hp, &[fx.safetensors_path()], format, &bad).err();
        assert!(matches!(err, Some(T3Error::InvalidConfig(_))), "{err:?}");
        assert!(!bad.exists());
    }
    Ok(())
}

/// The 2-layer Llama T3 256 wide of [`random_weights::wide_llama_weights`] (wide enough for
/// q4's blocks), saved as a checkpoint file.
fn wide_llama_file(path: &Path) -> R<T3Config> {
    let (hp, m) = random_weights::wide_llama_weights()?;
    candle_core::safetensors::save(&m, path)?;
    Ok(hp)
}

#[test]
fn q4_and_bf16_files_of_a_wide_llama_load_to_the_in_memory_models() -> R<()> {
    let dir = Scratch::new("wide")?;
    let src = dir.path("t3_cfg.safetensors");
    let hp = wide_llama_file(&src)?;
    let f32 = T3::load_with_config(&hp, &[&src], DType::F32, &Device::Cpu)?;
    let ce = f32.prepare_conditioning(
        &T3Cond::new(random_weights::fixed(&[1, 256], 0.1, 99)?)
            .with_prompt(Tensor::new(&[[3u32, 40, 500, 7, 6000, 12]], &Device::Cpu)?),
    )?;
    let text = f32.pad_text_tokens(&[20, 21, 22, 300, 41, 7]);
    let speech: Vec<u32> = (0..12u32).map(|i| (i * 389 + 17) % 6561).collect();
    let src_bytes = std::fs::metadata(&src)?.len();
    for (format, name) in [
        (WeightFormat::Q4, "q4.gguf"),
        (WeightFormat::Bf16, "bf16.gguf"),
    ] {
        let out = dir.path(name);
        round_trip(&hp, &src, format, &out, (&ce, &text, &speech))?;
        // the projections are 2.4 M of the file's 9.2 M f32 weights; the rest (embeddings,
        // conditioning, head) stays f32, less text_head (never read)
        let bytes = std::fs::metadata(&out)?.len();
        assert!(bytes < src_bytes, "{format}: {bytes} >= {src_bytes}");
    }
    Ok(())
}

/// A GGUF header with a zero alignment: candle's reader divides by it (a panic), so the
/// header is checked before candle reads it.
fn zero_alignment_gguf() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0x4655_4747u32.to_le_bytes()); // "GGUF"
    b.extend_from_slice(&3u32.to_le_bytes()); // version
    b.extend_from_slice(&0u64.to_le_bytes()); // tensors
    b.extend_from_slice(&1u64.to_le_bytes()); // metadata entries
    let key = b"general.alignment";
    b.extend_from_slice(&(key.len() as u64).to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(&4u32.to_le_bytes()); // u32
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&[0; 64]);
    b
}

#[test]
fn damaged_and_foreign_files_are_typed_errors() -> R<()> {
    let dir = Scratch::new("damaged")?;
    let fx = fixture("en")?;
    let hp: T3Config = fx.config("hp")?;
    let good = dir.path("good.gguf");
    T3::write_quantized(&hp, &[fx.safetensors_path()], WeightFormat::Q8, &good)?;
    let bytes = std::fs::read(&good)?;
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("text", b"not a gguf file at all".to_vec()),
        ("header only", bytes[..64].to_vec()),
        ("truncated data", bytes[..bytes.len() - 100].to_vec()),
        ("zero alignment", zero_alignment_gguf()),
    ];
    // a flipped byte in every 97th position of the header's first kilobyte
    for i in (8..1024.min(bytes.len())).step_by(97) {
        let mut b = bytes.clone();
        b[i] ^= 0xA5;
        cases.push(("flipped header byte", b));
    }
    for (what, b) in cases {
        let path = dir.path("bad.gguf");
        std::fs::write(&path, &b)?;
        match T3::load_quantized(&hp, &path, DType::F32, &Device::Cpu) {
            // a flip inside a value may leave a readable file of other numbers
            Ok(_) if what == "flipped header byte" => {}
            Ok(_) => anyhow::bail!("{what}: loaded"),
            Err(
                T3Error::QuantizedFile(_)
                | T3Error::ShapeMismatch { .. }
                | T3Error::MissingWeight { .. }
                | T3Error::WrongVariant { .. }
                | T3Error::InvalidConfig(_),
            ) => {}
            Err(e) => anyhow::bail!("{what}: untyped error {e:?}"),
        }
    }
    for (what, b, says) in [
        ("empty", Vec::new(), "not a readable GGUF file"),
        ("zero alignment", zero_alignment_gguf(), "an alignment of 0"),
    ] {
        std::fs::write(dir.path("bad.gguf"), &b)?;
        let err = T3::load_quantized(&hp, &dir.path("bad.gguf"), DType::F32, &Device::Cpu).err();
        assert!(
            matches!(&err, Some(T3Error::QuantizedFile(m)) if m.contains("bad.gguf") && m.contains(says)),
            "{what}: {err:?}"
        );
    }
    // a GGUF file without this crate's metadata
    let foreign = dir.path("foreign.gguf");
    let t = candle_core::quantized::QTensor::quantize(
        &Tensor::zeros((4, 32), DType::F32, &Device::Cpu)?,
        candle_core::quantized::GgmlDType::Q8_0,
    )?;
    let mut f = std::fs::File::create(&foreign)?;
    candle_core::quantized::gguf_file::write(&mut f, &[], &[("w", &t)])?;
    drop(f);
    let err = T3::load_quantized(&hp, &foreign, DType::F32, &Device::Cpu).err();
    assert!(
        matches!(&err, Some(T3Error::QuantizedFile(m)) if m.contains("without chatterbox T3 metadata")),
        "{err:?}"
    );
    let err = T3::load_quantized(&hp, &dir.path("missing.gguf"), DType::F32, &Device::Cpu).err();
    assert!(matches!(err, Some(T3Error::QuantizedFile(_))), "{err:?}");
    Ok(())
}
