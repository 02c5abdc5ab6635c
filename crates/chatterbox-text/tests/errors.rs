//! Typed errors for bad input: unknown language ids, tokenizer files without the required
//! tokens, missing or malformed files, text that normalises to nothing.
use chatterbox_text::{
    CangjieTable, EnTokenizer, Language, MTLTokenizer, SentenceChunker, TextError, TextFrontend,
    TurboTokenizer, Variant, CANGJIE_FILE,
};

#[cfg(test)]
mod support {
    use std::path::{Path, PathBuf};

    pub fn assets() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../parity/fixtures/text/assets")
    }

    pub fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("chatterbox-text-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub fn copy(from: &Path, to: &Path) {
        std::fs::copy(from, to).unwrap();
    }
}
use support::{assets, copy, scratch};

#[test]
fn unknown_language() {
    let err = Language::parse("klingon").unwrap_err();
    assert!(matches!(&err, TextError::UnknownLanguage { language, .. } if language == "klingon"));
    assert!(err.to_string().contains("supported: ar, da, de"));
    assert!("pt-br".parse::<Language>().is_err());
}

#[test]
fn missing_special_tokens() {
    for (file, token) in [("no_start.json", "[START]"), ("no_stop.json", "[STOP]")] {
        let path = assets().join("bad").join(file);
        match EnTokenizer::from_file(&path) {
            Err(TextError::MissingSpecialToken { path: p, token: t }) => {
                assert_eq!(p, path);
                assert_eq!(t, token);
            }
            other => panic!("expected MissingSpecialToken, got {other:?}"),
        }
        assert!(matches!(
            MTLTokenizer::from_file(&path),
            Err(TextError::MissingSpecialToken { .. })
        ));
    }
    // a GPT-2 tokenizer without <|endoftext|>
    let dir = scratch("turbo-no-eos");
    let src = assets().join("turbo_legacy");
    for f in ["merges.txt", "added_tokens.json"] {
        copy(&src.join(f), &dir.join(f));
    }
    let vocab: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(src.join("vocab.json")).unwrap()).unwrap();
    let mut vocab = vocab;
    vocab.remove("<|endoftext|>");
    std::fs::write(
        dir.join("vocab.json"),
        serde_json::to_string(&vocab).unwrap(),
    )
    .unwrap();
    // added tokens now start one id lower than added_tokens.json says
    assert!(matches!(
        TurboTokenizer::from_dir(&dir),
        Err(TextError::InvalidData { .. })
    ));
    std::fs::remove_file(dir.join("added_tokens.json")).unwrap();
    match TurboTokenizer::from_dir(&dir) {
        Err(TextError::MissingSpecialToken { token, .. }) => assert_eq!(token, "<|endoftext|>"),
        other => panic!("expected MissingSpecialToken, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn empty_text() {
    let fe = TextFrontend::from_checkpoint_dir(assets().join("en"), Variant::English).unwrap();
    for text in ["", " ", "\t\n\u{3000}\u{1c}"] {
        assert!(matches!(
            fe.text_tokens(text, None),
            Err(TextError::EmptyText { .. })
        ));
    }
    let ids = fe.text_tokens("hello there", None).unwrap();
    assert!(!ids.is_empty());
    assert_eq!(fe.sot_eot(), Some((255, 0)));
}

#[test]
fn missing_and_malformed_files() {
    let dir = scratch("files");
    assert!(matches!(
        EnTokenizer::from_file(dir.join("tokenizer.json")),
        Err(TextError::Io { .. })
    ));
    assert!(matches!(
        TurboTokenizer::from_dir(&dir),
        Err(TextError::Io { .. })
    ));
    std::fs::write(dir.join("tokenizer.json"), "{ not json").unwrap();
    assert!(matches!(
        EnTokenizer::from_file(dir.join("tokenizer.json")),
        Err(TextError::Tokenizer { .. })
    ));
    // a malformed Cangjie table beside a good vocabulary
    copy(
        &assets().join("mtl/grapheme_mtl_merged_expanded_v1.json"),
        &dir.join(MTLTokenizer::VOCAB_FILE),
    );
    std::fs::write(dir.join(CANGJIE_FILE), r#"["你\tonf", "no tab here"]"#).unwrap();
    match MTLTokenizer::from_file(dir.join(MTLTokenizer::VOCAB_FILE)) {
        Err(TextError::InvalidData { what, message, .. }) => {
            assert_eq!(what, "Cangjie table");
            assert!(message.contains("entry 1"), "{message}");
        }
        other => panic!("expected InvalidData, got {other:?}"),
    }
    // without the table the tokenizer loads (the reference logs a warning)
    std::fs::remove_file(dir.join(CANGJIE_FILE)).unwrap();
    let mtl = MTLTokenizer::from_file(dir.join(MTLTokenizer::VOCAB_FILE)).unwrap();
    assert!(mtl.cangjie_converter().table().is_empty());
    assert!(CangjieTable::from_file(dir.join("absent.json")).is_err());
    assert!(matches!(
        SentenceChunker::new(0),
        Err(TextError::ZeroBudget)
    ));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn frontends_load_from_checkpoint_dirs() {
    let mtl =
        TextFrontend::from_checkpoint_dir(assets().join("mtl"), Variant::Multilingual).unwrap();
    let fr = mtl
        .text_tokens("Bonjour !", Some(Language::French))
        .unwrap();
    let none = mtl.text_tokens("Bonjour !", None).unwrap();
    assert_eq!(fr.len(), none.len() + 1, "the [fr] token");
    let turbo = TextFrontend::from_checkpoint_dir(assets().join("turbo"), Variant::Turbo).unwrap();
    assert_eq!(turbo.sot_eot(), None);
    let tags = turbo
        .text_tokens("[laugh] ok [clear throat]", None)
        .unwrap();
    let TextFrontend::Turbo(t) = &turbo else {
        unreachable!()
    };
    let laugh = t.inner().token_to_id("[laugh]").unwrap();
    assert_eq!(tags[0], laugh);
    assert!(tags.contains(&t.inner().token_to_id("[clear throat]").unwrap()));
}

#[test]
fn a_kanji_reader_set_on_the_frontend_reads_japanese() {
    use chatterbox_text::Segment;
    use std::sync::Arc;
    let mut mtl =
        TextFrontend::from_checkpoint_dir(assets().join("mtl"), Variant::Multilingual).unwrap();
    let without = mtl.text_tokens("日本", Some(Language::Japanese)).unwrap();
    // A reader that reads every input as にほん.
    let reader = |text: &str| {
        vec![Segment {
            orig: text.to_string(),
            hira: "にほん".into(),
        }]
    };
    assert!(mtl.set_kanji_reader(Some(Arc::new(reader))));
    let with = mtl.text_tokens("日本", Some(Language::Japanese)).unwrap();
    assert_ne!(with, without, "the reader changed nothing");
    let mut en = TextFrontend::from_checkpoint_dir(assets().join("en"), Variant::English).unwrap();
    assert!(
        !en.set_kanji_reader(Some(Arc::new(reader))),
        "English takes no reader"
    );
}
