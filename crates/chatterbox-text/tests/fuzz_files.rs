//! Fuzz tests of the tokenizer files a user hands the text front end (issue #26, point 12):
//! `tokenizer.json` of the English and multilingual models, the Turbo/Nano GPT-2 files
//! (`tokenizer.json` or `vocab.json` + `merges.txt` + `added_tokens.json`, and
//! `tokenizer_config.json`), the Cangjie table; and hostile text through every tokenizer.
//! Every file gives a tokenizer or a [`TextError`] naming it, never a panic; a tokenizer that
//! loads encodes any text. Arbitrary-Unicode properties of encoding are in `properties.rs`.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test

use chatterbox_text::{
    EnTokenizer, Language, MTLTokenizer, SentenceChunker, TextError, TextFrontend, TurboTokenizer,
    Variant,
};
mod fuzz_support;

use fuzz_support::{
    assets, hostile_texts, hostile_values, malformed_tokenizer_files, mutate, pointers, scratch,
    scratch_copy, tokenizer_files, TOKENIZER_FILES,
};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Runs a property on `cases` cases drawn from `strategy`; the scratch directories of `dirs`
/// (`(directory, file)` pairs) are removed afterwards, whatever the outcome.
fn property<S: Strategy>(
    dirs: &[(PathBuf, PathBuf)],
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let mut runner = TestRunner::new(config(cases));
    let result = runner.run(&strategy, test);
    for (dir, _) in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// `cases` per property; `FUZZ_CASES=N` runs N instead (longer fuzzing by hand).
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(cases),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// An error must name the file or directory (`path`'s last component).
fn named<T: std::fmt::Debug>(r: &Result<T, TextError>, path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    match r {
        Ok(_) => true,
        Err(e) => e.to_string().contains(&name),
    }
}

fn tokenizers() -> &'static (EnTokenizer, MTLTokenizer, TurboTokenizer, TurboTokenizer) {
    static T: OnceLock<(EnTokenizer, MTLTokenizer, TurboTokenizer, TurboTokenizer)> =
        OnceLock::new();
    T.get_or_init(|| {
        (
            EnTokenizer::from_file(assets().join("en/tokenizer.json")).unwrap(),
            MTLTokenizer::from_file(assets().join("mtl/grapheme_mtl_merged_expanded_v1.json"))
                .unwrap(),
            TurboTokenizer::from_dir(assets().join("turbo")).unwrap(),
            TurboTokenizer::from_dir(assets().join("turbo_legacy")).unwrap(),
        )
    })
}

#[test]
fn hostile_text_through_every_tokenizer() {
    let (en, mtl, turbo, legacy) = tokenizers();
    let frontends = [
        TextFrontend::from_checkpoint_dir(assets().join("en"), Variant::English).unwrap(),
        TextFrontend::from_checkpoint_dir(assets().join("mtl"), Variant::Multilingual).unwrap(),
        TextFrontend::from_checkpoint_dir(assets().join("turbo"), Variant::Turbo).unwrap(),
    ];
    let chunker = SentenceChunker::new(300).unwrap();
    for text in hostile_texts() {
        let short: String = text.chars().take(20).collect();
        let ids = en.encode(&text).unwrap();
        en.decode(&ids).unwrap();
        for lang in [
            None,
            Some(Language::Chinese),
            Some(Language::Japanese),
            Some(Language::Korean),
            Some(Language::Hebrew),
            Some(Language::Arabic),
        ] {
            let ids = mtl.encode(&text, lang).unwrap();
            mtl.decode(&ids).unwrap();
        }
        for t in [turbo, legacy] {
            let ids = t.encode(&text).unwrap();
            assert!(
                ids.len() <= t.max_length().unwrap_or(usize::MAX),
                "{short:?}"
            );
            t.decode(&ids).unwrap();
        }
        for fe in &frontends {
            match fe.text_tokens(&text, None) {
                Ok(_) | Err(TextError::EmptyText { .. }) => {}
                Err(e) => panic!("{short:?}: {e}"),
            }
        }
        let _ = chunker.split(&text);
    }
}

// ---- tokenizer.json

/// Loads a tokenizer of `kind` from `dir` (where the file under test was written) and, when it
/// loads, encodes and decodes hostile text; whether it loaded, or why the error is wrong.
fn load_and_use(kind: usize, dir: &Path, file: &Path) -> Result<bool, String> {
    let sample = "Hello, World! [START] 漢字 ｶﾞ שלום 👩‍👩‍👧 \0\u{301}\u{301}";
    // a tokenizer that loads may still fail to encode (an unknown token missing from the
    // vocabulary), with an error naming its file
    let r = match kind {
        0 => EnTokenizer::from_file(file).and_then(|t| {
            let ids = t.encode(sample)?;
            let _ = t.decode(&ids);
            let _ = t.decode(&[0, 1, u32::MAX]);
            Ok(())
        }),
        1 => MTLTokenizer::from_file(file).and_then(|t| {
            let ids = t.encode(sample, Some(Language::Chinese))?;
            let _ = t.decode(&ids);
            let _ = t.decode(&[0, 1, u32::MAX]);
            Ok(())
        }),
        _ => TurboTokenizer::from_dir(dir).and_then(|t| {
            let ids = t.encode(sample)?;
            let _ = t.decode(&ids);
            let _ = t.decode(&[0, 1, u32::MAX]);
            Ok(())
        }),
    };
    if named(&r, file) || (kind == 2 && named(&r, dir)) {
        Ok(r.is_ok())
    } else {
        Err(format!(
            "error does not name {}: {:?}",
            file.display(),
            r.err()
        ))
    }
}

#[test]
fn malformed_tokenizer_files_are_named_errors() {
    for (kind, name) in TOKENIZER_FILES.iter().enumerate() {
        let (dir, file) = scratch_copy(kind, "malformed");
        for (what, bytes) in malformed_tokenizer_files(kind) {
            std::fs::write(&file, &bytes).unwrap();
            if let Err(e) = load_and_use(kind, &dir, &file) {
                panic!("{name} with {what}: {e}");
            }
        }
        // an empty file is refused, naming it
        std::fs::write(&file, b"").unwrap();
        assert_eq!(load_and_use(kind, &dir, &file), Ok(false));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Any node of a tokenizer file replaced (or a key added beside it): a tokenizer that encodes
/// hostile text, or an error naming the file.
#[test]
fn mutated_tokenizer_files() {
    let dirs: Vec<(PathBuf, PathBuf)> = (0..3).map(|k| scratch_copy(k, "mutated")).collect();
    let strategy = (
        0..3usize,
        any::<prop::sample::Index>(),
        prop::sample::select(hostile_values()),
        prop::bool::weighted(0.2),
    );
    property(&dirs, 96, strategy, |(kind, node, value, add)| {
        let (dir, file) = &dirs[kind];
        let f = &tokenizer_files()[kind];
        let pointer = node.get(&f.pointers);
        std::fs::write(
            file,
            mutate(&f.doc, pointer, value.clone(), add).to_string(),
        )
        .unwrap();
        let r = load_and_use(kind, dir, file);
        prop_assert!(r.is_ok(), "{pointer} = {value}: {r:?}");
        Ok(())
    });
}

/// Damaged bytes of a tokenizer file.
#[test]
fn damaged_tokenizer_files() {
    let dirs: Vec<(PathBuf, PathBuf)> = (0..3).map(|k| scratch_copy(k, "damaged")).collect();
    let strategy = (
        0..3usize,
        any::<prop::sample::Index>(),
        prop::collection::vec(any::<u8>(), 1..8),
        any::<bool>(),
    );
    property(&dirs, 96, strategy, |(kind, at, bytes, cut)| {
        let (dir, file) = &dirs[kind];
        let mut b = std::fs::read(assets().join(TOKENIZER_FILES[kind])).unwrap();
        let at = at.index(b.len());
        if cut {
            b.truncate(at);
        } else {
            for (i, x) in bytes.iter().enumerate() {
                if let Some(y) = b.get_mut(at + i) {
                    *y = *x;
                }
            }
        }
        std::fs::write(file, &b).unwrap();
        let r = load_and_use(kind, dir, file);
        prop_assert!(r.is_ok(), "{r:?}");
        Ok(())
    });
}

// ---- Turbo's GPT-2 files

/// The files of a `turbo_legacy`-style directory, each as text.
fn legacy_files() -> Vec<(&'static str, String)> {
    [
        "vocab.json",
        "merges.txt",
        "added_tokens.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ]
    .into_iter()
    .map(|f| {
        (
            f,
            std::fs::read_to_string(assets().join("turbo_legacy").join(f)).unwrap(),
        )
    })
    .collect()
}

#[test]
fn malformed_turbo_files_are_named_errors() {
    let cases: Vec<(&str, &str, String)> = vec![
        ("tokenizer_config.json", "empty", String::new()),
        ("tokenizer_config.json", "a list", "[]".into()),
        (
            "tokenizer_config.json",
            "model_max_length 1e308",
            r#"{"model_max_length": 1e308}"#.into(),
        ),
        (
            "tokenizer_config.json",
            "model_max_length -1",
            r#"{"model_max_length": -1}"#.into(),
        ),
        (
            "tokenizer_config.json",
            "model_max_length 2^64",
            r#"{"model_max_length": 18446744073709551616}"#.into(),
        ),
        (
            "tokenizer_config.json",
            "model_max_length a string",
            r#"{"model_max_length": "many"}"#.into(),
        ),
        (
            "tokenizer_config.json",
            "model_max_length 0",
            r#"{"model_max_length": 0}"#.into(),
        ),
        (
            "tokenizer_config.json",
            "bos missing with add_bos_token",
            r#"{"add_bos_token": true}"#.into(),
        ),
        (
            "tokenizer_config.json",
            "eos of an unknown token",
            r#"{"eos_token": "<|nope|>"}"#.into(),
        ),
        (
            "tokenizer_config.json",
            "eos an object without content",
            r#"{"eos_token": {"x": 1}}"#.into(),
        ),
        (
            "tokenizer_config.json",
            "added token id past u32",
            r#"{"added_tokens_decoder": {"99999999999": {"content": "[x]"}}}"#.into(),
        ),
        (
            "tokenizer_config.json",
            "added token id not a number",
            r#"{"added_tokens_decoder": {"abc": {"content": "[x]"}}}"#.into(),
        ),
        (
            "tokenizer_config.json",
            "added token id far away",
            r#"{"added_tokens_decoder": {"4000000000": {"content": "[x]", "special": true}}}"#
                .into(),
        ),
        (
            "tokenizer_config.json",
            "added token without content",
            r#"{"added_tokens_decoder": {"5": {}}}"#.into(),
        ),
        (
            "added_tokens.json",
            "ids past u32",
            r#"{"[laugh]": 4294967296}"#.into(),
        ),
        (
            "added_tokens.json",
            "id u32::MAX",
            r#"{"[laugh]": 4294967295}"#.into(),
        ),
        ("added_tokens.json", "a list", "[1]".into()),
        ("vocab.json", "empty", String::new()),
        ("vocab.json", "ids negative", r#"{"a": -1}"#.into()),
        (
            "vocab.json",
            "ids past u32",
            r#"{"a": 4294967296, "<|endoftext|>": 0}"#.into(),
        ),
        ("vocab.json", "no end of text", r#"{"a": 0}"#.into()),
        (
            "merges.txt",
            "merges of missing tokens",
            "#version: 0.2\nzzz qqq\n".into(),
        ),
        (
            "merges.txt",
            "merges not pairs",
            "#version: 0.2\nabc\na b c\n\n".into(),
        ),
        (
            "merges.txt",
            "not UTF-8",
            "#version: 0.2\n\u{fffd}".replace('\u{fffd}', "\u{0}"),
        ),
    ];
    let dir = scratch("turbo-legacy");
    for (file, what, text) in cases {
        for (f, t) in legacy_files() {
            std::fs::write(dir.join(f), t).unwrap();
        }
        std::fs::write(dir.join(file), text).unwrap();
        let r = TurboTokenizer::from_dir(&dir);
        if let Ok(t) = &r {
            let ids = t.encode("Hello [laugh] world 👩‍👩‍👧").unwrap();
            let _ = t.decode(&ids);
        }
        assert!(
            named(&r, &dir.join(file)) || named(&r, &dir),
            "{file} {what}: {r:?}"
        );
    }
    // merges.txt that is not UTF-8
    std::fs::write(dir.join("merges.txt"), b"#version: 0.2\n\xff\xfe a\n").unwrap();
    let r = TurboTokenizer::from_dir(&dir);
    assert!(
        named(&r, &dir.join("vocab.json")) || named(&r, &dir.join("merges.txt")),
        "{r:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Any of the legacy Turbo files with a node replaced or its text damaged.
#[test]
fn mutated_turbo_files() {
    let dir = scratch("turbo-mutated");
    let strategy = (
        0..4usize,
        any::<prop::sample::Index>(),
        prop::sample::select(hostile_values()),
        any::<bool>(),
    );
    property(
        &[(dir.clone(), dir.clone())],
        96,
        strategy,
        |(file, node, value, line_edit)| {
            let files = legacy_files();
            for (f, t) in &files {
                std::fs::write(dir.join(f), t).unwrap();
            }
            let (name, text) = &files[file];
            let new = if *name == "merges.txt" || line_edit {
                // a line replaced by the value's text
                let mut lines: Vec<String> = text.lines().map(String::from).collect();
                let i = node.index(lines.len());
                lines[i] = match &value {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                lines.join("\n")
            } else {
                let doc: Value = serde_json::from_str(text).unwrap();
                let mut p: Vec<String> = Vec::new();
                pointers(&doc, String::new(), &mut p);
                mutate(&doc, node.get(&p).as_str(), value.clone(), false).to_string()
            };
            std::fs::write(dir.join(name), new).unwrap();
            let r = TurboTokenizer::from_dir(&dir).and_then(|t| {
                let ids = t.encode("Hello [laugh] world 👩‍👩‍👧 \0")?;
                t.decode(&ids)
            });
            prop_assert!(
                named(&r, &dir.join(name)) || named(&r, &dir),
                "{name}: {r:?}"
            );
            Ok(())
        },
    );
}

#[test]
fn tokenizer_files_cut_anywhere_are_named_errors() {
    // `tokenizers` 0.22 panicked (`expect("Helper")`) on a file cut inside `decoder`, as a
    // partial download leaves it; every cut of every file is tried
    for (kind, name) in TOKENIZER_FILES.iter().enumerate() {
        let (dir, file) = scratch_copy(kind, "cut");
        let good = std::fs::read(assets().join(name)).unwrap();
        let step = (good.len() / 150).max(1);
        let decoder = good
            .windows(9)
            .position(|w| w == b"\"decoder\"")
            .unwrap_or(0);
        let cuts = (0..good.len())
            .step_by(step)
            .chain(decoder..(decoder + 120).min(good.len()));
        for cut in cuts {
            std::fs::write(&file, &good[..cut]).unwrap();
            assert_eq!(
                load_and_use(kind, &dir, &file),
                Ok(false),
                "{name} cut at {cut}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The Cangjie table beside the multilingual vocabulary, with any entry replaced: the
/// tokenizer loads and converts Chinese, or the error names the table.
#[test]
fn mutated_cangjie_tables() {
    let dirs = [scratch_copy(1, "cangjie")];
    let vocab = &dirs[0].1;
    let table = vocab.with_file_name(chatterbox_text::CANGJIE_FILE);
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(assets().join("mtl").join(chatterbox_text::CANGJIE_FILE)).unwrap(),
    )
    .unwrap();
    let mut p: Vec<String> = Vec::new();
    pointers(&doc, String::new(), &mut p);
    let strategy = (
        any::<prop::sample::Index>(),
        prop::sample::select(hostile_values()),
    );
    property(&dirs, 48, strategy, |(node, value)| {
        let new = mutate(&doc, node.get(&p).as_str(), value, false);
        std::fs::write(&table, new.to_string()).unwrap();
        let r = MTLTokenizer::from_file(vocab)
            .and_then(|t| t.encode("你好，世界。漢字 abc", Some(Language::Chinese)));
        prop_assert!(named(&r, &table), "{r:?}");
        Ok(())
    });
}
