//! Allocation of the tokenizer loaders and of encoding on hostile input (issue #26, point
//! 12): a counting global allocator records the peak of live heap bytes during each call,
//! which must stay within [`BASE`] plus a small multiple of the input's size. The tests run
//! one at a time under a lock, each call first once unmeasured so that one-time caches are not
//! charged to the input.
#![allow(clippy::unwrap_used, clippy::panic)] // a failing unwrap is a failing test

mod fuzz_support;

use chatterbox_testkit::{peak, CountingAlloc};
use chatterbox_text::{EnTokenizer, Language, MTLTokenizer, TextFrontend, TurboTokenizer, Variant};
use fuzz_support::{
    assets, hostile_texts, malformed_tokenizer_files, scratch_copy, TOKENIZER_FILES,
};
use std::sync::Mutex;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

static SERIAL: Mutex<()> = Mutex::new(());

/// Heap bytes allowed whatever the input: every small hostile file and text here peaks below
/// 1 MB (measured); 16 MiB leaves room for other allocators and library versions.
const BASE: usize = 16 << 20;
/// Heap bytes allowed per byte of a tokenizer file: 2 x the largest ratio measured, 15.3 (a
/// `tokenizer.json` with 200k more vocabulary entries: 57 MB for 3.7 MB).
const PER_FILE_BYTE: usize = 32;
/// Heap bytes allowed per byte of text: 1.5 x the largest ratio measured, 175 (Turbo on 150 KB
/// of CJK punctuation: every 3-byte character a token, and `tokenizers` keeps about 500 bytes
/// per token in its `Encoding`).
const PER_TEXT_BYTE: usize = 256;

fn check(what: &str, input: usize, per_byte: usize, peak: usize) {
    let bound = BASE + per_byte * input;
    println!("{what}: {input} bytes in, peak {peak} bytes");
    assert!(
        peak <= bound,
        "{what}: {peak} bytes for {input} bytes in (bound {bound})"
    );
}

#[test]
fn hostile_tokenizer_files_allocate_in_proportion() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (kind, name) in TOKENIZER_FILES.iter().enumerate() {
        let (dir, file) = scratch_copy(kind, "alloc");
        for (what, bytes) in malformed_tokenizer_files(kind) {
            std::fs::write(&file, &bytes).unwrap();
            let p = peak(|| match kind {
                0 => EnTokenizer::from_file(&file).and_then(|t| t.encode("Hello world")),
                1 => MTLTokenizer::from_file(&file).and_then(|t| t.encode("Hello world", None)),
                _ => TurboTokenizer::from_dir(&dir).and_then(|t| t.encode("Hello world")),
            });
            check(&format!("{name} {what}"), bytes.len(), PER_FILE_BYTE, p);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn hostile_text_allocates_in_proportion() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let frontends = [
        TextFrontend::from_checkpoint_dir(assets().join("en"), Variant::English).unwrap(),
        TextFrontend::from_checkpoint_dir(assets().join("mtl"), Variant::Multilingual).unwrap(),
        TextFrontend::from_checkpoint_dir(assets().join("turbo"), Variant::Turbo).unwrap(),
    ];
    for text in hostile_texts() {
        let short: String = text.chars().take(12).collect();
        for fe in &frontends {
            for lang in [None, Some(Language::Japanese), Some(Language::Korean)] {
                if lang.is_some() && fe.variant() != Variant::Multilingual {
                    continue;
                }
                let p = peak(|| fe.text_tokens(&text, lang));
                let what = format!("{:?} {lang:?} {short:?}", fe.variant());
                check(&what, text.len(), PER_TEXT_BYTE, p);
            }
        }
    }
}
