//! Properties of the pronunciation lexicon: any text is handled without a panic, text the
//! lexicon has no word of comes back unchanged, and brackets are never touched.
#![allow(clippy::unwrap_used)]
use chatterbox_text::Lexicon;
use proptest::prelude::*;

proptest! {
    #[test]
    fn any_text_and_brackets_kept(s in "[a-zA-Z'’ \\-\\[\\]éÉ.,]{0,120}") {
        let lex = Lexicon::parse("a = ay\nbe = bee\nÉcole = Ecol\nit's = its").unwrap();
        let out = lex.apply(&s);
        // the bracketed spans are the same in order
        let spans = |t: &str| -> Vec<String> {
            t.split('[').skip(1).map(|p| p.split(']').next().unwrap_or("").to_string()).collect()
        };
        if !s.contains(']') || s.find('[') < s.find(']') {
            prop_assert_eq!(spans(&out).len(), spans(&s).len());
        }
        let none = Lexicon::parse("zzzq = x").unwrap();
        prop_assert_eq!(none.apply(&s), s);
    }
}

#[test]
fn a_file_is_read_and_errors_name_it() {
    let dir = std::env::temp_dir().join(format!("lexicon-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.txt");
    std::fs::write(
        &good,
        "# pronunciations\nChatterbox = Chatter box\nsql = sequel\n",
    )
    .unwrap();
    let lex = Lexicon::from_file(&good).unwrap();
    assert_eq!(
        lex.apply("Chatterbox speaks SQL."),
        "Chatter box speaks Sequel."
    );
    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "ok = fine\nbroken line\n").unwrap();
    let err = Lexicon::from_file(&bad).unwrap_err().to_string();
    assert!(err.contains("bad.txt, line 2"), "{err}");
    assert!(Lexicon::from_file(dir.join("missing.txt")).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
