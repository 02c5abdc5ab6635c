//! chatterbox-text against fixtures recorded from the Python reference
//! (`parity/recorders/text.py`): strings byte for byte, ids exactly, over the whole corpus.
//! The reference runs without pykakasi (GPL): the cases with it belong to chatterbox-kakasi.
use chatterbox_testkit::{pack_ids, Actual, Array, Error, Fixture, Suite};
use chatterbox_text::{
    hiragana_normalize, punc_norm, EnTokenizer, Language, MTLTokenizer, MtlEncodeOptions, Segment,
    TextError, TurboTokenizer, Variant,
};

type Outputs = chatterbox_testkit::Result<Vec<(String, Actual)>>;

fn e(err: impl std::fmt::Display) -> Error {
    Error::case(err)
}

/// A recorded language id: none when empty.
fn language(id: &str) -> chatterbox_testkit::Result<Option<Language>> {
    (!id.is_empty())
        .then(|| Language::parse(id))
        .transpose()
        .map_err(e)
}

/// The multilingual tokenizer without a kanji reader: the recorder made pykakasi unimportable.
fn mtl_tokenizer(fx: &Fixture) -> chatterbox_testkit::Result<MTLTokenizer> {
    let vocab: String = fx.config("tokenizer")?;
    MTLTokenizer::from_file(fx.asset(&vocab)).map_err(e)
}

fn punc_norm_case(fx: &Fixture) -> Outputs {
    let variant = match fx.config::<String>("variant")?.as_str() {
        "english" => Variant::English,
        "multilingual" => Variant::Multilingual,
        "turbo" => Variant::Turbo,
        v => return Err(e(format!("unknown variant {v}"))),
    };
    let (texts, out) = fx.map_lines(|t| Ok(punc_norm(t, variant)))?;
    Ok(fx.strings_outputs("text", &texts, &out))
}

fn mtl_prepare(fx: &Fixture) -> Outputs {
    let tok = mtl_tokenizer(fx)?;
    let prepare = |t: &str, l: &str| Ok(tok.prepare(t, language(l)?, MtlEncodeOptions::default()));
    let (texts, out) = fx.map_lines_with_language(prepare)?;
    Ok(fx.strings_outputs("text", &texts, &out))
}

/// `hiragana_normalize` over a reader that returns the segments the reference's stand-in
/// pykakasi returned for each line.
fn hiragana_normalize_case(fx: &Fixture) -> Outputs {
    let texts = fx.input_strings("text")?;
    let orig = fx.input_strings("seg_orig")?;
    let hira = fx.input_strings("seg_hira")?;
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
    Ok(fx.strings_outputs("text", &texts, &out))
}

fn en_ids(fx: &Fixture) -> Outputs {
    let tok = EnTokenizer::from_file(fx.asset(&fx.config::<String>("tokenizer")?)).map_err(e)?;
    let (texts, ids) = fx.map_lines(|t| tok.encode(t).map_err(e))?;
    fx.ids_and_decoded(&texts, &ids, |i| tok.decode(i))
}

fn mtl_ids(fx: &Fixture) -> Outputs {
    let tok = mtl_tokenizer(fx)?;
    let (texts, ids) = fx.map_lines_with_language(|t, l| tok.encode(t, language(l)?).map_err(e))?;
    fx.ids_and_decoded(&texts, &ids, |i| tok.decode(i))
}

fn turbo_ids(fx: &Fixture) -> Outputs {
    let tok =
        TurboTokenizer::from_dir(fx.asset(&fx.config::<String>("tokenizer_dir")?)).map_err(e)?;
    let vocab_size: usize = fx.config("vocab_size")?;
    if tok.vocab_size() != vocab_size {
        return Err(e(format!(
            "vocab size {} != reference len(tokenizer) {vocab_size}",
            tok.vocab_size()
        )));
    }
    let (texts, ids) = fx.map_lines(|t| tok.encode(t).map_err(e))?;
    fx.report_first_id_mismatch(&texts, &ids);
    Ok(pack_ids(&ids))
}

fn language_ids(fx: &Fixture) -> Outputs {
    let ids = fx.input_strings("text")?;
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
        let path = fx.asset(&f);
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
