//! chatterbox-kakasi against fixtures recorded from pykakasi 2.3.0 and the Python reference
//! with it installed (`parity/recorders/kakasi.py`): segments and prepared strings byte for byte,
//! ids exactly, over the Japanese lines of the text corpus.
use chatterbox_kakasi::Kakasi;
use chatterbox_testkit::{Actual, Array, Error, Fixture, Suite};
use chatterbox_text::{Language, MTLTokenizer, MtlEncodeOptions};
use std::path::PathBuf;
use std::sync::Arc;

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

/// The recorded output strings `out.<name>` (lossy UTF-8, for messages).
fn expected_strings(fx: &Fixture, name: &str) -> chatterbox_testkit::Result<Vec<String>> {
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
            String::from_utf8_lossy(&bytes[at.min(bytes.len())..end.min(bytes.len())]).into_owned(),
        );
        at = end;
    }
    Ok(v)
}

/// Prints the first line where `actual` differs from the recorded strings, to make a failing
/// row readable (the row itself only says that the byte arrays differ).
fn report_first_mismatch(fx: &Fixture, name: &str, inputs: &[String], actual: &[String]) {
    let Ok(expected) = expected_strings(fx, name) else {
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

fn kakasi(fx: &Fixture) -> chatterbox_testkit::Result<Kakasi> {
    Kakasi::from_file(asset(fx, &fx.config::<String>("kakasi")?)).map_err(e)
}

/// The multilingual tokenizer with pykakasi's role filled by [`Kakasi`].
fn mtl_tokenizer(fx: &Fixture) -> chatterbox_testkit::Result<MTLTokenizer> {
    let vocab: String = fx.config("tokenizer")?;
    Ok(MTLTokenizer::from_file(asset(fx, &vocab))
        .map_err(e)?
        .with_kanji_reader(Some(Arc::new(kakasi(fx)?))))
}

/// `kakasi().convert(text)`: `orig` and `hira` of every segment, and the segment count per line.
fn convert(fx: &Fixture) -> Outputs {
    let k = kakasi(fx)?;
    let texts = strings(fx, "text")?;
    let segments: Vec<_> = texts.iter().map(|t| k.convert(t)).collect();
    let orig: Vec<String> = segments.iter().flatten().map(|s| s.orig.clone()).collect();
    let hira: Vec<String> = segments.iter().flatten().map(|s| s.hira.clone()).collect();
    let counts: Vec<i64> = segments.iter().map(|s| s.len() as i64).collect();
    report_first_segment_mismatch(fx, &texts, &segments);
    let mut out = pack_strings("orig", &orig);
    out.extend(pack_strings("hira", &hira));
    out.push(("segments".into(), Array::vector(counts).into()));
    Ok(out)
}

/// Prints the first line whose segments differ from the recorded ones.
fn report_first_segment_mismatch(
    fx: &Fixture,
    texts: &[String],
    actual: &[Vec<chatterbox_kakasi::Segment>],
) {
    let (Ok(orig), Ok(hira), Ok(counts)) = (
        expected_strings(fx, "orig"),
        expected_strings(fx, "hira"),
        fx.i64("out.segments"),
    ) else {
        return;
    };
    let mut at = 0usize;
    for (i, (a, n)) in actual.iter().zip(counts.data).enumerate() {
        let end = (at + n as usize).min(orig.len()).min(hira.len());
        let x: Vec<(&str, &str)> = orig[at..end]
            .iter()
            .zip(&hira[at..end])
            .map(|(o, h)| (o.as_str(), h.as_str()))
            .collect();
        let a: Vec<(&str, &str)> = a
            .iter()
            .map(|s| (s.orig.as_str(), s.hira.as_str()))
            .collect();
        if a != x {
            eprintln!(
                "[{}] first mismatch at line {i}: input {:?}\n  rust      {a:?}\n  reference {x:?}",
                fx.meta.case, texts[i]
            );
            return;
        }
        at = end;
    }
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

#[test]
fn parity() {
    Suite::new("kakasi")
        .case("convert", convert)
        .case("mtl_prepare", mtl_prepare)
        .case("mtl_ids", mtl_ids)
        .run_and_assert();
}
