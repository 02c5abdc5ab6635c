//! The crate as another project uses it: public API only, every tokenizer built from a small
//! vocabulary held in memory, no files. Id-for-id agreement with the reference on the real
//! vocabularies is `tests/parity.rs`'s job.
use chatterbox_text::{
    hiragana_normalize, korean_normalize, punc_norm, CangjieTable, EnTokenizer, Language,
    MTLTokenizer, MtlEncodeOptions, MtlPreprocessor, Segment, TextError, TextFrontend,
    TurboTokenizer, Variant,
};
use serde_json::{json, Value};
use std::str::FromStr;
use std::sync::Arc;

type R = anyhow::Result<()>;

/// A grapheme `tokenizer.json` as the checkpoints have it: `specials` as added tokens (ids
/// from 0), then one vocabulary entry per grapheme, no merges, a whitespace pre-tokenizer.
fn grapheme_json(specials: &[&str], graphemes: &[&str]) -> String {
    let added: Vec<Value> = specials
        .iter()
        .enumerate()
        .map(|(id, t)| {
            json!({"id": id, "content": t, "special": true, "single_word": false,
                   "lstrip": false, "rstrip": false, "normalized": false})
        })
        .collect();
    let vocab: serde_json::Map<String, Value> = specials
        .iter()
        .chain(graphemes)
        .enumerate()
        .map(|(id, t)| (t.to_string(), json!(id)))
        .collect();
    json!({
        "version": "1.0",
        "added_tokens": added,
        "pre_tokenizer": {"type": "Whitespace"},
        "model": {"type": "BPE", "unk_token": "[UNK]", "vocab": vocab, "merges": []},
    })
    .to_string()
}

const SPECIALS: [&str; 4] = ["[STOP]", "[UNK]", "[SPACE]", "[START]"];
const LETTERS: [&str; 8] = ["H", "e", "l", "o", "h", "w", "r", "."];

/// Id of a grapheme of [`LETTERS`].
fn id(g: &str) -> u32 {
    let i = LETTERS.iter().position(|&l| l == g).unwrap_or(usize::MAX);
    (SPECIALS.len() + i) as u32
}

#[test]
fn english_tokenizer_from_memory() -> R {
    let json = grapheme_json(&SPECIALS, &LETTERS);
    let from_str = EnTokenizer::from_json(&json)?;
    let from_bytes = EnTokenizer::from_bytes(json.as_bytes())?;
    let wrapped = EnTokenizer::from_tokenizer(
        tokenizers::Tokenizer::from_str(&json).map_err(|e| anyhow::anyhow!("{e}"))?,
    )?;
    assert_eq!((from_str.sot(), from_str.eot()), (3, 0));
    assert_eq!(from_str.vocab_size(), 12);

    // what `generate` does: punc_norm, then ' ' -> [SPACE], then the tokenizer
    let frontend = TextFrontend::English(from_str.clone());
    assert_eq!(frontend.normalize("hello  world")?, "Hello world.");
    assert_eq!(
        frontend.prepare("hello  world", None)?,
        "Hello[SPACE]world."
    );
    assert_eq!(EnTokenizer::prepare("Hello world."), "Hello[SPACE]world.");
    // "d" is not a grapheme of this vocabulary: [UNK] (1)
    let want: Vec<u32> = ["H", "e", "l", "l", "o"]
        .into_iter()
        .map(id)
        .chain([2])
        .chain(["w", "o", "r", "l"].into_iter().map(id))
        .chain([1, id(".")])
        .collect();
    let ids = frontend.text_tokens("hello  world", None)?;
    assert_eq!(ids, want);
    for t in [&from_bytes, &wrapped] {
        assert_eq!(
            t.encode("Hello[SPACE]world.")?,
            from_str.encode("Hello world.")?
        );
    }
    assert_eq!(from_str.decode(&ids)?, "Hello worl.");
    Ok(())
}

#[test]
fn a_vocabulary_without_start_names_memory_in_its_error() {
    let json = grapheme_json(&["[STOP]", "[UNK]", "[SPACE]"], &LETTERS);
    match EnTokenizer::from_json(&json) {
        Err(TextError::MissingSpecialToken { path, token }) => {
            assert_eq!(token, "[START]");
            assert_eq!(path.to_string_lossy(), "<in memory>");
        }
        other => panic!("expected MissingSpecialToken, got {other:?}"),
    }
    assert!(matches!(
        MTLTokenizer::from_bytes(b"{ not json"),
        Err(TextError::Tokenizer { .. })
    ));
}

#[test]
fn multilingual_tokenizer_from_memory_with_a_cangjie_table() -> R {
    let specials = [
        "[STOP]", "[UNK]", "[SPACE]", "[START]", "[fr]", "[zh]", "[ko]", "[cj_o]", "[cj_n]",
        "[cj_f]", "[cj_.]",
    ];
    let graphemes = [
        "c", "a", "v", "?", "\u{327}", "\u{1112}", "\u{1161}", "\u{11ab}",
    ];
    let json = grapheme_json(&specials, &graphemes);
    let g =
        |s: &str| (specials.len() + graphemes.iter().position(|&x| x == s).unwrap_or(99)) as u32;
    let plain = MTLTokenizer::from_json(&json)?;
    assert!(plain.cangjie_converter().table().is_empty());
    let table = CangjieTable::from_json(r#"["你\tonf"]"#)?;
    assert_eq!(table.encode("你").as_deref(), Some("onf"));
    let tok = MTLTokenizer::from_json(&json)?.with_cangjie_table(table.clone());

    // French: lowercase + NFKD, the language token, [SPACE]
    let fr = Some(Language::French);
    assert_eq!(
        tok.prepare("Ça va?", fr, MtlEncodeOptions::default()),
        "[fr]c\u{327}a[SPACE]va?"
    );
    assert_eq!(
        tok.encode("Ça va?", fr)?,
        [4, g("c"), g("\u{327}"), g("a"), 2, g("v"), g("a"), g("?")]
    );
    // without lowercasing the capital is an unknown grapheme
    let raw = MtlEncodeOptions::default().with_lowercase(false);
    assert_eq!(
        tok.encode_with("Ça", fr, raw)?,
        [4, 1, g("\u{327}"), g("a")]
    );
    // Chinese: Cangjie codes from the in-memory table; without one the glyph is unknown
    assert_eq!(tok.encode("你", Some(Language::Chinese))?, [5, 7, 8, 9, 10]);
    assert_eq!(plain.encode("你", Some(Language::Chinese))?, [5, 1]);
    // Korean: Jamo
    assert_eq!(
        tok.encode("한", Some(Language::Korean))?,
        [6, g("\u{1112}"), g("\u{1161}"), g("\u{11ab}")]
    );
    assert_eq!(tok.decode(&tok.encode("ça va", None)?)?, "c\u{327}a va");

    // the same steps without any vocabulary
    let pre = MtlPreprocessor::new().with_cangjie_table(table);
    for (text, lang) in [
        ("Ça va?", fr),
        ("你", Some(Language::Chinese)),
        ("한", None),
    ] {
        assert_eq!(
            pre.prepare(text, lang, MtlEncodeOptions::default()),
            tok.prepare(text, lang, MtlEncodeOptions::default())
        );
    }
    let frontend = TextFrontend::Multilingual(tok);
    assert_eq!(
        frontend.prepare("ça va", Some(Language::French))?,
        "[fr]c\u{327}a[SPACE]va."
    );
    Ok(())
}

#[test]
fn turbo_tokenizer_from_memory() -> R {
    let json = json!({
        "version": "1.0",
        "added_tokens": [{"id": 0, "content": "<|endoftext|>", "special": true,
            "single_word": false, "lstrip": false, "rstrip": false, "normalized": false}],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
            "use_regex": true},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
            "use_regex": true},
        "model": {"type": "BPE", "vocab": {"<|endoftext|>": 0, "H": 1, "i": 2, "Ġ": 3, "!": 4,
            "Hi": 5}, "merges": ["H i"]},
    })
    .to_string();
    let tok = TurboTokenizer::from_json(&json, None)?;
    assert_eq!(tok.eos(), 0);
    assert_eq!(tok.max_length(), None);
    assert_eq!(tok.encode("Hi Hi!")?, [5, 3, 5, 4]);
    assert_eq!(tok.decode(&[5, 3, 5, 4])?, "Hi Hi!");
    // tokenizer_config.json in memory: truncation and an end token
    let config = r#"{"model_max_length": 3, "add_eos_token": true}"#;
    let short = TurboTokenizer::from_bytes(json.as_bytes(), Some(config.as_bytes()))?;
    assert_eq!(short.max_length(), Some(3));
    assert_eq!(short.encode("Hi")?, [5, 0]);
    assert_eq!(short.encode("Hi Hi!")?, [5, 3, 5]);
    let wrapped = TurboTokenizer::from_tokenizer(
        tokenizers::Tokenizer::from_str(&json).map_err(|e| anyhow::anyhow!("{e}"))?,
        Some(config),
    )?;
    assert_eq!(wrapped.encode("Hi Hi!")?, [5, 3, 5]);
    assert!(matches!(
        TurboTokenizer::from_json(&json, Some("{ not json")),
        Err(TextError::InvalidData {
            what: "tokenizer config",
            ..
        })
    ));
    // Turbo tokenizes punc_norm's output as it is
    let frontend = TextFrontend::Turbo(tok);
    assert_eq!(frontend.prepare("hi  hi", None)?, "Hi hi.");
    Ok(())
}

#[test]
fn normalisation_steps_are_public() {
    assert_eq!(punc_norm("wait... what", Variant::English), "Wait,  what.");
    assert_eq!(punc_norm("wait... what", Variant::Turbo), "Wait... what.");
    assert_eq!(korean_normalize(" 가 "), "\u{1100}\u{1161}");
    let reader = |text: &str| vec![Segment::new(text, "にほん")];
    assert_eq!(hiragana_normalize("日本", Some(&reader)), "にほん");
    assert_eq!(hiragana_normalize("日本", None), "日本");
    let pre = MtlPreprocessor::new().with_kanji_reader(Some(Arc::new(reader)));
    assert_eq!(pre.apply_language("日本", Language::Japanese), "にほん");
    assert_eq!(pre.apply_language("Ça", Language::French), "Ça");
    assert_eq!(
        pre.prepare(
            "日本",
            Some(Language::Japanese),
            MtlEncodeOptions::default()
        ),
        "[ja]にほん"
    );
}
