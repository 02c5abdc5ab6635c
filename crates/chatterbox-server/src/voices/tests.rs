//! The voice library's unit tests: names, the commit protocol stopped before each step as a
//! kill would stop it, staging, derivation and the flat layout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

#[test]
fn names() {
    for ok in ["a", "Bob_2", "x-y", &"z".repeat(64)] {
        assert!(valid_voice_name(ok), "{ok}");
    }
    for bad in ["", "../x", "a.b", "a/b", "é", " a", &"z".repeat(65), "a\0"] {
        assert!(!valid_voice_name(bad), "{bad:?}");
    }
}

/// A clip of `n` samples at 24 kHz whose content tells it apart.
fn clip(n: usize, seed: f32) -> Audio {
    Audio::new(
        (0..n)
            .map(|i| ((i as f32) * 0.01 + seed).sin() * 0.5)
            .collect(),
        CLIP_RATE,
    )
}

/// A fake analysis: the clip's length and first sample, as text.
fn fake_conds(a: &Audio, model: ModelId) -> String {
    format!("{} {} {}", model.name(), a.samples.len(), a.samples[0])
}

/// Uploads `audio` as `name` for `models` with the fake analysis.
fn upload(
    lib: &VoiceLibrary,
    name: &str,
    audio: &Audio,
    models: &[ModelId],
) -> Result<Committed, StoreError> {
    let staging = lib.stage(audio).unwrap();
    for m in models {
        fs::write(staging.model_path(*m), fake_conds(audio, *m)).unwrap();
    }
    lib.commit(name, staging, models)
}

/// Asserts voice `name` is whole and is `audio` analysed for exactly `models`.
fn assert_voice(lib: &VoiceLibrary, name: &str, audio: &Audio, models: &[ModelId]) {
    let v = lib.version(name).expect("a live version");
    let stored = chatterbox_dsp::audio::load(v.join(CLIP)).unwrap();
    assert_eq!(&stored, audio, "the clip is the upload's, bit for bit");
    for m in ModelId::ALL {
        let f = v.join(model_file(m));
        if models.contains(&m) {
            assert_eq!(fs::read_to_string(&f).unwrap(), fake_conds(audio, m));
            assert_eq!(lib.path(name, m), f);
        } else {
            assert!(!f.exists(), "{m}: from another upload");
            assert_eq!(lib.path(name, m), v.join(CLIP));
        }
    }
}

/// Everything in `dir`, recursively, relative, less the library's lock file (which stays).
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p == dir.join(disk::LIBRARY_LOCK) {
                continue;
            }
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn an_upload_keeps_its_clip_and_a_reupload_replaces_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = VoiceLibrary::open(tmp.path()).unwrap();
    let a = clip(2400, 0.0);
    let first = upload(&lib, "amy", &a, &[ModelId::English, ModelId::Turbo]).unwrap();
    assert!(!first.replaced);
    assert_voice(&lib, "amy", &a, &[ModelId::English, ModelId::Turbo]);
    let l = lib.voices().unwrap();
    assert_eq!(l["amy"].models, vec![ModelId::English, ModelId::Turbo]);
    assert!(l["amy"].clip);
    // replaced by an upload under another model set: nothing of the first one is left
    let b = clip(3000, 1.0);
    let again = upload(&lib, "amy", &b, &[ModelId::Multilingual]).unwrap();
    assert!(again.replaced);
    assert_voice(&lib, "amy", &b, &[ModelId::Multilingual]);
    let files = tree(tmp.path());
    assert_eq!(files.len(), 5, "{files:?}"); // amy, current, version, clip, one model
    assert!(lib.delete("amy").unwrap());
    assert!(!lib.delete("amy").unwrap());
    assert!(tree(tmp.path()).is_empty());
}

#[test]
fn a_kill_at_any_step_leaves_the_old_voice_or_the_new_one_whole() {
    let steps = [
        Step::VoiceDir,
        Step::Version,
        Step::Pointer,
        Step::Current,
        Step::Cleanup,
    ];
    for s in steps {
        let tmp = tempfile::tempdir().unwrap();
        let lib = VoiceLibrary::open(tmp.path()).unwrap();
        let (a, b) = (clip(2400, 0.0), clip(3000, 1.0));
        upload(&lib, "amy", &a, &[ModelId::English, ModelId::Turbo]).unwrap();
        let before = tree(tmp.path());
        CRASH_AT.with(|c| c.set(Some(s)));
        let r = upload(&lib, "amy", &b, &[ModelId::English]);
        // and a first upload of another name
        let r2 = upload(&lib, "bob", &b, &[ModelId::English]);
        CRASH_AT.with(|c| c.set(None));
        assert!(matches!(r, Err(StoreError::Crash(x)) if x == s), "{s:?}");
        assert!(matches!(r2, Err(StoreError::Crash(_))), "{s:?}");
        assert!(
            tree(tmp.path()).iter().any(|f| f.starts_with(STAGING)) || s != Step::VoiceDir,
            "{s:?}: the kill left its staging"
        );
        // the next start
        let lib = VoiceLibrary::open(tmp.path()).unwrap();
        let committed = s == Step::Cleanup;
        if committed {
            assert_voice(&lib, "amy", &b, &[ModelId::English]);
            assert_voice(&lib, "bob", &b, &[ModelId::English]);
        } else {
            assert_voice(&lib, "amy", &a, &[ModelId::English, ModelId::Turbo]);
            assert!(!lib.voices().unwrap().contains_key("bob"), "{s:?}");
            assert_eq!(tree(tmp.path()), before, "{s:?}: nothing else is left");
        }
        let left = tree(tmp.path());
        assert!(
            left.iter()
                .all(|f| !f.contains(STAGING) && !f.contains(CURRENT_TMP)),
            "{s:?}: {left:?}"
        );
        let versions = left
            .iter()
            .filter(|f| f.starts_with("amy/") && f.matches('/').count() == 1)
            .count();
        assert_eq!(versions, 2, "{s:?}: current and one version: {left:?}");
    }
}

#[test]
fn the_flat_layout_is_read_listed_replaced_and_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("old.chatterbox.safetensors"), b"x").unwrap();
    fs::write(tmp.path().join("old.chatterbox-turbo.safetensors"), b"x").unwrap();
    fs::write(tmp.path().join("gone.chatterbox.safetensors"), b"x").unwrap();
    fs::write(tmp.path().join("junk.txt"), b"x").unwrap();
    let lib = VoiceLibrary::open(tmp.path()).unwrap();
    let l = lib.voices().unwrap();
    assert_eq!(l.len(), 2);
    assert_eq!(l["old"].models, vec![ModelId::English, ModelId::Turbo]);
    assert!(!l["old"].clip);
    assert_eq!(
        lib.path("old", ModelId::English),
        tmp.path().join("old.chatterbox.safetensors")
    );
    assert!(!lib.path("old", ModelId::Multilingual).exists());
    assert_eq!(
        voice_file(&lib.path("old", ModelId::English), ModelId::English),
        VoiceFile::Ready(tmp.path().join("old.chatterbox.safetensors"))
    );
    // an upload of the name replaces the flat files
    let a = clip(2400, 0.0);
    assert!(upload(&lib, "old", &a, &[ModelId::Nano]).unwrap().replaced);
    assert_voice(&lib, "old", &a, &[ModelId::Nano]);
    assert!(!tmp.path().join("old.chatterbox.safetensors").exists());
    assert!(lib.delete("gone").unwrap());
    let left = tree(tmp.path());
    assert!(
        left.contains(&"junk.txt".to_string()),
        "not ours: left alone"
    );
    assert!(
        !left
            .iter()
            .any(|f| f.ends_with(".safetensors") && !f.contains('/')),
        "{left:?}"
    );
}

#[test]
fn a_model_loaded_later_derives_from_the_clip_and_stores() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = VoiceLibrary::open(tmp.path()).unwrap();
    let a = clip(2400, 0.0);
    upload(&lib, "amy", &a, &[ModelId::English]).unwrap();
    let p = lib.path("amy", ModelId::Turbo);
    let VoiceFile::Derive(d) = voice_file(&p, ModelId::Turbo) else {
        panic!("expected a derivation");
    };
    let mut calls = 0;
    let got = derive(&d, &mut |audio, path| {
        calls += 1;
        fs::write(path, fake_conds(audio, ModelId::Turbo))?;
        Ok(())
    })
    .unwrap();
    assert_eq!(calls, 1);
    assert_eq!(got, d.target);
    assert_voice(&lib, "amy", &a, &[ModelId::English, ModelId::Turbo]);
    assert_eq!(voice_file(&p, ModelId::Turbo), VoiceFile::Ready(got));
    // a failed analysis stores nothing
    let p = lib.path("amy", ModelId::Nano);
    let VoiceFile::Derive(d) = voice_file(&p, ModelId::Nano) else {
        panic!("expected a derivation");
    };
    let e = derive(&d, &mut |_, _| Err("too short".into())).unwrap_err();
    assert!(matches!(e, DeriveError::Analysis(_)));
    assert!(!d.target.exists());
    assert!(!tree(tmp.path()).iter().any(|f| f.starts_with(STAGING)));
}

#[test]
fn a_request_of_a_replaced_version_follows_the_voice() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = VoiceLibrary::open(tmp.path()).unwrap();
    let (a, b) = (clip(2400, 0.0), clip(3000, 1.0));
    upload(&lib, "amy", &a, &[ModelId::English]).unwrap();
    let old_conds = lib.path("amy", ModelId::English);
    let old_clip = lib.path("amy", ModelId::Turbo);
    let VoiceFile::Derive(d) = voice_file(&old_clip, ModelId::Turbo) else {
        panic!("expected a derivation");
    };
    upload(&lib, "amy", &b, &[ModelId::English]).unwrap();
    // the version the request read is gone: its derivation says so, and the file is found
    // in the live version
    let e = derive(&d, &mut |_, path| Ok(fs::write(path, b"x")?)).unwrap_err();
    assert!(matches!(e, DeriveError::Store(StoreError::Gone)), "{e}");
    let live = lib.version("amy").unwrap();
    assert_eq!(
        voice_file(&old_conds, ModelId::English),
        VoiceFile::Ready(live.join(model_file(ModelId::English)))
    );
    assert!(matches!(
        voice_file(&old_clip, ModelId::Turbo),
        VoiceFile::Derive(Derive { clip, .. }) if clip == live.join(CLIP)
    ));
    lib.delete("amy").unwrap();
    assert_eq!(
        voice_file(&old_conds, ModelId::English),
        VoiceFile::Ready(old_conds.clone())
    );
}

#[cfg(unix)]
#[test]
fn a_start_leaves_a_live_upload_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = VoiceLibrary::open(tmp.path()).unwrap();
    let live = lib.stage(&clip(100, 0.0)).unwrap();
    let dead = tmp.path().join(format!("{STAGING}dead"));
    fs::create_dir(&dead).unwrap();
    fs::write(dead.join(CLIP), b"x").unwrap();
    let trash = tmp.path().join(format!("{TRASH}x"));
    fs::create_dir(&trash).unwrap();
    VoiceLibrary::open(tmp.path()).unwrap();
    assert!(live.path().join(CLIP).is_file());
    assert!(!dead.exists());
    assert!(!trash.exists());
    drop(live);
    assert!(tree(tmp.path()).is_empty());
}

#[tokio::test]
async fn uploads_of_one_name_take_turns() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = VoiceLibrary::open(tmp.path()).unwrap();
    let first = lib.lock_name("amy").await;
    let other = lib.lock_name("bob").await;
    let lib2 = lib.clone();
    let waiting = tokio::spawn(async move {
        let _l = lib2.lock_name("amy").await;
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!waiting.is_finished());
    drop(first);
    waiting.await.unwrap();
    drop(other);
    assert!(lib.uploads.lock().unwrap().is_empty());
}

/// The commit lock other servers see is the lock of `DIR/.lock`, a regular file (what NFS can
/// lock): while another open file of it holds the lock, as another server would, a commit
/// waits, then goes through.
#[cfg(unix)]
#[test]
fn a_commit_waits_for_the_lock_file_another_server_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = VoiceLibrary::open(tmp.path()).unwrap();
    let lock_path = tmp.path().join(disk::LIBRARY_LOCK);
    assert!(lock_path.is_file());
    let a = clip(2400, 0.0);
    // staging takes the commit lock too: before the other server holds it
    let staging = lib.stage(&a).unwrap();
    let other = File::options()
        .read(true)
        .write(true)
        .open(&lock_path)
        .unwrap();
    other.lock().unwrap();
    let (lib2, a2) = (lib.clone(), a.clone());
    let committing = std::thread::spawn(move || lib2.commit("amy", staging, &[]).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(!committing.is_finished(), "the commit waits for the lock");
    assert!(
        lib.version("amy").is_none(),
        "nothing visible before the commit"
    );
    other.unlock().unwrap();
    assert!(!committing.join().unwrap().replaced);
    assert_voice(&lib, "amy", &a2, &[]);
    assert_eq!(
        fs::read_dir(lib.version("amy").unwrap()).unwrap().count(),
        1,
        "the version holds the clip alone (no lock file)"
    );
}

/// A staging directory holds the lock of its own lock file; one of an earlier server holds
/// the lock of the directory itself: a start leaves both alone and removes them once unlocked.
#[cfg(unix)]
#[test]
fn a_start_tells_live_uploads_by_their_locks() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = VoiceLibrary::open(tmp.path()).unwrap();
    let live = lib.stage(&clip(100, 0.0)).unwrap();
    assert!(live.path().join(disk::STAGING_LOCK).is_file());
    let earlier = tmp.path().join(format!("{STAGING}earlier"));
    fs::create_dir(&earlier).unwrap();
    let dir_lock = File::open(&earlier).unwrap();
    dir_lock.lock().unwrap();
    VoiceLibrary::open(tmp.path()).unwrap();
    assert!(live.path().join(CLIP).is_file(), "the live upload is left");
    assert!(earlier.is_dir(), "the earlier server's upload is left");
    drop(dir_lock);
    // as a kill leaves it: the directory stays, its lock goes with the process
    let live_path = live.dir.keep();
    drop(live.lock);
    VoiceLibrary::open(tmp.path()).unwrap();
    assert!(
        !earlier.exists() && !live_path.exists(),
        "{:?}",
        tree(tmp.path())
    );
}
