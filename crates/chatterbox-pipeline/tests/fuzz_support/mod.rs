//! Builders shared by the fuzz tests: checkpoint directories from the tiny parity fixtures,
//! raw safetensors files, stored zip archives and torch pickles; and the checks of sentence
//! and word timings the caption tests share.
#![allow(dead_code)] // each test binary uses a part

use candle_core::{Device, Tensor};
use chatterbox_pipeline::{SentenceTiming, WordTiming};
use chatterbox_testkit::fixtures_root;
use pk::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Checks the timings of sentences `texts` inside `total` samples of audio: in order, each
/// after the one before (meeting or separated by pauses); each sentence's words are its
/// written words once, in order, meeting, from its start to its end. Returns every word, for
/// the caller's own checks.
pub fn check_sentence_timings<'a>(
    captions: &'a [SentenceTiming],
    texts: &[&str],
    total: usize,
) -> Vec<&'a WordTiming> {
    assert_eq!(captions.len(), texts.len());
    let mut last_end = 0;
    for (i, (c, text)) in captions.iter().zip(texts).enumerate() {
        assert_eq!(c.sentence, i);
        assert_eq!(c.text.trim(), *text);
        assert!(c.start_sample >= last_end && c.start_sample < c.end_sample);
        assert!(c.end_sample <= total);
        let words: Vec<&str> = c.words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(words, text.split_whitespace().collect::<Vec<_>>());
        let mut at = c.start_sample;
        for w in &c.words {
            assert_eq!(w.start_sample, at, "{}: words meet", w.text);
            assert!(w.end_sample >= w.start_sample, "{}: monotonic", w.text);
            at = w.end_sample;
        }
        assert_eq!(at, c.end_sample, "the last word ends the sentence");
        last_end = c.end_sample;
    }
    captions.iter().flat_map(|c| &c.words).collect()
}

pub fn pipeline_fixture(case: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(
        fixtures_root().join(format!("pipeline/{case}.safetensors")),
        &Device::Cpu,
    )
    .unwrap()
}

/// The english fixture's 24 kHz reference clip: the tests' voice.
pub fn ref_samples() -> Vec<f32> {
    pipeline_fixture("english")["in.ref_24k"]
        .to_dtype(candle_core::DType::F32)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
}

/// [`ref_samples`] repeated to at least `min_samples`, as 24 kHz audio.
pub fn ref_clip(min_samples: usize) -> chatterbox_pipeline::Audio {
    let wav = ref_samples();
    let mut long = wav.clone();
    while long.len() < min_samples {
        long.extend_from_slice(&wav);
    }
    chatterbox_pipeline::Audio::new(long, 24_000)
}

/// The english case's tiny checkpoint as the directory `name` and the model loaded from it,
/// speaking in [`ref_clip`]'s voice: where most behaviour tests start.
pub fn english_model(name: &str) -> (chatterbox_pipeline::ChatterboxTts, PathBuf) {
    let dir = checkpoint_dir("english", name);
    let mut tts = chatterbox_pipeline::ChatterboxTts::from_dir(
        &dir,
        &Device::Cpu,
        chatterbox_pipeline::DType::F32,
    )
    .unwrap();
    tts.prepare_conditionals_from_audio(&ref_clip(0), 0.5)
        .unwrap();
    (tts, dir)
}

/// The `chatterbox` part of a pipeline fixture's metadata: the tiny model's configuration.
pub fn fixture_config(case: &str) -> serde_json::Value {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures_root().join(format!("pipeline/{case}.json"))).unwrap(),
    )
    .unwrap();
    meta["config"]["chatterbox"].clone()
}

/// A fresh, empty directory for one caller. Unique per call, not only per process: the tests
/// of one binary run in parallel, and two that asked for the same `name` (e.g. `stream.rs`'s
/// `english()`) would otherwise rewrite or delete each other's checkpoint mid-load.
pub fn temp_dir(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "chatterbox-pipeline-fuzz-{}-{n}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_part(t: &HashMap<String, Tensor>, prefix: &str, path: &Path) {
    let part: HashMap<String, Tensor> = t
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
        .collect();
    candle_core::safetensors::save(&part, path).unwrap();
}

/// The tiny english (or turbo) fixture as a checkpoint directory in the hub layout, with its
/// configuration in `chatterbox_config.json`. (No `conds.pt`: no built-in voice.)
pub fn checkpoint_dir(case: &str, name: &str) -> PathBuf {
    let dir = temp_dir(name);
    let t = pipeline_fixture(case);
    let text = fixtures_root().join("text/assets");
    if case == "turbo" {
        write_part(&t, "t3.", &dir.join("t3_turbo_v1.safetensors"));
        // the turbo fixture holds only the tensors meanflow adds to the english S3Gen
        let mut s3gen = pipeline_fixture("english");
        s3gen.extend(t.iter().map(|(k, v)| (k.clone(), v.clone())));
        write_part(&s3gen, "s3gen.", &dir.join("s3gen_meanflow.safetensors"));
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(text.join("turbo").join(f), dir.join(f)).unwrap();
        }
    } else {
        write_part(&t, "t3.", &dir.join("t3_cfg.safetensors"));
        write_part(&t, "s3gen.", &dir.join("s3gen.safetensors"));
        std::fs::copy(text.join("en/tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    }
    write_part(&t, "ve.", &dir.join("ve.safetensors"));
    std::fs::write(
        dir.join(chatterbox_pipeline::CONFIG_FILE),
        fixture_config(case).to_string(),
    )
    .unwrap();
    dir
}

/// A safetensors file: the 8-byte little-endian header length, the header, the data.
pub fn safetensors_raw(header_len: u64, header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut v = header_len.to_le_bytes().to_vec();
    v.extend_from_slice(header);
    v.extend_from_slice(data);
    v
}

/// A well-formed safetensors file of the given header JSON and data.
pub fn safetensors_file(header: &str, data: &[u8]) -> Vec<u8> {
    safetensors_raw(header.len() as u64, header.as_bytes(), data)
}

/// A zip archive of stored (uncompressed) entries, as `torch.save` writes them.
pub fn stored_zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let crc = |d: &[u8]| {
        let mut c = 0xffff_ffffu32;
        for &b in d {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0xedb8_8320
                } else {
                    c >> 1
                };
            }
        }
        !c
    };
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let offset = out.len() as u32;
        let (n, len, c) = (name.len() as u16, data.len() as u32, crc(data));
        let fields = |v: &mut Vec<u8>| {
            v.extend_from_slice(&0u16.to_le_bytes()); // flags
            v.extend_from_slice(&0u16.to_le_bytes()); // method: stored
            v.extend_from_slice(&0u32.to_le_bytes()); // time, date
            v.extend_from_slice(&c.to_le_bytes());
            v.extend_from_slice(&len.to_le_bytes());
            v.extend_from_slice(&len.to_le_bytes());
            v.extend_from_slice(&n.to_le_bytes());
            v.extend_from_slice(&0u16.to_le_bytes()); // extra
        };
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        out.extend_from_slice(&20u16.to_le_bytes());
        fields(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // made by
        central.extend_from_slice(&20u16.to_le_bytes()); // needed
        fields(&mut central);
        central.extend_from_slice(&[0; 6]); // comment length, disk, internal attributes
        central.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // disks
    let count = entries.len() as u16;
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// Pickle protocol-2 opcodes, written by hand.
pub mod pk {
    pub const PROTO2: &[u8] = &[0x80, 2];
    pub const MARK: u8 = b'(';
    pub const EMPTY_DICT: u8 = b'}';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const TUPLE: u8 = b't';
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const REDUCE: u8 = b'R';
    pub const SETITEM: u8 = b's';
    pub const SETITEMS: u8 = b'u';
    pub const BINPERSID: u8 = b'Q';
    pub const NONE: u8 = b'N';
    pub const STOP: u8 = b'.';
    pub const NEWFALSE: u8 = 0x89;

    pub fn unicode(s: &str) -> Vec<u8> {
        let mut v = vec![b'X'];
        v.extend_from_slice(&(s.len() as u32).to_le_bytes());
        v.extend_from_slice(s.as_bytes());
        v
    }

    pub fn int(i: i32) -> Vec<u8> {
        let mut v = vec![b'J'];
        v.extend_from_slice(&i.to_le_bytes());
        v
    }

    pub fn long(i: i64) -> Vec<u8> {
        let mut v = vec![0x8a, 8];
        v.extend_from_slice(&i.to_le_bytes());
        v
    }

    pub fn global(module: &str, name: &str) -> Vec<u8> {
        format!("c{module}\n{name}\n").into_bytes()
    }

    pub fn tuple(items: &[Vec<u8>]) -> Vec<u8> {
        let mut v = vec![MARK];
        for i in items {
            v.extend_from_slice(i);
        }
        v.push(TUPLE);
        v
    }

    /// `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())`
    /// with `storage` the persistent id `("storage", torch.<class>, key, "cpu", numel)`.
    pub fn tensor(class: &str, key: &str, numel: i64, offset: i64, size: &[i32]) -> Vec<u8> {
        let mut stride = vec![1i32; size.len()];
        for i in (0..size.len().saturating_sub(1)).rev() {
            stride[i] = stride[i + 1].saturating_mul(size[i + 1]);
        }
        let storage = tuple(&[
            unicode("storage"),
            global("torch", class),
            unicode(key),
            unicode("cpu"),
            long(numel),
        ]);
        let mut persistent = storage;
        persistent.push(BINPERSID);
        let ints = |xs: &[i32]| tuple(&xs.iter().map(|&x| int(x)).collect::<Vec<_>>());
        let mut v = global("torch._utils", "_rebuild_tensor_v2");
        let mut args = vec![MARK];
        args.extend(persistent);
        args.extend(long(offset));
        args.extend(ints(size));
        args.extend(ints(&stride));
        args.push(NEWFALSE);
        args.extend(global("collections", "OrderedDict"));
        args.push(EMPTY_TUPLE);
        args.push(REDUCE);
        args.push(TUPLE);
        v.extend(args);
        v.push(REDUCE);
        v
    }

    /// Named pickled values: `(name, pickle bytes of the value)`.
    pub type Items<'a> = Vec<(&'a str, Vec<u8>)>;

    /// `{group: {name: value, ...}, ...}` then STOP.
    pub fn dict_of_dicts(groups: &[(&str, Items)]) -> Vec<u8> {
        let mut v = PROTO2.to_vec();
        v.push(EMPTY_DICT);
        for (g, items) in groups {
            v.extend(unicode(g));
            v.push(EMPTY_DICT);
            for (k, val) in items {
                v.extend(unicode(k));
                v.extend_from_slice(val);
                v.push(SETITEM);
            }
            v.push(SETITEM);
        }
        v.push(STOP);
        v
    }
}

/// A `torch.save`d state dict of f32 tensors, as candle's reader and `torch.load` read it.
pub fn torch_file(tensors: &HashMap<String, Tensor>) -> Vec<u8> {
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut pickle = pk::PROTO2.to_vec();
    pickle.push(pk::EMPTY_DICT);
    let mut storages = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let t = tensors[*name].to_dtype(candle_core::DType::F32).unwrap();
        let dims: Vec<i32> = t.dims().iter().map(|&d| d as i32).collect();
        let data: Vec<u8> = t
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        pickle.extend(pk::unicode(name));
        pickle.extend(pk::tensor(
            "FloatStorage",
            &i.to_string(),
            t.elem_count() as i64,
            0,
            &dims,
        ));
        pickle.push(pk::SETITEM);
        storages.push((format!("archive/data/{i}"), data));
    }
    pickle.push(pk::STOP);
    let mut entries: Vec<(&str, &[u8])> = vec![("archive/data.pkl", &pickle)];
    entries.extend(storages.iter().map(|(n, d)| (n.as_str(), d.as_slice())));
    stored_zip(&entries)
}

/// The part of a fixture under `prefix`, the prefix removed.
pub fn fixture_part(case: &str, prefix: &str) -> HashMap<String, Tensor> {
    pipeline_fixture(case)
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v)))
        .collect()
}

/// Hostile safetensors files: the header length, the header, the offsets, the data.
pub fn hostile_safetensors() -> Vec<(&'static str, Vec<u8>)> {
    let f32_tensor = |offsets: &str| {
        format!(r#"{{"a":{{"dtype":"F32","shape":[2],"data_offsets":{offsets}}}}}"#)
    };
    vec![
        ("empty file", vec![]),
        ("shorter than the length prefix", vec![1, 2, 3]),
        ("header length 2^63", safetensors_raw(1 << 63, b"{}", b"")),
        (
            "header length u64::MAX",
            safetensors_raw(u64::MAX, b"{}", b""),
        ),
        (
            "header longer than the file",
            safetensors_raw(1000, b"{}", b""),
        ),
        ("header length 0", safetensors_raw(0, b"", b"")),
        ("header not JSON", safetensors_file("this is not json", b"")),
        (
            "header not UTF-8",
            safetensors_raw(4, b"\xff\xfe\xc0\x80", b""),
        ),
        ("header a JSON list", safetensors_file("[1, 2, 3]", b"")),
        (
            "unknown dtype",
            safetensors_file(
                r#"{"a":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}}"#,
                b"x",
            ),
        ),
        (
            "dtype not a string",
            safetensors_file(
                r#"{"a":{"dtype":7,"shape":[1],"data_offsets":[0,1]}}"#,
                b"x",
            ),
        ),
        (
            "shape product overflows usize",
            safetensors_file(
                r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}}"#,
                &[0; 4],
            ),
        ),
        (
            "negative dimension",
            safetensors_file(
                r#"{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
                &[0; 4],
            ),
        ),
        (
            "offsets past the end",
            safetensors_file(&f32_tensor("[0,400]"), &[0; 8]),
        ),
        (
            "offsets reversed",
            safetensors_file(&f32_tensor("[8,0]"), &[0; 8]),
        ),
        (
            "offsets u64::MAX",
            safetensors_file(&f32_tensor("[0,18446744073709551615]"), &[0; 8]),
        ),
        (
            "offsets and shape disagree",
            safetensors_file(&f32_tensor("[0,4]"), &[0; 4]),
        ),
        (
            "overlapping tensors",
            safetensors_file(
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
                &[0; 12],
            ),
        ),
        (
            "truncated data",
            safetensors_file(&f32_tensor("[0,8]"), &[0; 5]),
        ),
        (
            "trailing data",
            safetensors_file(&f32_tensor("[0,8]"), &[0; 20]),
        ),
        (
            "zero-size tensor of huge dims",
            safetensors_file(
                r#"{"a":{"dtype":"F32","shape":[0,4611686018427387904],"data_offsets":[0,0]}}"#,
                b"",
            ),
        ),
        (
            "no tensors",
            safetensors_file(r#"{"__metadata__":{"k":"v"}}"#, b""),
        ),
    ]
}

/// Stored entries of a pickle and one 64-byte storage `a/data/0`.
pub fn pickle_zip(pickle: &[u8]) -> Vec<u8> {
    stored_zip(&[("a/data.pkl", pickle), ("a/data/0", &[0u8; 64])])
}

pub fn conds_with(items: Vec<(&str, Vec<u8>)>) -> Vec<u8> {
    pickle_zip(&dict_of_dicts(&[("t3", items), ("gen", vec![])]))
}

/// conds.pt files that crashed candle's pickle reader (candle-core 0.11) before
/// `check_torch_file`, each kept as a regression case, and other malformed archives.
pub fn hostile_conds() -> Vec<(&'static str, Vec<u8>)> {
    let reduce = |callable: Vec<u8>, args: Vec<u8>| [callable, args, vec![REDUCE]].concat();
    let rebuild = || global("torch._utils", "_rebuild_tensor_v2");
    let short_storage = {
        let mut p = tuple(&[unicode("storage")]);
        p.push(BINPERSID);
        reduce(
            rebuild(),
            tuple(&[p, int(0), tuple(&[int(1)]), tuple(&[int(1)])]),
        )
    };
    let memo_bomb = {
        let mut p = PROTO2.to_vec();
        p.extend([NONE, b'q', 0]);
        for _ in 0..40 {
            p.extend([b'h', 0, b'h', 0, TUPLE2, b'q', 0]);
        }
        [p, vec![STOP]].concat()
    };
    let huge_string = [
        PROTO2.to_vec(),
        vec![b'X'],
        0xffff_fff0u32.to_le_bytes().to_vec(),
        b"abc".to_vec(),
    ]
    .concat();
    let long1 = [PROTO2.to_vec(), vec![0x8a, 40], vec![1; 40], vec![STOP]].concat();
    let deep = [
        PROTO2.to_vec(),
        vec![NONE],
        vec![TUPLE1; 100_000],
        vec![STOP],
    ]
    .concat();
    let t = |size: &[i32], offset: i64| {
        vec![("speaker_emb", tensor("FloatStorage", "0", 16, offset, size))]
    };
    vec![
        (
            "random bytes",
            (0..5000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
        ),
        ("empty file", vec![]),
        (
            "a zip without data.pkl",
            stored_zip(&[("a/version", b"3\n")]),
        ),
        ("an empty zip", stored_zip(&[])),
        ("data.pkl not a pickle", pickle_zip(b"\x80\x02garbage")),
        ("data.pkl empty", pickle_zip(b"")),
        ("a pickle of None", pickle_zip(&[0x80, 2, NONE, STOP])),
        ("no gen dict", pickle_zip(&dict_of_dicts(&[("t3", vec![])]))),
        (
            "rebuild args too short",
            conds_with(vec![(
                "speaker_emb",
                reduce(rebuild(), tuple(&[int(1), int(2)])),
            )]),
        ),
        (
            "rebuild_from_type_v2 without args",
            conds_with(vec![(
                "speaker_emb",
                reduce(
                    global("torch._tensor", "_rebuild_from_type_v2"),
                    vec![EMPTY_TUPLE],
                ),
            )]),
        ),
        (
            "rebuild_parameter without args",
            conds_with(vec![(
                "speaker_emb",
                reduce(
                    global("torch._utils", "_rebuild_parameter"),
                    vec![EMPTY_TUPLE],
                ),
            )]),
        ),
        (
            "storage tuple too short",
            conds_with(vec![("speaker_emb", short_storage)]),
        ),
        ("memo bomb", pickle_zip(&memo_bomb)),
        ("a 4 GiB string", pickle_zip(&huge_string)),
        ("LONG1 of 40 bytes", pickle_zip(&long1)),
        ("100000 nested tuples", pickle_zip(&deep)),
        (
            "shape product overflows",
            conds_with(t(&[i32::MAX, i32::MAX, i32::MAX], 0)),
        ),
        ("4 GiB tensor", conds_with(t(&[1 << 30], 0))),
        ("negative offset", conds_with(t(&[2], -1))),
        ("offset past the storage", conds_with(t(&[2], i64::MAX / 2))),
        (
            "tensor without storage",
            pickle_zip(&dict_of_dicts(&[
                (
                    "t3",
                    vec![("speaker_emb", tensor("FloatStorage", "9", 4, 0, &[4]))],
                ),
                ("gen", vec![]),
            ])),
        ),
        (
            "unsupported storage type",
            conds_with(vec![("speaker_emb", tensor("IntStorage", "0", 4, 0, &[4]))]),
        ),
        ("a deflated data.pkl", {
            let mut z = pickle_zip(&[0x80, 2, NONE, STOP]);
            z[8] = 8; // method 8 in the local header
            let cd = z.windows(4).position(|w| w == [0x50, 0x4b, 1, 2]).unwrap();
            z[cd + 10] = 8; // and in the central directory
            z
        }),
    ]
}
