//! Fuzz tests of the files a user hands the pipeline (issue #26, point 12): the checkpoint's
//! safetensors files, the JSON configuration (`--config`, `chatterbox_config.json`) and voice
//! files (`.safetensors`, the reference's `conds.pt`). Every input gives a value or a typed
//! error naming the file, never a panic or a hang. Allocation is measured in `fuzz_alloc.rs`.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test

mod fuzz_support;

use candle_core::{DType, Device, Tensor};
use chatterbox_pipeline::{
    ChatterboxConfig, ChatterboxTts, ChatterboxVc, Conditionals, GenerateOptions, PipelineError,
};
use chatterbox_testkit::fixtures_root;
use fuzz_support::pk::{self, *};
use fuzz_support::{
    checkpoint_dir, fixture_config, fixture_part, hostile_conds, hostile_safetensors, pickle_zip,
    safetensors_file, temp_dir, torch_file,
};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

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

/// Runs a property on `cases` cases drawn from `strategy`, in the scratch directory `dir`
/// (removed afterwards, whatever the outcome).
fn property<S: Strategy>(
    dir: &Path,
    cases: u32,
    strategy: S,
    test: impl Fn(&Path, S::Value) -> Result<(), TestCaseError>,
) {
    let mut runner = TestRunner::new(config(cases));
    let result = runner.run(&strategy, |v| test(dir, v));
    let _ = std::fs::remove_dir_all(dir);
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The weight files of the english checkpoint, in the order `from_dir` reads them.
const WEIGHTS: [&str; 3] = ["ve.safetensors", "t3_cfg.safetensors", "s3gen.safetensors"];

/// An error must name `file` (the error of a value is not checked).
fn names<T>(r: &Result<T, PipelineError>, file: &Path) -> bool {
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    match r {
        Ok(_) => true,
        Err(e) => e.to_string().contains(&name),
    }
}

fn load_tts(dir: &Path) -> Result<ChatterboxTts, PipelineError> {
    ChatterboxTts::from_dir(dir, &Device::Cpu, DType::F32)
}

#[test]
fn hostile_safetensors_weights_are_named_errors() {
    let dir = checkpoint_dir("english", "st-weights");
    for file in WEIGHTS {
        let path = dir.join(file);
        let good = std::fs::read(&path).unwrap();
        for (what, bytes) in hostile_safetensors() {
            std::fs::write(&path, &bytes).unwrap();
            match load_tts(&dir) {
                Err(PipelineError::Checkpoint { path: p, .. }) if p == path => {}
                other => panic!("{file} with {what}: {:?}", other.map(|_| ())),
            }
            if file == "s3gen.safetensors" {
                let r = ChatterboxVc::from_dir(&dir, &Device::Cpu, DType::F32);
                assert!(
                    matches!(r, Err(PipelineError::Checkpoint { .. })),
                    "vc, {what}"
                );
                assert!(names(&r, &path), "vc, {what}");
            }
        }
        std::fs::write(&path, good).unwrap();
    }
    assert!(load_tts(&dir).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_safetensors_voices_are_named_errors() {
    let dir = temp_dir("st-voices");
    let path = dir.join("voice.safetensors");
    for (what, bytes) in hostile_safetensors() {
        std::fs::write(&path, &bytes).unwrap();
        match Conditionals::load(&path, &Device::Cpu) {
            Err(PipelineError::InvalidConditionals { path: p, .. }) if p == path => {}
            other => panic!("voice with {what}: {:?}", other.map(|_| ())),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ways to damage a file's bytes.
#[derive(Debug, Clone)]
enum Damage {
    Flip {
        at: usize,
        bits: u8,
    },
    Truncate {
        at: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    /// Writes a little-endian u64 (a length, an offset, a count) at `at`.
    Word {
        at: usize,
        value: u64,
    },
}

fn damage() -> impl Strategy<Value = Damage> {
    let word = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::from(u32::MAX)),
        Just(u64::MAX),
        Just(1 << 63),
        any::<u64>(),
        0u64..4096,
    ];
    prop_oneof![
        3 => (any::<usize>(), 1u8..=255).prop_map(|(at, bits)| Damage::Flip { at, bits }),
        1 => any::<usize>().prop_map(|at| Damage::Truncate { at }),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Damage::Insert { at, bytes }),
        2 => (any::<usize>(), word).prop_map(|(at, value)| Damage::Word { at, value }),
    ]
}

/// Applies `d`, positions taken modulo `hot` (the part of the file worth damaging: a header,
/// a pickle) or the whole file.
fn apply(bytes: &[u8], d: &Damage, hot: usize) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let hot = hot.clamp(1, b.len().max(1));
    match d {
        Damage::Flip { at, bits } => {
            if !b.is_empty() {
                b[at % hot] ^= bits;
            }
        }
        Damage::Truncate { at } => b.truncate(at % (b.len() + 1)),
        Damage::Insert { at, bytes } => {
            let at = at % (hot + 1).min(b.len() + 1);
            b.splice(at..at, bytes.iter().copied());
        }
        Damage::Word { at, value } => {
            let at = at % hot;
            for (i, x) in value.to_le_bytes().into_iter().enumerate() {
                if let Some(y) = b.get_mut(at + i) {
                    *y = x;
                }
            }
        }
    }
    b
}

fn header_end(st: &[u8]) -> usize {
    8 + u64::from_le_bytes(st[..8].try_into().unwrap()) as usize
}

/// Damaged weight files (mostly in the header) load or fail naming the file.
#[test]
fn damaged_weights_load_or_are_named_errors() {
    let strategy = (0..3usize, damage(), prop::bool::weighted(0.8));
    let dir = checkpoint_dir("english", "st-damage");
    property(&dir, 48, strategy, |dir, (which, d, in_header)| {
        let path = dir.join(WEIGHTS[which]);
        let good = std::fs::read(&path).unwrap();
        let hot = if in_header {
            header_end(&good)
        } else {
            good.len()
        };
        std::fs::write(&path, apply(&good, &d, hot)).unwrap();
        let r = load_tts(dir);
        std::fs::write(&path, &good).unwrap();
        prop_assert!(names(&r, &path), "{:?}", r.err());
        Ok(())
    });
}

/// A tensor of a valid checkpoint changed: gone, reshaped, retyped or emptied.
#[derive(Debug, Clone, Copy)]
enum Edit {
    Remove,
    Reshape,
    Retype(DType),
    Empty,
}

fn edit_tensor(t: &Tensor, e: Edit) -> Option<Tensor> {
    match e {
        Edit::Remove => None,
        Edit::Reshape => Some(if t.rank() > 1 {
            t.flatten_all().unwrap()
        } else {
            t.unsqueeze(0).unwrap()
        }),
        Edit::Retype(d) => Some(t.to_dtype(d).unwrap()),
        Edit::Empty => Some(Tensor::zeros(0, DType::F32, &Device::Cpu).unwrap()),
    }
}

/// Valid-looking checkpoints with one tensor missing or wrong: the load fails naming the file
/// (or succeeds, for a tensor the model does not read or a dtype it converts).
#[test]
fn checkpoints_with_a_wrong_tensor() {
    let retype = prop::sample::select(vec![
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I64,
        DType::U8,
    ]);
    let edit = prop_oneof![
        Just(Edit::Remove),
        Just(Edit::Reshape),
        Just(Edit::Empty),
        retype.prop_map(Edit::Retype)
    ];
    let strategy = (0..3usize, any::<prop::sample::Index>(), edit);
    let dir = checkpoint_dir("english", "st-edit");
    property(&dir, 48, strategy, |dir, (which, pick, edit)| {
        let path = dir.join(WEIGHTS[which]);
        let good = std::fs::read(&path).unwrap();
        let mut tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
        let mut keys: Vec<String> = tensors.keys().cloned().collect();
        keys.sort();
        let key = pick.get(&keys).clone();
        match edit_tensor(&tensors[&key], edit) {
            Some(t) => tensors.insert(key.clone(), t),
            None => tensors.remove(&key),
        };
        candle_core::safetensors::save(&tensors, &path).unwrap();
        let r = load_tts(dir);
        std::fs::write(&path, &good).unwrap();
        prop_assert!(names(&r, &path), "{key} {edit:?}: {:?}", r.err());
        Ok(())
    });
}

#[test]
fn a_missing_or_reshaped_tensor_is_named() {
    let dir = checkpoint_dir("english", "st-missing");
    let path = dir.join("t3_cfg.safetensors");
    let good = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    for edit in [Edit::Remove, Edit::Reshape, Edit::Empty] {
        let mut t = good.clone();
        match edit_tensor(&t["text_emb.weight"], edit) {
            Some(x) => t.insert("text_emb.weight".into(), x),
            None => t.remove("text_emb.weight"),
        };
        candle_core::safetensors::save(&t, &path).unwrap();
        let e = load_tts(&dir).err().unwrap().to_string();
        assert!(
            e.contains("t3_cfg.safetensors") && e.contains("text_emb.weight"),
            "{e}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- configuration files

#[test]
fn malformed_configs_are_named_errors() {
    let dir = temp_dir("config");
    let path = dir.join("config.json");
    let good = fixture_config("english").to_string();
    let with = |pointer: &str, v: &str| {
        let mut c = fixture_config("english");
        *c.pointer_mut(pointer).unwrap() = serde_json::from_str(v).unwrap();
        c.to_string()
    };
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("truncated", good.as_bytes()[..good.len() / 2].to_vec()),
        ("not JSON", b"t3 = 1".to_vec()),
        ("not UTF-8", b"{\"t3\": \"\xff\xfe\"}".to_vec()),
        ("a list", b"[1, 2]".to_vec()),
        ("wrong type", with("/t3", "5").into_bytes()),
        (
            "string for a size",
            with("/t3/max_text_tokens", "\"many\"").into_bytes(),
        ),
        (
            "1e308 tokens",
            with("/t3/max_text_tokens", "1e308").into_bytes(),
        ),
        ("-1 tokens", with("/t3/max_text_tokens", "-1").into_bytes()),
        (
            "2^64 tokens",
            with("/t3/max_text_tokens", "18446744073709551616").into_bytes(),
        ),
        (
            "u64::MAX tokens",
            with("/t3/max_text_tokens", "18446744073709551615").into_bytes(),
        ),
        (
            "10^12 layers",
            with("/t3/backbone/num_hidden_layers", "1000000000000").into_bytes(),
        ),
        (
            "2000 layers",
            with("/t3/backbone/num_hidden_layers", "2000").into_bytes(),
        ),
        (
            "10^12 decoder blocks",
            with("/s3gen/flow/decoder/n_blocks", "1000000000000").into_bytes(),
        ),
        (
            "a 0 kernel",
            with("/s3gen/mel2wav/source_resblock_kernel_sizes/0", "0").into_bytes(),
        ),
        (
            "a huge dilation",
            with(
                "/s3gen/mel2wav/source_resblock_dilation_sizes/0/0",
                "18446744073709551615",
            )
            .into_bytes(),
        ),
        ("nested 100000 deep", deep.into_bytes()),
    ];
    for (what, bytes) in cases {
        std::fs::write(&path, &bytes).unwrap();
        let r = ChatterboxConfig::from_json_file(&path);
        assert!(
            matches!(
                &r,
                Err(PipelineError::InvalidInput { .. } | PipelineError::Io { .. })
            ),
            "{what}: {r:?}"
        );
        assert!(names(&r, &path), "{what}: {r:?}");
    }
    std::fs::write(&path, &good).unwrap();
    assert_eq!(
        ChatterboxConfig::from_json_file(&path).unwrap(),
        serde_json::from_value(fixture_config("english")).unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every number of the configuration, as a path for `serde_json::Value::pointer`.
fn number_paths(v: &serde_json::Value, path: String, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .for_each(|(k, x)| number_paths(x, format!("{path}/{k}"), out)),
        serde_json::Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(k, x)| number_paths(x, format!("{path}/{k}"), out)),
        serde_json::Value::Number(_) => out.push(path),
        _ => {}
    }
}

fn english_number_paths() -> &'static [String] {
    static P: OnceLock<Vec<String>> = OnceLock::new();
    P.get_or_init(|| {
        let mut v = Vec::new();
        number_paths(&fixture_config("english"), String::new(), &mut v);
        v
    })
}

/// A configuration truncated anywhere is refused, naming the file.
#[test]
fn truncated_configs_are_named_errors() {
    property(
        &temp_dir("config-cut"),
        64,
        any::<prop::sample::Index>(),
        |dir, cut| {
            let path = dir.join("c.json");
            let good = fixture_config("english").to_string();
            let cut = cut.index(good.len());
            std::fs::write(&path, &good.as_bytes()[..cut]).unwrap();
            let r = ChatterboxConfig::from_json_file(&path);
            prop_assert!(r.is_err() && names(&r, &path), "{r:?}");
            Ok(())
        },
    );
}

/// Any value in any numeric field of the configuration: the checkpoint loads or fails with an
/// error (extreme values are refused before any model is built).
#[test]
fn any_config_number_loads_or_fails() {
    let values = prop::sample::select(vec![
        "0",
        "1",
        "3",
        "1048576",
        "1048577",
        "65537",
        "1025",
        "1000000000000",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
        "0.5",
        "1e308",
        "-1e308",
    ]);
    let strategy = (any::<prop::sample::Index>(), values);
    let dir = checkpoint_dir("english", "config-values");
    property(&dir, 64, strategy, |dir, (field, value)| {
        let field = field.get(english_number_paths());
        let mut c = fixture_config("english");
        *c.pointer_mut(field).unwrap() = serde_json::from_str(value).unwrap();
        std::fs::write(dir.join(chatterbox_pipeline::CONFIG_FILE), c.to_string()).unwrap();
        // refused naming the configuration, or used to build the models (whose errors name
        // a weight file): no panic either way
        let _ = load_tts(dir);
        Ok(())
    });
}

// ---- voice files

fn english_model() -> &'static ChatterboxTts {
    static M: OnceLock<ChatterboxTts> = OnceLock::new();
    M.get_or_init(|| {
        let dir = checkpoint_dir("english", "voice-model");
        let tts = load_tts(&dir).unwrap();
        // the weights are copied out of the files
        let _ = std::fs::remove_dir_all(&dir);
        tts
    })
}

/// A loaded voice must be usable: `generate` gives audio or an error, never a panic.
fn speak_with(conds: Conditionals) {
    let mut tts = english_model().clone();
    tts.set_conditionals(conds);
    let mut o = GenerateOptions::english().with_seed(3);
    o.max_new_tokens = 4;
    let _ = tts.generate("Hi there.", &o);
}

fn conds_pt() -> Vec<u8> {
    std::fs::read(fixtures_root().join("pipeline/english_conds.pt")).unwrap()
}

#[test]
fn hostile_conds_pt_are_named_errors() {
    let dir = checkpoint_dir("english", "conds-hostile");
    let path = dir.join("conds.pt");
    for (what, bytes) in hostile_conds() {
        std::fs::write(&path, &bytes).unwrap();
        match Conditionals::load(&path, &Device::Cpu) {
            Err(PipelineError::InvalidConditionals { path: p, .. }) if p == path => {}
            other => panic!("{what}: {:?}", other.map(|_| ())),
        }
        // a checkpoint's built-in voice
        let r = load_tts(&dir);
        assert!(r.is_err() && names(&r, &path), "{what}: {:?}", r.err());
        let r = ChatterboxVc::from_dir(&dir, &Device::Cpu, DType::F32);
        assert!(r.is_err() && names(&r, &path), "{what}: {:?}", r.err());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The committed voice (11 entries) with the entry counts of its end records set: the plain
/// one's two to `plain`, the ZIP64 one's to `on_disk` and `total`. A file libFuzzer found
/// (`fuzz/`, target `conds_pt`) hid its pickle from the torch file check with a zero ZIP64
/// count while candle's zip reader still found it, and read a 4 GiB string length from it.
fn zip_counts(plain: u16, on_disk: u64, total: u64) -> Vec<u8> {
    let mut b = conds_pt();
    let at = |b: &[u8], sig: &[u8]| b.windows(4).rposition(|w| w == sig).unwrap();
    let z = at(&b, b"PK\x06\x06");
    b[z + 24..z + 32].copy_from_slice(&on_disk.to_le_bytes());
    b[z + 32..z + 40].copy_from_slice(&total.to_le_bytes());
    let e = at(&b, b"PK\x05\x06");
    b[e + 8..e + 10].copy_from_slice(&plain.to_le_bytes());
    b[e + 10..e + 12].copy_from_slice(&plain.to_le_bytes());
    b
}

#[test]
fn zip_entry_counts_that_hide_entries_are_refused() {
    let dir = temp_dir("zip-count");
    let path = dir.join("conds.pt");
    std::fs::write(&path, zip_counts(11, 11, 11)).unwrap();
    Conditionals::load(&path, &Device::Cpu).unwrap();
    for (plain, on_disk, total, want) in [
        (11, 4107, 0, "disagree on the entry count"),
        (11, 0, 0, "disagree on the entry count"),
        (11, 3, 3, "disagree on the entry count"),
        (10, 10, 10, "holds more than the 10 entries"),
        (0xffff, 0, 0, "holds more than the 0 entries"),
    ] {
        std::fs::write(&path, zip_counts(plain, on_disk, total)).unwrap();
        match Conditionals::load(&path, &Device::Cpu) {
            Err(e @ PipelineError::InvalidConditionals { .. }) => {
                assert!(
                    e.to_string().contains(want),
                    "{plain}/{on_disk}/{total}: {e}"
                )
            }
            other => panic!("{plain}/{on_disk}/{total}: {:?}", other.map(|_| ())),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_torch_checkpoints_are_named_errors() {
    // the multilingual layout: `ve.pt` and `s3gen.pt`, torch files read through the same
    // reader (here with the tiny english weights)
    let dir = checkpoint_dir("english", "pt-hostile");
    std::fs::write(
        dir.join("ve.pt"),
        torch_file(&fixture_part("english", "ve.")),
    )
    .unwrap();
    std::fs::copy(
        fixtures_root().join("text/assets/mtl/grapheme_mtl_merged_expanded_v1.json"),
        dir.join("grapheme_mtl_merged_expanded_v1.json"),
    )
    .unwrap();
    let path = dir.join("s3gen.pt");
    let cfg: ChatterboxConfig = serde_json::from_value(fixture_config("english")).unwrap();
    let load = || {
        chatterbox_pipeline::ChatterboxMultilingualTts::from_dir_with_config(
            &dir,
            &chatterbox_pipeline::MultilingualT3::File("t3_cfg.safetensors".into()),
            &cfg,
            &Device::Cpu,
            DType::F32,
        )
    };
    std::fs::write(&path, torch_file(&fixture_part("english", "s3gen."))).unwrap();
    load().unwrap();
    for (what, bytes) in hostile_conds() {
        std::fs::write(&path, &bytes).unwrap();
        match load() {
            Err(PipelineError::Checkpoint { path: p, .. }) if p == path => {}
            other => panic!("{what}: {:?}", other.map(|_| ())),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Pickle opcodes as candle's reader knows them, with arguments, and some junk.
fn pickle_piece() -> impl Strategy<Value = Vec<u8>> {
    let globals = prop::sample::select(vec![
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_parameter"),
        ("torch._tensor", "_rebuild_from_type_v2"),
        ("torch", "FloatStorage"),
        ("torch", "LongStorage"),
        ("collections", "OrderedDict"),
        ("__torch__", "Module"),
    ]);
    let names = prop::sample::select(vec![
        "storage",
        "cpu",
        "0",
        "t3",
        "gen",
        "speaker_emb",
        "prompt_feat",
    ]);
    prop_oneof![
        4 => prop::sample::select(b")}d]N\x88\x89(RbQtsuae\x85\x86\x87\x81".to_vec()).prop_map(|b| vec![b]),
        2 => (prop::sample::select(b"qhrj".to_vec()), 0u8..6).prop_map(|(op, id)| {
            if op == b'q' || op == b'h' { vec![op, id] } else { vec![op, id, 0, 0, 0] }
        }),
        1 => any::<i32>().prop_map(pk::int),
        1 => prop_oneof![any::<i64>(), -2i64..70].prop_map(pk::long),
        1 => (0u8..12, prop::collection::vec(any::<u8>(), 12)).prop_map(|(n, b)| [vec![0x8a, n], b].concat()),
        1 => "[a-z_.0-9]{0,10}".prop_map(|s| pk::unicode(&s)),
        2 => names.prop_map(pk::unicode),
        2 => globals.prop_map(|(m, c)| pk::global(m, c)),
        1 => (prop::collection::vec(-1i32..40, 0..4), -2i64..20).prop_map(|(size, off)| pk::tensor("FloatStorage", "0", 16, off, &size)),
        1 => any::<u8>().prop_map(|b| vec![b]),
        1 => any::<u32>().prop_map(|n| [vec![b'X'], n.to_le_bytes().to_vec()].concat()),
    ]
}

/// Random pickles in a valid archive: no panic, no hang; never a voice.
#[test]
fn random_pickles_are_errors() {
    let strategy = (prop::collection::vec(pickle_piece(), 0..60), any::<bool>());
    property(
        &temp_dir("conds-random"),
        96,
        strategy,
        |dir, (pieces, wrap)| {
            let path = dir.join("conds.pt");
            let body = pieces.concat();
            let pickle = if wrap {
                dict_of_dicts(&[("t3", vec![("speaker_emb", body)]), ("gen", vec![])])
            } else {
                [PROTO2.to_vec(), body, vec![STOP]].concat()
            };
            std::fs::write(&path, pickle_zip(&pickle)).unwrap();
            let r = Conditionals::load(&path, &Device::Cpu);
            prop_assert!(
                matches!(&r, Err(PipelineError::InvalidConditionals { .. })),
                "{:?}",
                r.map(|_| ())
            );
            Ok(())
        },
    );
}

/// The reference's conds.pt damaged (mostly in its pickle): a voice that can be used, or an
/// error naming the file.
#[test]
fn damaged_conds_pt() {
    let strategy = (damage(), prop::bool::weighted(0.7));
    property(
        &temp_dir("conds-damage"),
        96,
        strategy,
        |dir, (d, in_pickle)| {
            let path = dir.join("conds.pt");
            let good = conds_pt();
            // the pickle is the first entry, right after its 64-byte aligned local header
            let hot = if in_pickle { 64 + 750 } else { good.len() };
            std::fs::write(&path, apply(&good, &d, hot)).unwrap();
            let r = Conditionals::load(&path, &Device::Cpu);
            prop_assert!(names(&r, &path), "{:?}", r.as_ref().err());
            if let Ok(c) = r {
                speak_with(c);
            }
            Ok(())
        },
    );
}

/// A tensor of a voice file: its dtype and shape, or absent.
fn voice_tensor(
    rank: std::ops::Range<usize>,
) -> impl Strategy<Value = Option<(DType, Vec<usize>)>> {
    let dtype = prop::sample::select(vec![
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I64,
        DType::U32,
        DType::U8,
    ]);
    prop::option::weighted(
        0.9,
        (
            dtype,
            prop::collection::vec(
                prop_oneof![3 => 1usize..4, 1 => Just(0usize), 1 => 4usize..90],
                rank,
            ),
        ),
    )
}

fn voice_value(dtype: DType, shape: &[usize], fill: f64) -> Tensor {
    Tensor::full(fill, shape, &Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// Voice files of any shapes and dtypes: a voice `generate` can use (or refuse), or an error
/// naming the file.
#[test]
fn voice_files_of_any_shape() {
    let fill = prop::sample::select(vec![0.0, 1.0, -1.0, 6561.0, 1e30, f64::NAN, f64::INFINITY]);
    let tensors = [
        voice_tensor(0..4),
        voice_tensor(0..4),
        voice_tensor(0..3),
        voice_tensor(0..4),
        voice_tensor(0..5),
        voice_tensor(0..4),
    ];
    let names = [
        "t3.speaker_emb",
        "t3.cond_prompt_speech_tokens",
        "t3.emotion_adv",
        "gen.prompt_token",
        "gen.prompt_feat",
        "gen.embedding",
    ];
    property(
        &temp_dir("voice-shapes"),
        64,
        (tensors, fill),
        |dir, (tensors, fill)| {
            let path = dir.join("voice.safetensors");
            let mut map = HashMap::new();
            for (name, t) in names.iter().zip(tensors) {
                if let Some((dtype, shape)) = t {
                    map.insert(name.to_string(), voice_value(dtype, &shape, fill));
                }
            }
            candle_core::safetensors::save(&map, &path).unwrap();
            let r = Conditionals::load(&path, &Device::Cpu);
            prop_assert!(
                matches!(&r, Ok(_) | Err(PipelineError::InvalidConditionals { .. })),
                "{:?}",
                r.as_ref().err()
            );
            if let Ok(c) = r {
                speak_with(c);
            }
            Ok(())
        },
    );
}

#[test]
fn voice_files_with_empty_tensors_of_huge_dims() {
    // safetensors allows `[0, 2^62]`: no data, dims that overflow any arithmetic on them
    let dir = temp_dir("voice-huge-dims");
    let path = dir.join("voice.safetensors");
    let names = [
        "t3.speaker_emb",
        "t3.cond_prompt_speech_tokens",
        "t3.emotion_adv",
        "gen.prompt_token",
        "gen.prompt_feat",
        "gen.embedding",
    ];
    for shape in [
        "[0,4611686018427387904]",
        "[9223372036854775807,0]",
        "[1,0,9223372036854775807]",
        "[0]",
        "[]",
    ] {
        for huge in names {
            let mut header = String::from("{");
            let mut data = Vec::new();
            for (i, name) in names.iter().enumerate() {
                let (dims, bytes) = if *name == huge {
                    (shape.to_string(), if shape == "[]" { 4 } else { 0 })
                } else {
                    match *name {
                        "t3.speaker_emb" => ("[1,256]".to_string(), 1024),
                        "gen.prompt_feat" => ("[1,20,80]".to_string(), 6400),
                        "gen.embedding" => ("[1,192]".to_string(), 768),
                        "t3.emotion_adv" => ("[1,1,1]".to_string(), 4),
                        _ => ("[1,10]".to_string(), 40),
                    }
                };
                let dtype = if name.contains("token") { "U32" } else { "F32" };
                let sep = if i == 0 { "" } else { "," };
                header += &format!(
                    r#"{sep}"{name}":{{"dtype":"{dtype}","shape":{dims},"data_offsets":[{},{}]}}"#,
                    data.len(),
                    data.len() + bytes
                );
                data.extend(std::iter::repeat_n(0u8, bytes));
            }
            header += "}";
            std::fs::write(&path, safetensors_file(&header, &data)).unwrap();
            let r = Conditionals::load(&path, &Device::Cpu);
            assert!(
                matches!(&r, Ok(_) | Err(PipelineError::InvalidConditionals { .. })),
                "{huge} {shape}: {:?}",
                r.as_ref().err()
            );
            if let Ok(c) = r {
                speak_with(c);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn voice_files_with_valid_shapes_speak() {
    // the shapes the model expects, in every dtype a file may hold them in
    let dir = temp_dir("voice-valid");
    let path = dir.join("voice.safetensors");
    // (tokens must be integers: S3Gen refuses float prompt tokens)
    for (dtype, tokens) in [
        (DType::F32, DType::U32),
        (DType::F16, DType::I64),
        (DType::BF16, DType::U8),
        (DType::F64, DType::I64),
    ] {
        let map: HashMap<String, Tensor> = [
            ("t3.speaker_emb", voice_value(dtype, &[1, 256], 1.0)),
            (
                "t3.cond_prompt_speech_tokens",
                voice_value(tokens, &[1, 10], 5.0),
            ),
            ("t3.emotion_adv", voice_value(dtype, &[1, 1, 1], 0.0)),
            ("gen.prompt_token", voice_value(tokens, &[1, 10], 5.0)),
            ("gen.prompt_feat", voice_value(dtype, &[1, 20, 80], 0.0)),
            ("gen.embedding", voice_value(dtype, &[1, 192], 1.0)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        candle_core::safetensors::save(&map, &path).unwrap();
        let c = Conditionals::load(&path, &Device::Cpu).unwrap();
        let mut tts = english_model().clone();
        tts.set_conditionals(c);
        let mut o = GenerateOptions::english().with_seed(3);
        o.max_new_tokens = 4;
        tts.generate("Hi there.", &o).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
