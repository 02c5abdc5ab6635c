//! chatterbox-kakasi against fixtures recorded from pykakasi 2.3.0 and the Python reference
//! with it installed (`parity/recorders/kakasi.py`): segments and prepared strings byte for byte,
//! ids exactly, over the Japanese lines of the text corpus.
use chatterbox_kakasi::Kakasi;
use chatterbox_testkit::{pack_strings, Actual, Array, Error, Fixture, Suite};
use chatterbox_text::{Language, MTLTokenizer, MtlEncodeOptions};
use std::sync::Arc;

type Outputs = chatterbox_testkit::Result<Vec<(String, Actual)>>;

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

fn kakasi(fx: &Fixture) -> chatterbox_testkit::Result<Kakasi> {
    Kakasi::from_file(fx.asset(&fx.config::<String>("kakasi")?)).map_err(e)
}

/// The multilingual tokenizer with pykakasi's role filled by [`Kakasi`].
fn mtl_tokenizer(fx: &Fixture) -> chatterbox_testkit::Result<MTLTokenizer> {
    let vocab: String = fx.config("tokenizer")?;
    Ok(MTLTokenizer::from_file(fx.asset(&vocab))
        .map_err(e)?
        .with_kanji_reader(Some(Arc::new(kakasi(fx)?))))
}

/// A recorded language id: none when empty.
fn language(id: &str) -> chatterbox_testkit::Result<Option<Language>> {
    (!id.is_empty())
        .then(|| Language::parse(id))
        .transpose()
        .map_err(e)
}

/// `kakasi().convert(text)`: `orig` and `hira` of every segment, and the segment count per line.
fn convert(fx: &Fixture) -> Outputs {
    let k = kakasi(fx)?;
    let texts = fx.input_strings("text")?;
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
        fx.expected_strings("orig"),
        fx.expected_strings("hira"),
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

fn mtl_ids(fx: &Fixture) -> Outputs {
    let tok = mtl_tokenizer(fx)?;
    let (texts, ids) = fx.map_lines_with_language(|t, l| tok.encode(t, language(l)?).map_err(e))?;
    fx.ids_and_decoded(&texts, &ids, |i| tok.decode(i))
}

fn mtl_prepare(fx: &Fixture) -> Outputs {
    let tok = mtl_tokenizer(fx)?;
    let prepare = |t: &str, l: &str| Ok(tok.prepare(t, language(l)?, MtlEncodeOptions::default()));
    let (texts, out) = fx.map_lines_with_language(prepare)?;
    Ok(fx.strings_outputs("text", &texts, &out))
}

#[test]
fn parity() {
    Suite::new("kakasi")
        .case("convert", convert)
        .case("mtl_prepare", mtl_prepare)
        .case("mtl_ids", mtl_ids)
        .run_and_assert();
}
