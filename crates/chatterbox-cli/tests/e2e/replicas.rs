//! Two `chatterbox serve` replicas behind HAProxy, configured by deploy/haproxy/haproxy.cfg (its
//! ports rendered into a copy), all on loopback: clients send concurrent requests (whole WAV
//! files and WAV streams) through HAProxy while one replica stops, by SIGTERM (it drains) or
//! SIGKILL. Every answer a client takes as a success must be the whole audio of its request
//! (the exact sample count the same request gets from a replica alone, in a WAV whose sizes
//! agree with its bytes); failures may only be clean (an error status, or a transfer the client
//! sees abort) and only for requests in flight on a killed replica; new requests go to the
//! survivor. A replica's 429 reaches the client with its Retry-After.
//!
//! Needs the `haproxy` binary (Debian's package; `.ci/run` installs it): without it each test
//! says so on stderr and returns, unless CHATTERBOX_REQUIRE_HAPROXY is set (then it fails).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test
use crate::served::{
    checkpoint, client, replica, streamed_wav_samples, whole_wav_samples, Replica, REQUEST_TIMEOUT,
};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The texts clients speak (several sentences each: several chunks of audio, so that a
/// stream lasts a while after its first bytes).
const TEXTS: [&str; 3] = [
    "The first replica answers. Then the second one does. And then the first again. Fine.",
    "A load balancer spreads the requests. Nothing is lost. Nothing is cut. Good.",
    "Short one. And another. A third. The last.",
];

/// Clients sending requests at once.
const CLIENTS: usize = 4;

/// The `haproxy` binary, if installed (Debian puts it in /usr/sbin, which a user's PATH may
/// lack).
fn haproxy() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|d| d.join("haproxy"))
        .find(|p| p.is_file())
}

/// The `haproxy` binary, or `None` after saying on stderr (past the test harness's capture)
/// that the test did not run; a failure when CHATTERBOX_REQUIRE_HAPROXY is set.
fn haproxy_or_skip(test: &str) -> Option<PathBuf> {
    let found = haproxy();
    if found.is_none() {
        assert!(
            std::env::var_os("CHATTERBOX_REQUIRE_HAPROXY").is_none(),
            "CHATTERBOX_REQUIRE_HAPROXY is set but haproxy is not installed"
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: haproxy is not installed (apt-get install haproxy); \
             the load-balancer test did not run"
        );
    }
    found
}

/// A free port on 127.0.0.1 (free when asked: HAProxy binds it right after).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").port()
}

/// deploy/haproxy/haproxy.cfg with the frontend on `front` and the replicas on `ports`: each
/// address it replaces must appear exactly once, so a change of the example's shape fails here.
fn render_config(front: u16, ports: [u16; 2]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/haproxy/haproxy.cfg");
    let mut cfg = std::fs::read_to_string(&path).expect("deploy/haproxy/haproxy.cfg");
    for (from, to) in [
        ("bind 127.0.0.1:8000", format!("bind 127.0.0.1:{front}")),
        (
            "server r1 127.0.0.1:8001",
            format!("server r1 127.0.0.1:{}", ports[0]),
        ),
        (
            "server r2 127.0.0.1:8002",
            format!("server r2 127.0.0.1:{}", ports[1]),
        ),
    ] {
        assert_eq!(
            cfg.matches(from).count(),
            1,
            "{from:?} in {}",
            path.display()
        );
        cfg = cfg.replace(from, &to);
    }
    cfg
}

/// Two replicas behind a running HAProxy.
struct Balanced {
    replicas: Vec<Replica>,
    haproxy: Child,
    /// `http://127.0.0.1:PORT` of HAProxy's frontend.
    base: String,
    log: Arc<Mutex<String>>,
    _tmp: tempfile::TempDir,
}

impl Balanced {
    /// The tiny English checkpoint served by two replicas with `args`, behind HAProxy, which
    /// must have sent requests to both before this returns (10 s at most).
    async fn start(bin: &Path, args: &[&str]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let ckpt = tmp.path().join("ckpt");
        checkpoint(&ckpt).unwrap();
        let replicas = vec![
            replica(&ckpt, args).await.unwrap(),
            replica(&ckpt, args).await.unwrap(),
        ];
        let front = free_port();
        let cfg = tmp.path().join("haproxy.cfg");
        std::fs::write(
            &cfg,
            render_config(front, [replicas[0].port, replicas[1].port]),
        )
        .unwrap();
        let check = Command::new(bin)
            .arg("-c")
            .arg("-f")
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "haproxy -c refuses the example config: {}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        let mut haproxy = Command::new(bin)
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        for pipe in [
            Box::new(haproxy.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(haproxy.stderr.take().unwrap()),
        ] {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut l = log
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        let b = Self {
            replicas,
            haproxy,
            base: format!("http://127.0.0.1:{front}"),
            log,
            _tmp: tmp,
        };
        // both replicas in rotation: /ready through HAProxy answered by each
        let (c, t0) = (client(), Instant::now());
        let mut seen = std::collections::BTreeSet::new();
        while seen.len() < 2 {
            if let Ok(r) = c.get(format!("{}/ready", b.base)).send().await {
                if r.status() == 200 {
                    if let Some(name) = replica_of(r.headers()) {
                        seen.insert(name);
                    }
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "HAProxy did not reach both replicas in 10 s (saw {seen:?}): {}",
                b.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        b
    }

    fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Balanced {
    fn drop(&mut self) {
        let _ = self.haproxy.kill();
        let _ = self.haproxy.wait();
    }
}

/// The replica HAProxy says answered (`X-Chatterbox-Replica`, set by the example config).
fn replica_of(h: &reqwest::header::HeaderMap) -> Option<String> {
    h.get("x-chatterbox-replica")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A request of the load: one of [`TEXTS`], whole or streamed.
fn body(text: usize, stream: bool) -> serde_json::Value {
    let mut b = serde_json::json!({"model": "tts-1", "voice": "alloy", "input": TEXTS[text],
                                   "response_format": "wav", "seed": 7});
    if stream {
        b["stream_format"] = serde_json::json!("audio");
    }
    b
}

/// What a client saw of one request.
#[derive(Debug)]
enum Seen {
    /// 200 and the whole audio.
    Audio { samples: usize },
    /// 200, but the audio is not what the request gets alone: truncated audio passed as a
    /// success (never allowed).
    Corrupt(String),
    /// An error status (with its Retry-After, if any).
    Status {
        status: u16,
        retry_after: Option<String>,
    },
    /// The request or its body failed at the client: the client knows it did not get the
    /// audio.
    Aborted(String),
}

#[derive(Debug)]
struct Outcome {
    started: Instant,
    /// When the answer's head arrived.
    head: Option<Instant>,
    ended: Instant,
    replica: Option<String>,
    stream: bool,
    seen: Seen,
}

/// The streamed answers whose head has arrived and whose body is still being read: the replica
/// that answers and when the head arrived, by request.
type Open = Arc<Mutex<HashMap<u64, (String, Instant)>>>;

/// Sends one request of the load through `base` and judges its answer against `expected` (the
/// sample count of each text alone).
async fn one(
    c: &reqwest::Client,
    base: &str,
    (text, stream): (usize, bool),
    expected: &[usize],
    open: &Open,
) -> Outcome {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let mut head = None;
    let sent = c
        .post(format!("{base}/v1/audio/speech"))
        .json(&body(text, stream))
        .send()
        .await;
    let (replica, seen) = match sent {
        Err(e) => (None, Seen::Aborted(e.to_string())),
        Ok(r) => {
            let at = Instant::now();
            head = Some(at);
            let replica = replica_of(r.headers());
            let status = r.status().as_u16();
            if let (true, 200, Some(name)) = (stream, status, &replica) {
                open.lock().unwrap().insert(id, (name.clone(), at));
            }
            let retry_after = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let read = r.bytes().await;
            open.lock().unwrap().remove(&id);
            let seen = match read {
                Err(e) => Seen::Aborted(format!("status {status}, body: {e}")),
                Ok(b) if status == 200 => {
                    let n = if stream {
                        streamed_wav_samples(&b)
                    } else {
                        whole_wav_samples(&b)
                    };
                    match n {
                        Ok(n) if n == expected[text] => Seen::Audio { samples: n },
                        Ok(n) => Seen::Corrupt(format!(
                            "{n} samples where the request alone gets {}",
                            expected[text]
                        )),
                        Err(e) => Seen::Corrupt(e.to_string()),
                    }
                }
                Ok(_) => Seen::Status {
                    status,
                    retry_after,
                },
            };
            (replica, seen)
        }
    };
    Outcome {
        started,
        head,
        ended: Instant::now(),
        replica,
        stream,
        seen,
    }
}

/// The sample count of each of [`TEXTS`] alone, asked of `replica` directly (one after the
/// other; a replica without a queue may still hold the previous request's place for a moment
/// after its answer: its 429 is waited out).
async fn expected_samples(replica: &Replica) -> Vec<usize> {
    let c = client();
    let mut out = Vec::new();
    for i in 0..TEXTS.len() {
        let mut tries = 0;
        let r = loop {
            let r = c
                .post(replica.url("/v1/audio/speech"))
                .json(&body(i, false))
                .send()
                .await
                .unwrap();
            tries += 1;
            if r.status() != 429 || tries == 20 {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(r.status(), 200, "{}", replica.log());
        out.push(whole_wav_samples(&r.bytes().await.unwrap()).unwrap());
    }
    out
}

/// The load of both tests: [`load`] through `b`'s HAProxy, each request's expected length
/// taken from replica `reference` alone, once both replicas have answered.
async fn load_both(
    b: &Balanced,
    reference: usize,
) -> (
    Arc<AtomicBool>,
    Arc<Mutex<Vec<Outcome>>>,
    Open,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let expected = expected_samples(&b.replicas[reference]).await;
    let (stop, outcomes, open) = (
        Arc::new(AtomicBool::new(false)),
        Arc::default(),
        Open::default(),
    );
    let clients = load(&b.base, &expected, &stop, &outcomes, &open);
    wait_until(
        &outcomes,
        Duration::from_secs(20),
        "both replicas answer",
        |o| served_by(o, "r1") >= 1 && served_by(o, "r2") >= 1,
    )
    .await;
    (stop, outcomes, open, clients)
}

/// [`CLIENTS`] clients sending requests through `base` one after the other until `stop`;
/// every outcome.
fn load(
    base: &str,
    expected: &[usize],
    stop: &Arc<AtomicBool>,
    outcomes: &Arc<Mutex<Vec<Outcome>>>,
    open: &Open,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..CLIENTS)
        .map(|k| {
            let (base, expected) = (base.to_string(), expected.to_vec());
            let (stop, outcomes, open) = (stop.clone(), outcomes.clone(), open.clone());
            tokio::spawn(async move {
                let c = client();
                let mut i = k;
                while !stop.load(Ordering::Acquire) {
                    let request = (i % TEXTS.len(), (i + k) % 2 == 1);
                    let o = one(&c, &base, request, &expected, &open).await;
                    outcomes.lock().unwrap().push(o);
                    i += 1;
                }
            })
        })
        .collect()
}

/// Waits (`within` at most) until `done` holds of the outcomes so far.
async fn wait_until(
    outcomes: &Arc<Mutex<Vec<Outcome>>>,
    within: Duration,
    what: &str,
    done: impl Fn(&[Outcome]) -> bool,
) {
    let t0 = Instant::now();
    while !done(&outcomes.lock().unwrap()) {
        assert!(
            t0.elapsed() < within,
            "{what}: not within {within:?}: {:#?}",
            outcomes.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (20 s at most) until `replica` has begun a streamed answer since the call: one still
/// being read, or one whose head came after the call and which has ended. (Asking for a head in
/// the last 50 ms of one still open missed for 20 s on CI's busy 2 cores: the tiny model's
/// answers are read whole a moment after their head.)
async fn wait_for_stream(open: &Open, outcomes: &Arc<Mutex<Vec<Outcome>>>, replica: &str) {
    let t0 = Instant::now();
    loop {
        let open_now = open.lock().unwrap().values().any(|(r, _)| r == replica);
        let ended = outcomes.lock().unwrap().iter().any(|o| {
            o.stream && o.replica.as_deref() == Some(replica) && o.head.is_some_and(|h| h >= t0)
        });
        if open_now || ended {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{replica} began no stream in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn served_by(o: &[Outcome], replica: &str) -> usize {
    o.iter()
        .filter(|o| matches!(o.seen, Seen::Audio { .. }) && o.replica.as_deref() == Some(replica))
        .count()
}

/// Stops the load and returns every outcome.
async fn finish(
    stop: &Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<()>>,
    outcomes: &Arc<Mutex<Vec<Outcome>>>,
) -> Vec<Outcome> {
    stop.store(true, Ordering::Release);
    for c in clients {
        tokio::time::timeout(REQUEST_TIMEOUT + Duration::from_secs(5), c)
            .await
            .expect("a client ends within its request timeout")
            .unwrap();
    }
    std::mem::take(&mut *outcomes.lock().unwrap())
}

fn summary(o: &[Outcome]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for o in o {
        let key = match &o.seen {
            Seen::Audio { samples } => {
                assert!(*samples > 0);
                format!("audio from {}", o.replica.as_deref().unwrap_or("?"))
            }
            Seen::Corrupt(_) => "corrupt".into(),
            Seen::Status { status, .. } => format!("status {status}"),
            Seen::Aborted(why) => format!("aborted ({})", why.split(':').next().unwrap_or("")),
        };
        *m.entry(key).or_default() += 1;
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_drains_loses_no_request_behind_haproxy() {
    let Some(bin) = haproxy_or_skip("a_replica_that_drains_loses_no_request_behind_haproxy") else {
        return;
    };
    let mut b = Balanced::start(&bin, &[]).await;
    let (stop, outcomes, _open, clients) = load_both(&b, 0).await;

    // SIGTERM mid-load: r1 drains (its requests in flight finish, new ones get 503, which
    // HAProxy retries on r2) and exits 0
    b.replicas[0].terminate().unwrap();
    let status = b.replicas[0]
        .exit_status(Duration::from_secs(30))
        .await
        .unwrap();
    let exited = Instant::now();
    assert!(status.success(), "{status}: {}", b.replicas[0].log());
    let before = outcomes.lock().unwrap().len();
    wait_until(
        &outcomes,
        Duration::from_secs(20),
        "requests after the drain",
        |o| o.iter().filter(|o| o.started > exited).count() >= CLIENTS,
    )
    .await;
    let o = finish(&stop, clients, &outcomes).await;
    let counts = summary(&o);
    eprintln!("outcomes: {counts:?}");

    for o in &o {
        assert!(
            matches!(o.seen, Seen::Audio { .. }),
            "a drain loses nothing: every request gets its whole audio (retried if refused): \
             {o:?}\nall: {counts:?}\nHAProxy: {}",
            b.log()
        );
    }
    let after: Vec<_> = o.iter().filter(|o| o.started > exited).collect();
    assert!(after.len() >= CLIENTS && before >= 2, "{counts:?}");
    assert!(
        after.iter().all(|o| o.replica.as_deref() == Some("r2")),
        "new requests go to the survivor: {after:?}"
    );
    assert!(o.iter().any(|o| o.stream) && o.iter().any(|o| !o.stream));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_fails_only_its_requests_in_flight_behind_haproxy() {
    let Some(bin) =
        haproxy_or_skip("a_killed_replica_fails_only_its_requests_in_flight_behind_haproxy")
    else {
        return;
    };
    let mut b = Balanced::start(&bin, &[]).await;
    let (stop, outcomes, open, clients) = load_both(&b, 1).await;

    // SIGKILL mid-load, right after r2 began a streamed answer: r2's requests in flight are
    // cut; nothing it half-sent may reach a client as a success, and HAProxy sends the rest to
    // r1
    wait_for_stream(&open, &outcomes, "r2").await;
    let killed = Instant::now();
    b.replicas[1].kill().unwrap();
    // past HAProxy's health checks (fall 2 x inter 1 s): r2 is out of the rotation
    let settled = killed + Duration::from_secs(3);
    wait_until(
        &outcomes,
        Duration::from_secs(25),
        "requests after the kill",
        |o| o.iter().filter(|o| o.started > settled).count() >= CLIENTS,
    )
    .await;
    let o = finish(&stop, clients, &outcomes).await;
    let counts = summary(&o);
    eprintln!("outcomes: {counts:?}");

    let mut in_flight = 0;
    for o in &o {
        match &o.seen {
            Seen::Audio { .. } => {}
            Seen::Corrupt(why) => panic!(
                "truncated or wrong audio passed as a success: {why}: {o:?}\nHAProxy: {}",
                b.log()
            ),
            Seen::Status { .. } | Seen::Aborted(_) => {
                assert!(
                    o.started <= killed && o.ended >= killed,
                    "only requests in flight at the kill may fail: {o:?}\nall: {counts:?}"
                );
                in_flight += 1;
            }
        }
    }
    assert!(in_flight <= CLIENTS, "{counts:?}");
    // the tiny model's streams are mostly whole before HAProxy passes their head on: a stream
    // cut by the kill is seen (as aborted) in some runs only
    let cut = o
        .iter()
        .filter(|o| o.stream && o.head.is_some() && matches!(o.seen, Seen::Aborted(_)))
        .count();
    eprintln!("streams cut by the kill: {cut}");
    let after: Vec<_> = o.iter().filter(|o| o.started > settled).collect();
    assert!(after.len() >= CLIENTS, "{counts:?}");
    assert!(
        after
            .iter()
            .all(|o| matches!(o.seen, Seen::Audio { .. }) && o.replica.as_deref() == Some("r1")),
        "new requests go to the survivor: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_replicas_429_reaches_the_client_with_its_retry_after() {
    let Some(bin) = haproxy_or_skip("a_full_replicas_429_reaches_the_client_with_its_retry_after")
    else {
        return;
    };
    // no queue: a replica speaking one request refuses the next at once
    let b = Balanced::start(&bin, &["--queue", "0", "--retry-after", "3"]).await;
    let expected = expected_samples(&b.replicas[0]).await;
    let burst: Vec<_> = (0..6)
        .map(|i| {
            let (base, expected) = (b.base.clone(), expected.clone());
            tokio::spawn(async move {
                let open = Open::default();
                one(&client(), &base, (i % TEXTS.len(), false), &expected, &open).await
            })
        })
        .collect();
    let mut o = Vec::new();
    for t in burst {
        o.push(t.await.unwrap());
    }
    let counts = summary(&o);
    let mut refused = 0;
    for o in &o {
        match &o.seen {
            Seen::Audio { .. } => {}
            Seen::Status {
                status: 429,
                retry_after,
            } => {
                refused += 1;
                // the replica's: its queue's expected wait, at least --retry-after
                let secs: Option<u64> = retry_after.as_deref().and_then(|s| s.parse().ok());
                assert!(
                    secs.is_some_and(|s| (3..=60).contains(&s)),
                    "the replica's Retry-After passes through: {o:?}"
                );
            }
            _ => panic!("{o:?}: all {counts:?}\nHAProxy: {}", b.log()),
        }
    }
    assert!(
        refused >= 1,
        "six at once on two replicas without a queue: {counts:?}"
    );
    assert!(refused <= 4, "each replica speaks one: {counts:?}");
}
