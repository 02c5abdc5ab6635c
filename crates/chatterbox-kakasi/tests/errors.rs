//! Typed errors for a missing, malformed or empty dictionary.
use chatterbox_kakasi::{Kakasi, KakasiDict, KakasiError};

#[cfg(test)]
mod support {
    pub fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("chatterbox-kakasi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }
}
use support::scratch;

#[test]
fn dictionary_errors() {
    let missing = scratch("absent.tsv");
    assert!(matches!(
        Kakasi::from_file(&missing),
        Err(KakasiError::Io { path, .. }) if path == missing
    ));

    let bad = scratch("bad.tsv");
    std::fs::write(&bad, "# header\nK\t日本\tにほん\nK\t日本\n").unwrap();
    match KakasiDict::from_file(&bad) {
        Err(KakasiError::InvalidDictionary { path, line, .. }) => {
            assert_eq!((path, line), (bad.clone(), 3));
        }
        other => panic!("expected InvalidDictionary, got {other:?}"),
    }
    for (text, line) in [
        ("I\tzz\tx\n", 1),
        ("\nK\t日本\tにほん\tそん\n", 2),
        ("C\t\tにほん\tそん\n", 1),
        ("X\t日本\tにほん\n", 1),
    ] {
        match KakasiDict::parse(text) {
            Err(KakasiError::InvalidRecord { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
            other => panic!("{text:?}: expected InvalidRecord, got {other:?}"),
        }
    }

    // a file without any word cannot be pykakasi's dictionary
    let empty = scratch("empty.tsv");
    std::fs::write(&empty, "# header only\nI\tfe00\t\n").unwrap();
    assert!(matches!(
        KakasiDict::from_file(&empty),
        Err(KakasiError::InvalidDictionary { line: 0, .. })
    ));

    let good = scratch("good.tsv");
    std::fs::write(&good, "K\t日本\tにほん\nC\t日本\tにっぽん\tだい\n").unwrap();
    let dict = KakasiDict::from_file(&good).unwrap();
    assert_eq!(dict.len(), 1);
    let _ = std::fs::remove_dir_all(good.parent().unwrap());
}
