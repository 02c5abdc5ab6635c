//! `cargo xtask bench text`: the text front end over the parity corpus, one core, as JSON records
//! (`CHATTERBOX_BENCH_OUT`, else stdout). `parity/bench/text.py` times the reference on the same
//! lines with the same tokenizer files (`parity/fixtures/text/assets`).
//!
//! Japanese runs without a kanji reader on both sides (the reference with pykakasi made
//! unimportable); chatterbox-kakasi's bench times the Japanese path with pykakasi's dictionary.
use chatterbox_testkit::{black_box, time_it, BenchRun};
use chatterbox_text::{
    punc_norm, EnTokenizer, Language, MTLTokenizer, SentenceChunker, TurboTokenizer, Variant,
};
use std::path::Path;

#[derive(serde::Deserialize)]
struct Line {
    lang: String,
    text: String,
}

fn main() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let assets = root.join("parity/fixtures/text/assets");
    let corpus: Vec<Line> = std::fs::read_to_string(root.join("parity/corpus/text.jsonl"))?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let langs: Vec<Language> = corpus
        .iter()
        .map(|l| Language::parse(&l.lang))
        .collect::<Result<_, _>>()?;
    let shape = format!("corpus, {} lines", corpus.len());

    let en = EnTokenizer::from_file(assets.join("en/tokenizer.json"))?;
    let mtl = MTLTokenizer::from_file(assets.join("mtl/grapheme_mtl_merged_expanded_v1.json"))?;
    let turbo = TurboTokenizer::from_dir(assets.join("turbo"))?;
    let long: String = corpus
        .iter()
        .map(|l| l.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
        .repeat(10);
    let chunker = SentenceChunker::new(250)?;

    let mut bench = BenchRun::new("text", "cpu", 1, 24);
    bench.push_timing(
        "punc_norm_3_variants",
        &shape,
        time_it(2, 10, 1.0, || {
            for l in &corpus {
                for v in [Variant::English, Variant::Multilingual, Variant::Turbo] {
                    black_box(punc_norm(&l.text, v));
                }
            }
        }),
    );
    bench.push_timing(
        "en_text_tokens",
        &shape,
        time_it(2, 10, 1.0, || {
            for l in &corpus {
                black_box(en.encode(&punc_norm(&l.text, Variant::English)).ok());
            }
        }),
    );
    bench.push_timing(
        "mtl_text_tokens",
        &shape,
        time_it(2, 10, 1.0, || {
            for (l, lang) in corpus.iter().zip(&langs) {
                let t = punc_norm(&l.text, Variant::Multilingual);
                black_box(mtl.encode(&t, Some(*lang)).ok());
            }
        }),
    );
    bench.push_timing(
        "turbo_text_tokens",
        &shape,
        time_it(2, 10, 1.0, || {
            for l in &corpus {
                black_box(turbo.encode(&punc_norm(&l.text, Variant::Turbo)).ok());
            }
        }),
    );
    bench.push_timing(
        "chunk_250",
        format!("{} characters", long.chars().count()),
        time_it(2, 10, 1.0, || {
            black_box(chunker.chunk(&long));
        }),
    );

    bench.emit()?;
    Ok(())
}
