//! Inputs shared by the text fuzz tests: the tokenizer assets, hostile tokenizer files and
//! hostile texts.
#![allow(dead_code)] // each test binary uses a part

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub fn assets() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../parity/fixtures/text/assets")
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "chatterbox-text-fuzz-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Texts the tokenizers must survive: controls, bidi marks, combining-mark storms, emoji
/// sequences, noncharacters, very long runs.
pub fn hostile_texts() -> Vec<String> {
    let controls: String = (0u32..0x20)
        .chain(0x7f..0xa0)
        .filter_map(char::from_u32)
        .collect();
    vec![
        "\0".into(),
        format!("a\0b\0{controls}c"),
        "\u{200e}\u{200f}\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}\u{2066}\u{2067}\u{2068}\u{2069} שלום مرحبا hello".into(),
        "\u{feff}\u{fffe}\u{ffff}\u{fffd}\u{e000}\u{10ffff}\u{e0001}\u{e0041}".into(),
        format!("a{}", "\u{301}".repeat(100_000)),
        format!("{}", "\u{301}".repeat(100_000)),
        "👩‍👩‍👧‍👦🏳️‍🌈🧑🏽‍🚀".repeat(5_000),
        "\u{200d}".repeat(10_000),
        "x".repeat(200_000),
        "[START][STOP][SPACE][UNK]<|endoftext|>[laugh][en][zh]".repeat(1_000),
        "。".repeat(50_000),
        "\u{1100}\u{1161}\u{11a8}\u{d7a3}\u{3131}".repeat(10_000),
        "ǅﬁßİΣ\u{3099}ｶﾞ".repeat(10_000),
        " \t\n\u{3000}\u{1c}".repeat(10_000),
    ]
}

/// Values to put anywhere in a tokenizer file.
pub fn hostile_values() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(0),
        json!(-1),
        json!(4294967295u64),
        json!(4294967296u64),
        json!(18446744073709551615u64),
        json!(1e308),
        json!(0.5),
        json!(2147483648u64),
        json!(""),
        json!("a"),
        json!("[START]"),
        json!("<|endoftext|>"),
        json!("x".repeat(10_000)),
        json!("(a+)+$"),
        json!("["),
        json!([]),
        json!([1, 2]),
        json!(["a b", "c d"]),
        json!({}),
        json!({"type": "BPE"}),
        json!({"type": "Fixed"}),
        json!({"Fixed": 1000000000000u64}),
        json!({"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated", "invert": false}),
        json!({"type": "Replace", "pattern": {"Regex": "(a*)*b"}, "content": "x"}),
        json!({"id": 4294967295u64, "content": "[X]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}),
    ]
}

/// JSON pointers to every node of `v`.
pub fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                pointers(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                )
            }
        }
        // every element of short lists; a sample of long ones (vocabularies, merges)
        Value::Array(a) => {
            let step = (a.len() / 16).max(1);
            for i in (0..a.len()).step_by(step) {
                pointers(&a[i], format!("{at}/{i}"), out)
            }
        }
        _ => {}
    }
}

/// Sets `pointer` (or adds a key next to it) to `v`.
pub fn mutate(doc: &Value, pointer: &str, v: Value, add: bool) -> Value {
    let mut doc = doc.clone();
    if pointer.is_empty() {
        return v;
    }
    if add {
        if let Some(Value::Object(m)) = doc.pointer_mut(pointer) {
            m.insert("fuzz".into(), v);
            return doc;
        }
    }
    *doc.pointer_mut(pointer).unwrap() = v;
    doc
}

pub struct JsonFile {
    pub doc: Value,
    pub pointers: Vec<String>,
}

pub fn json_file(path: &Path) -> JsonFile {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut p = Vec::new();
    pointers(&doc, String::new(), &mut p);
    JsonFile { doc, pointers: p }
}

pub const TOKENIZER_FILES: [&str; 3] = [
    "en/tokenizer.json",
    "mtl/grapheme_mtl_merged_expanded_v1.json",
    "turbo/tokenizer.json",
];

pub fn tokenizer_files() -> &'static [JsonFile; 3] {
    static F: OnceLock<[JsonFile; 3]> = OnceLock::new();
    F.get_or_init(|| TOKENIZER_FILES.map(|f| json_file(&assets().join(f))))
}

/// A scratch copy of the asset directory of tokenizer `kind`.
pub fn scratch_copy(kind: usize, name: &str) -> (PathBuf, PathBuf) {
    let src = assets().join(TOKENIZER_FILES[kind]);
    let dir = scratch(&format!("{name}-{kind}"));
    for e in std::fs::read_dir(src.parent().unwrap()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    let file = dir.join(src.file_name().unwrap());
    (dir, file)
}

/// Tokenizer files (of kind `kind`, an index of [`TOKENIZER_FILES`]) broken in the ways a
/// user's file could be, each with what it is.
pub fn malformed_tokenizer_files(kind: usize) -> Vec<(&'static str, Vec<u8>)> {
    let big_vocab = {
        let mut doc = tokenizer_files()[kind].doc.clone();
        let vocab = doc["model"]["vocab"].as_object_mut().unwrap();
        for i in 0..200_000 {
            vocab.insert(format!("tok{i}"), json!(100_000 + i));
        }
        doc
    };
    let doc = &tokenizer_files()[kind].doc;
    let text = doc.to_string();
    let set = |p: &str, v: Value| mutate(doc, p, v, false).to_string().into_bytes();
    vec![
        ("empty", vec![]),
        ("truncated", text.as_bytes()[..text.len() / 2].to_vec()),
        ("null", b"null".to_vec()),
        ("an empty object", b"{}".to_vec()),
        (
            "not UTF-8",
            [&text.as_bytes()[..40], b"\xff\xfe", &text.as_bytes()[40..]].concat(),
        ),
        (
            "merges of missing tokens",
            set("/model/merges", json!(["zzz qqq", "[START] nope"])),
        ),
        (
            "merges not pairs",
            set("/model/merges", json!(["abc", "a b c", ""])),
        ),
        (
            "vocab ids past u32",
            set(
                "/model/vocab",
                json!({"a": 4294967296u64, "[START]": 0, "[STOP]": 1}),
            ),
        ),
        (
            "vocab ids negative",
            set("/model/vocab", json!({"a": -1, "[START]": 0, "[STOP]": 1})),
        ),
        (
            "duplicate vocab ids",
            set(
                "/model/vocab",
                json!({"a": 0, "b": 0, "[START]": 0, "[STOP]": 0}),
            ),
        ),
        (
            "sparse vocab ids",
            set(
                "/model/vocab",
                json!({"a": 4294967295u64, "[START]": 4000000000u64, "[STOP]": 7}),
            ),
        ),
        (
            "added token id u32::MAX",
            set(
                "/added_tokens",
                json!([{"id": 4294967295u64, "content": "[START]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}]),
            ),
        ),
        ("unknown model", set("/model/type", json!("Quantum"))),
        (
            // `tokenizers` slices this prefix off every merge's second token
            "a subword prefix longer than merged tokens",
            set("/model/continuing_subword_prefix", json!("[START]")),
        ),
        (
            "bad regex",
            set(
                "/pre_tokenizer",
                json!({"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated", "invert": false}),
            ),
        ),
        (
            "backtracking regex",
            set(
                "/normalizer",
                json!({"type": "Replace", "pattern": {"Regex": "(a*)*b"}, "content": "x"}),
            ),
        ),
        (
            "padding to 10^12",
            set(
                "/padding",
                json!({"strategy": {"Fixed": 1000000000000u64}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}),
            ),
        ),
        (
            "truncation stride past max_length",
            set(
                "/truncation",
                json!({"direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 1000000000000u64}),
            ),
        ),
        (
            "200k extra vocabulary entries",
            big_vocab.to_string().into_bytes(),
        ),
    ]
}
