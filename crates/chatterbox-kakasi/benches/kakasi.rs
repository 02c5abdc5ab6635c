//! `cargo xtask bench kakasi`: the Japanese path of the multilingual tokenizer with pykakasi's
//! whole dictionary, one core, as JSON records (`CHATTERBOX_BENCH_OUT`, else stdout): loading the
//! dictionary, `Kakasi::convert` and `MTLTokenizer::encode` over the Japanese lines of the parity
//! corpus (tokenizer files: `parity/fixtures/kakasi/assets`).
//!
//! The dictionary is `$CHATTERBOX_KAKASI_DICT`, else `target/bench/kakasi_dict.tsv`, exported with
//! `parity/.venv` (pykakasi 2.3.0) when missing.
use chatterbox_kakasi::{Kakasi, KakasiDict};
use chatterbox_testkit::{black_box, time_it, BenchRun};
use chatterbox_text::{punc_norm, Language, MTLTokenizer, Variant};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(serde::Deserialize)]
struct Line {
    lang: String,
    text: String,
}

fn dict_path(root: &Path) -> anyhow::Result<PathBuf> {
    let path = match std::env::var_os("CHATTERBOX_KAKASI_DICT") {
        Some(p) => PathBuf::from(p),
        None => root.join("target/bench/kakasi_dict.tsv"),
    };
    if !path.is_file() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let status = std::process::Command::new(root.join("parity/.venv/bin/python"))
            .arg(root.join("crates/chatterbox-kakasi/scripts/export_pykakasi_dict.py"))
            .arg(&path)
            .status()?;
        anyhow::ensure!(status.success(), "exporting pykakasi's dictionary failed");
    }
    Ok(path)
}

fn main() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lines: Vec<String> = std::fs::read_to_string(root.join("parity/corpus/text.jsonl"))?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str::<Line>)
        .filter(|l| l.as_ref().map_or(true, |l| l.lang == "ja"))
        .map(|l| l.map(|l| punc_norm(&l.text, Variant::Multilingual)))
        .collect::<Result<_, _>>()?;
    let shape = format!("Japanese corpus lines, {}", lines.len());
    let path = dict_path(&root)?;
    let kakasi = Kakasi::new(KakasiDict::from_file(&path)?);
    let mtl = MTLTokenizer::from_file(
        root.join("parity/fixtures/kakasi/assets/mtl/grapheme_mtl_merged_expanded_v1.json"),
    )?
    .with_kanji_reader(Some(Arc::new(kakasi.clone())));

    let mut bench = BenchRun::new("kakasi", "cpu", 1, 24);
    bench.push_timing(
        "dict_load",
        format!("{} words", kakasi.dict().len()),
        time_it(1, 3, 1.0, || {
            black_box(KakasiDict::from_file(&path).ok());
        }),
    );
    bench.push_timing(
        "kakasi_convert",
        &shape,
        time_it(2, 10, 1.0, || {
            for l in &lines {
                black_box(kakasi.convert(l));
            }
        }),
    );
    bench.push_timing(
        "ja_mtl_text_tokens",
        &shape,
        time_it(2, 10, 1.0, || {
            for l in &lines {
                black_box(mtl.encode(l, Some(Language::Japanese)).ok());
            }
        }),
    );

    bench.emit()?;
    Ok(())
}
