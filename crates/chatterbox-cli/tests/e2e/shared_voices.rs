//! One voice library shared by two `chatterbox serve` processes (`--voices` on one directory,
//! as replicas on one shared volume are): a voice uploaded through one is listed and spoken by
//! the other, with the same conditionals; a deletion through one is seen by the other at once;
//! uploads of one name through both at the same time leave one whole voice, the upload
//! committed last (the one that says `replaced`), and nothing half-written.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test
use crate::common::{samples, tensors};
use crate::served::{checkpoint, client, replica, whole_wav_samples, Replica};
use chatterbox_dsp::{Audio, WavFormat};
use std::path::Path;

/// The fixture's 24 kHz reference clip, scaled by `gain` (distinct clips), as a 16-bit WAV.
fn clip_wav(gain: f32) -> Vec<u8> {
    let s = samples(&tensors("english").unwrap(), "in.ref_24k").unwrap();
    let audio = Audio::new(s.iter().map(|v| v * gain).collect(), 24_000);
    chatterbox_dsp::audio::wav_bytes(&audio, WavFormat::Pcm16).unwrap()
}

/// The clip as the library keeps an upload of `wav` (decoded; already mono at 24 kHz).
fn kept(wav: &[u8]) -> Vec<f32> {
    chatterbox_dsp::audio::decode(wav.to_vec(), None)
        .unwrap()
        .samples
}

/// `POST /v1/voices` of `wav` as `name`: the status and the JSON answer.
async fn upload(r: &Replica, name: &str, wav: Vec<u8>) -> (u16, serde_json::Value) {
    let form = reqwest::multipart::Form::new()
        .text("name", name.to_string())
        .part(
            "file",
            reqwest::multipart::Part::bytes(wav).file_name(format!("{name}.wav")),
        );
    let resp = client()
        .post(r.url("/v1/voices"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

/// The voices `GET /v1/voices` lists, with their models.
async fn listed(r: &Replica) -> Vec<(String, Vec<String>)> {
    let v: serde_json::Value = client()
        .get(r.url("/v1/voices"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let models = e["models"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_str().unwrap().to_string())
                .collect();
            (e["id"].as_str().unwrap().to_string(), models)
        })
        .collect()
}

/// Speaks a fixed request in `voice`: the status and the body.
async fn speak(r: &Replica, voice: &str) -> (u16, Vec<u8>) {
    let body = serde_json::json!({"model": "chatterbox", "voice": voice, "seed": 3,
        "input": "Shared voices.", "response_format": "wav"});
    let resp = client()
        .post(r.url("/v1/audio/speech"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.bytes().await.unwrap().to_vec())
}

/// The entries of `dir` (one level), sorted, less the library's lock file.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|e| e != ".lock")
        .collect();
    v.sort();
    v
}

/// The live version of voice `name` in the library `dir`: its files, and its clip's samples.
fn live(dir: &Path, name: &str) -> (Vec<String>, Vec<f32>) {
    let current = std::fs::read_to_string(dir.join(name).join("current")).unwrap();
    let v = dir.join(name).join(current.trim());
    let clip = chatterbox_dsp::audio::load(v.join("clip.wav")).unwrap();
    (entries(&v), clip.samples)
}

/// Two replicas on one checkpoint and one voice library.
async fn two(tmp: &Path) -> (Replica, Replica) {
    let ckpt = tmp.join("ckpt");
    checkpoint(&ckpt).unwrap();
    let voices = tmp.join("voices");
    let voices = voices.to_str().unwrap();
    let a = replica(&ckpt, &["--voices", voices]).await.unwrap();
    let b = replica(&ckpt, &["--voices", voices]).await.unwrap();
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_uploaded_through_one_replica_is_spoken_and_deleted_through_the_other() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = two(tmp.path()).await;
    let (status, j) = upload(&a, "amy", clip_wav(1.0)).await;
    assert_eq!(status, 201, "{j}\n{}", a.log());
    assert_eq!(j["replaced"], false);
    let want = vec![("amy".to_string(), vec!["chatterbox".to_string()])];
    assert_eq!(listed(&b).await, want, "the other replica lists it");

    // the same conditionals: the same seeded request gives the same bytes on both
    let (sa, wa) = speak(&a, "amy").await;
    let (sb, wb) = speak(&b, "amy").await;
    assert_eq!((sa, sb), (200, 200), "{}", b.log());
    assert!(whole_wav_samples(&wb).unwrap() > 0);
    assert_eq!(wa, wb, "both replicas speak the voice from the one library");
    let (_, builtin) = speak(&b, "alloy").await;
    assert_ne!(wb, builtin, "the voice is not the built-in one");

    // deleted through b: gone for a at once
    let resp = client()
        .delete(b.url("/v1/voices/amy"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(listed(&a).await.is_empty());
    let (status, body) = speak(&a, "amy").await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("voice_not_found"));

    // uploaded again through b, with another clip: a speaks the new one
    let (status, j) = upload(&b, "amy", clip_wav(0.5)).await;
    assert_eq!((status, &j["replaced"]), (201, &serde_json::json!(false)));
    let (sa, wa2) = speak(&a, "amy").await;
    let (_, wb2) = speak(&b, "amy").await;
    assert_eq!(sa, 200);
    assert_eq!(wa2, wb2);
    assert_eq!(
        live(&tmp.path().join("voices"), "amy").1,
        kept(&clip_wav(0.5))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_of_one_name_through_two_replicas_at_once_leave_the_last_one_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = two(tmp.path()).await;
    let dir = tmp.path().join("voices");
    let clips = [clip_wav(0.9), clip_wav(0.7)];
    for round in 0..3 {
        let (ra, rb) = tokio::join!(
            upload(&a, "bob", clips[0].clone()),
            upload(&b, "bob", clips[1].clone())
        );
        assert_eq!((ra.0, rb.0), (201, 201), "{ra:?} {rb:?}");
        let replaced = [ra.1["replaced"].as_bool(), rb.1["replaced"].as_bool()];
        let last = if round == 0 {
            // nothing before: the commit first says it replaced nothing, the last one that
            // it replaced the first
            assert!(
                replaced == [Some(false), Some(true)] || replaced == [Some(true), Some(false)],
                "{replaced:?}"
            );
            usize::from(replaced[1] == Some(true))
        } else {
            assert_eq!(replaced, [Some(true), Some(true)]);
            // either may have committed last: the live clip says which
            let (_, clip) = live(&dir, "bob");
            usize::from(clip == kept(&clips[1]))
        };
        // one whole voice: the last upload's clip and its conditionals, nothing else
        let (files, clip) = live(&dir, "bob");
        assert_eq!(
            files,
            ["chatterbox.safetensors", "clip.wav"],
            "round {round}"
        );
        assert_eq!(
            clip,
            kept(&clips[last]),
            "round {round}: the last commit is the voice"
        );
        assert_eq!(
            entries(&dir.join("bob")).len(),
            2,
            "current and one version"
        );
        assert_eq!(entries(&dir), ["bob"], "no upload left half-written");
        let (sa, wa) = speak(&a, "bob").await;
        let (sb, wb) = speak(&b, "bob").await;
        assert_eq!((sa, sb), (200, 200));
        assert_eq!(wa, wb, "round {round}: both speak the one live voice");
    }
}
