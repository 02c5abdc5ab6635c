//! chatterbox-text against fixtures recorded from the Python reference
//! (`parity/recorders/text.py`): strings byte for byte, ids exactly, over the whole corpus.
//! The reference runs without pykakasi (GPL): the cases with it belong to chatterbox-kakasi.
use chatterbox_testkit::{Actual, Array, Error, Fixture, Suite};
use chatterbox_text::{
    hiragana_normalize, punc_norm, EnTokenizer, Language, MTLTokenizer, MtlEncodeOptions, Segment,
    TextError, TurboTokenizer, Variant,
};
use std::path::PathBuf;

type Outputs = chatterbox_testkit::Result<Vec<(String, Actual)>>;

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

fn asset(fx: &Fixture, rel: &str) -> PathBuf {
    fx.safetensors_path()
        .parent()
        .map(|d| d.join(rel))
        .unwrap_or_else(|| PathBuf::from(rel))
}

/// Strings stored as concatenated UTF-8 bytes (`<name>`) plus byte lengths (`<name>_len`).
fn strings(fx: &Fixture, name: &str) -> chatterbox_testkit::Result<Vec<String>> {
    let bytes: Vec<u8> = fx
        .input_i64(name)?
        .data
        .iter()
        .map(|&b| u8::try_from(b).map_err(e))
        .collect::<Result<_, _>>()?;
    let lens = fx.input_i64(&format!("{name}_len"))?.data;
    let mut out = Vec::with_capacity(lens.len());
    let mut at = 0usize;
    for len in lens {
        let end = at + usize::try_from(len).map_err(e)?;
        let s = std::str::from_utf8(bytes.get(at..end).ok_or_else(|| e("lengths overrun"))?)
            .map_err(e)?;
        out.push(s.to_string());
        at = end;
    }
    Ok(out)
}

/// Prints the first line where `actual` differs from the recorded strings, to make a failing
/// row readable (the row itself only says that the byte arrays differ).
fn report_first_mismatch(fx: &Fixture, name: &str, inputs: &[String], actual: &[String]) {
    let Ok(expected) = (|| -> chatterbox_testkit::Result<Vec<String>> {
        let bytes: Vec<u8> = fx
            .i64(&format!("out.{name}"))?
            .data
            .iter()
            .map(|&b| b as u8)
            .collect();
        let lens = fx.i64(&format!("out.{name}_len"))?.data;
        let mut at = 0usize;
        let mut v = Vec::new();
        for len in lens {
            let end = at + len as usize;
            v.push(
                String::from_utf8_lossy(&bytes[at.min(bytes.len())..end.min(bytes.len())])
                    .into_owned(),
            );
            at = end;
        }
        Ok(v)
    })() else {
        return;
    };
    for (i, (a, x)) in actual.iter().zip(&expected).enumerate() {
        if a != x {
            eprintln!(
                "[{}] first mismatch at line {i}: input {:?}\n  rust      {a:?}\n  reference {x:?}",
                fx.meta.case, inputs[i]
            );
            return;
        }
    }
}

fn report_first_id_mismatch(fx: &Fixture, inputs: &[String], actual: &[Vec<u32>]) {
    let (Ok(ids), Ok(lens)) = (fx.i64("out.ids"), fx.i64("out.ids_len")) else {
        return;
    };
    let mut at = 0usize;
    for (i, (a, len)) in actual.iter().zip(lens.data).enumerate() {
        let end = (at + len as usize).min(ids.data.len());
        let x: Vec<u32> = ids.data[at..end].iter().map(|&v| v as u32).collect();
        if *a != x {
            eprintln!(
                "[{}] first id mismatch at line {i}: input {:?}\n  rust      {a:?}\n  reference {x:?}",
                fx.meta.case, inputs[i]
            );
            return;
        }
        at = end;
    }
}

fn pack_strings(name: &str, v: &[String]) -> Vec<(String, Actual)> {
    let bytes: Vec<i64> = v.iter().flat_map(|s| s.bytes()).map(i64::from).collect();
    let lens: Vec<i64> = v.iter().map(|s| s.len() as i64).collect();
    vec![
        (name.to_string(), Array::vector(bytes).into()),
        (format!("{name}_len"), Array::vector(lens).into()),
    ]
}

fn pack_ids(v: &[Vec<u32>]) -> Vec<(String, Actual)> {
    let ids: Vec<i64> = v.iter().flatten().map(|&i| i64::from(i)).collect();
    let lens: Vec<i64> = v.iter().map(|s| s.len() as i64).collect();
    vec![
        ("ids".to_string(), Array::vector(ids).into()),
        ("ids_len".to_string(), Array::vector(lens).into()),
    ]
}

fn language(id: &str) -> chatterbox_testkit::Result<Option<Language>> {
    if id.is_empty() {
        Ok(None)
    } else {
        Language::parse(id).map(Some).map_err(e)
    }
}

/// The multilingual tokenizer without a kanji reader: the recorder made pykakasi unimportable.
fn mtl_tokenizer(fx: &Fixture) -> chatterbox_testkit::Result<MTLTokenizer> {
    let vocab: String = fx.config("tokenizer")?;
    MTLTokenizer::from_file(asset(fx, &vocab)).map_err(e)
}

fn punc_norm_case(fx: &Fixture) -> Outputs {
    let variant = match fx.config::<String>("variant")?.as_str() {
        "english" => Variant::English,
        "multilingual" => Variant::Multilingual,
        "turbo" => Variant::Turbo,
        v => return Err(e(format!("unknown variant {v}"))),
    };
    let texts = strings(fx, "text")?;
    let out: Vec<String> = texts.iter().map(|t| punc_norm(t, variant)).collect();
    report_first_mismatch(fx, "text", &texts, &out);
    Ok(pack_strings("text", &out))
}

fn en_ids(fx: &Fixture) -> Outputs {
    let tok = EnTokenizer::from_file(asset(fx, &fx.config::<String>("tokenizer")?)).map_err(e)?;
    let texts = strings(fx, "text")?;
    let ids: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| tok.encode(t))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    let decoded: Vec<String> = ids
        .iter()
        .map(|i| tok.decode(i))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    report_first_id_mismatch(fx, &texts, &ids);
    report_first_mismatch(fx, "decoded", &texts, &decoded);
    let mut out = pack_ids(&ids);
    out.extend(pack_strings("decoded", &decoded));
    Ok(out)
}

fn mtl_prepare(fx: &Fixture) -> Outputs {
    let tok = mtl_tokenizer(fx)?;
    let texts = strings(fx, "text")?;
    let langs = strings(fx, "lang")?;
    let mut out = Vec::with_capacity(texts.len());
    for (t, l) in texts.iter().zip(&langs) {
        out.push(tok.prepare(t, language(l)?, MtlEncodeOptions::default()));
    }
    report_first_mismatch(fx, "text", &texts, &out);
    Ok(pack_strings("text", &out))
}

/// `hiragana_normalize` over a reader that returns the segments the reference's stand-in
/// pykakasi returned for each line.
fn hiragana_normalize_case(fx: &Fixture) -> Outputs {
    let texts = strings(fx, "text")?;
    let orig = strings(fx, "seg_orig")?;
    let hira = strings(fx, "seg_hira")?;
    let counts = fx.input_i64("segments")?.data;
    if counts.len() != texts.len()
        || orig.len() != hira.len()
        || counts.iter().sum::<i64>() != orig.len() as i64
    {
        return Err(e("segment counts do not match the lines"));
    }
    let mut segments = orig.into_iter().zip(hira).map(|(o, h)| Segment::new(o, h));
    let mut out = Vec::with_capacity(texts.len());
    for (text, n) in texts.iter().zip(counts) {
        let segs: Vec<Segment> = segments
            .by_ref()
            .take(usize::try_from(n).map_err(e)?)
            .collect();
        let reader = move |_: &str| segs.clone();
        out.push(hiragana_normalize(text, Some(&reader)));
    }
    report_first_mismatch(fx, "text", &texts, &out);
    Ok(pack_strings("text", &out))
}

fn mtl_ids(fx: &Fixture) -> Outputs {
    let tok = mtl_tokenizer(fx)?;
    let texts = strings(fx, "text")?;
    let langs = strings(fx, "lang")?;
    let mut ids = Vec::with_capacity(texts.len());
    for (t, l) in texts.iter().zip(&langs) {
        ids.push(tok.encode(t, language(l)?).map_err(e)?);
    }
    let decoded: Vec<String> = ids
        .iter()
        .map(|i| tok.decode(i))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    report_first_id_mismatch(fx, &texts, &ids);
    report_first_mismatch(fx, "decoded", &texts, &decoded);
    let mut out = pack_ids(&ids);
    out.extend(pack_strings("decoded", &decoded));
    Ok(out)
}

fn turbo_ids(fx: &Fixture) -> Outputs {
    let tok =
        TurboTokenizer::from_dir(asset(fx, &fx.config::<String>("tokenizer_dir")?)).map_err(e)?;
    let vocab_size: usize = fx.config("vocab_size")?;
    if tok.vocab_size() != vocab_size {
        return Err(e(format!(
            "vocab size {} != reference len(tokenizer) {vocab_size}",
            tok.vocab_size()
        )));
    }
    let texts = strings(fx, "text")?;
    let ids: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| tok.encode(t))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    report_first_id_mismatch(fx, &texts, &ids);
    Ok(pack_ids(&ids))
}

fn language_ids(fx: &Fixture) -> Outputs {
    let ids = strings(fx, "text")?;
    let rejected: Vec<i64> = ids
        .iter()
        .map(|id| match language(id) {
            Ok(_) => 0,
            Err(_) => 1,
        })
        .collect();
    Ok(vec![("rejected".into(), Array::vector(rejected).into())])
}

fn missing_special(fx: &Fixture) -> Outputs {
    let files: Vec<String> = fx.config("files")?;
    let mut raised = Vec::new();
    for f in files {
        let path = asset(fx, &f);
        let flag = |r: Result<(), TextError>| -> chatterbox_testkit::Result<i64> {
            match r {
                Ok(()) => Ok(0),
                Err(TextError::MissingSpecialToken { .. }) => Ok(1),
                Err(other) => Err(e(format!("unexpected error: {other}"))),
            }
        };
        raised.push(flag(EnTokenizer::from_file(&path).map(|_| ()))?);
        raised.push(flag(MTLTokenizer::from_file(&path).map(|_| ()))?);
    }
    Ok(vec![("raised".into(), Array::vector(raised).into())])
}

#[test]
fn parity() {
    Suite::new("text")
        .case("punc_norm", punc_norm_case)
        .case("en_ids", en_ids)
        .case("mtl_prepare", mtl_prepare)
        .case("hiragana_normalize", hiragana_normalize_case)
        .case("mtl_ids", mtl_ids)
        .case("turbo_ids", turbo_ids)
        .case("language_ids", language_ids)
        .case("missing_special", missing_special)
        .run_and_assert();
}
