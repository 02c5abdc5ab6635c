//! Allocation of the pipeline's file parsers on hostile input (issue #26, point 12): a
//! counting global allocator records the peak of live heap bytes during each load, which must
//! stay within [`BASE`] plus a small multiple of the file's size. (Memory-mapped weights are
//! not heap and are not counted.) The tests run one at a time under a lock, each load first
//! once unmeasured so that one-time caches (thread pools, backtrace symbols when
//! `RUST_BACKTRACE` is set) are not charged to the file.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test

mod fuzz_support;

use candle_core::{DType, Device};
use chatterbox_pipeline::{ChatterboxTts, ChatterboxTurboTts, Conditionals};
use chatterbox_testkit::{peak, CountingAlloc};
use fuzz_support::{checkpoint_dir, fixture_config, hostile_conds, hostile_safetensors, temp_dir};
use std::path::Path;
use std::sync::Mutex;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

static SERIAL: Mutex<()> = Mutex::new(());

/// Heap bytes allowed whatever the input: twice the largest peak measured here, 17.8 MB
/// (the largest `pre_attention_query_token` accepted, 2^20; loading the tiny english
/// checkpoint itself peaks at 6.8 MB, and every hostile file below 2 MB).
const BASE: usize = 32 << 20;
/// Heap bytes allowed per byte of input: 2.5 x the largest ratio measured, 3.2 (the
/// reference's conds.pt: 78 KB for 24 KB; a million-deep tuple pickle takes 1.0).
const PER_INPUT_BYTE: usize = 8;

fn check(what: &str, input: usize, peak: usize) {
    let bound = BASE + PER_INPUT_BYTE * input;
    println!("{what}: {input} bytes in, peak {peak} bytes");
    assert!(
        peak <= bound,
        "{what}: {peak} bytes for {input} bytes in (bound {bound})"
    );
}

fn load_tts(dir: &Path) -> bool {
    ChatterboxTts::from_dir(dir, &Device::Cpu, DType::F32).is_ok()
}

fn load_turbo(dir: &Path) -> bool {
    ChatterboxTurboTts::from_dir(dir, false, &Device::Cpu, DType::F32).is_ok()
}

#[test]
fn hostile_safetensors_allocate_in_proportion() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = checkpoint_dir("english", "alloc-st");
    let voice = dir.join("voice.safetensors");
    for (what, bytes) in hostile_safetensors() {
        std::fs::write(&voice, &bytes).unwrap();
        let p = peak(|| Conditionals::load(&voice, &Device::Cpu).is_ok());
        check(&format!("voice, {what}"), bytes.len(), p);
        for file in ["ve.safetensors", "t3_cfg.safetensors", "s3gen.safetensors"] {
            let path = dir.join(file);
            let good = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes).unwrap();
            let p = peak(|| load_tts(&dir));
            std::fs::write(&path, good).unwrap();
            check(&format!("{file}, {what}"), bytes.len(), p);
        }
    }
    let p = peak(|| assert!(load_tts(&dir)));
    check("the valid checkpoint", 0, p);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_conds_pt_allocate_in_proportion() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir("alloc-conds");
    let path = dir.join("conds.pt");
    for (what, bytes) in hostile_conds() {
        std::fs::write(&path, &bytes).unwrap();
        let p = peak(|| Conditionals::load(&path, &Device::Cpu).is_ok());
        check(what, bytes.len(), p);
    }
    let real = chatterbox_testkit::fixtures_root().join("pipeline/english_conds.pt");
    let p = peak(|| Conditionals::load(&real, &Device::Cpu).unwrap());
    check(
        "the reference's conds.pt",
        std::fs::metadata(&real).unwrap().len() as usize,
        p,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every number of the configuration (with the fields the fixture leaves at their defaults).
fn config_numbers(cfg: &mut serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, path: String, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => m
                .iter()
                .for_each(|(k, x)| walk(x, format!("{path}/{k}"), out)),
            serde_json::Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(k, x)| walk(x, format!("{path}/{k}"), out)),
            serde_json::Value::Number(_) => out.push(path),
            _ => {}
        }
    }
    let defaults = serde_json::json!({
        "num_mels": 40, "sample_rate": 16000, "speaker_embed_size": 256, "n_fft": 400,
        "hop_size": 160, "win_size": 400, "ve_partial_frames": 160});
    for (k, v) in defaults.as_object().unwrap() {
        cfg["ve"][k] = v.clone();
    }
    let m = &mut cfg["s3gen"]["mel2wav"];
    m["istft_params"] = serde_json::json!({"n_fft": 16, "hop_len": 4});
    m["resblock_kernel_sizes"] = serde_json::json!([3, 7, 11]);
    m["resblock_dilation_sizes"] = serde_json::json!([[1, 3, 5], [1, 3, 5], [1, 3, 5]]);
    cfg["s3gen"]["tokenizer"]["n_audio_ctx"] = serde_json::json!(1500);
    cfg["s3gen"]["tokenizer"]["n_codebook_size"] = serde_json::json!(6561);
    let mut out = Vec::new();
    walk(cfg, String::new(), &mut out);
    out
}

/// The bound `ChatterboxConfig::from_json_file` puts on a field (chatterbox-pipeline
/// config.rs: layer counts 1024, FFT and window lengths 65536, any other integer 2^20).
fn accepted_max(pointer: &str) -> u64 {
    let key = pointer
        .rsplit('/')
        .find(|k| k.parse::<usize>().is_err())
        .unwrap();
    match key {
        "num_hidden_layers" | "n_layer" | "n_blocks" | "num_mid_blocks" | "num_blocks"
        | "num_up_blocks" | "n_audio_layer" => 1024,
        "n_fft" | "win_size" => 1 << 16,
        _ => 1 << 20,
    }
}

#[test]
fn config_sizes_allocate_in_proportion() {
    // A configuration asks for sizes: the largest each field accepts builds (or fails to
    // build) within the bound, and anything larger is refused before a model is built.
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for case in ["english", "turbo"] {
        let dir = checkpoint_dir(case, &format!("alloc-config-{case}"));
        let load = if case == "turbo" {
            load_turbo
        } else {
            load_tts
        };
        assert!(load(&dir));
        let mut cfg = fixture_config(case);
        let fields = config_numbers(&mut cfg);
        let path = dir.join(chatterbox_pipeline::CONFIG_FILE);
        for field in &fields {
            if cfg.pointer(field).unwrap().is_f64() {
                continue; // floats size nothing
            }
            let max = accepted_max(field);
            for value in [max, max + 1, 1_000_000_000_000, u64::MAX] {
                let mut c = cfg.clone();
                *c.pointer_mut(field).unwrap() = value.into();
                let text = c.to_string();
                std::fs::write(&path, &text).unwrap();
                let p = peak(|| load(&dir));
                check(&format!("{case} {field} = {value}"), text.len(), p);
                if value > max {
                    let e = chatterbox_pipeline::ChatterboxConfig::from_json_file(&path);
                    assert!(e.is_err(), "{field} = {value} accepted");
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
