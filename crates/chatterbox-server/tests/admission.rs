//! Admission by capacity, the server's default (issue 43): a batching fake whose rounds cost a
//! known time, on loopback. A streamed request joins a batch whose rounds keep its listeners
//! fed, and waits in the queue behind one whose rounds do not; seating by slot takes it at
//! once either way.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failing unwrap is a failing test

mod support;
#[path = "support/voice_fakes.rs"]
mod voice_fakes;

use chatterbox_server::{ModelId, ServerConfig};
use serde_json::json;
use std::time::Duration;
use support::{speech, TestServer};
use voice_fakes::{StoreFake, LONG_STEPS};

/// Streams `long` (its first chunk read), then asks for `short` whole while it speaks;
/// returns the fake's log once both are done, and the batch's measured capacity from
/// `/metrics`.
async fn long_then_short(round: Duration, config: ServerConfig) -> (Vec<String>, String) {
    let mut fake = StoreFake::batching(ModelId::English, 4);
    fake.step_delay = round;
    let s = TestServer::start(config, vec![fake.device()]).await;
    let body = |input: &str, stream: bool| {
        let mut b = json!({"model": "chatterbox", "input": input, "voice": "alloy",
                           "response_format": "pcm"});
        if stream {
            b["stream_format"] = json!("audio");
        }
        b
    };
    let mut long = speech(&s, body("long", true)).await;
    assert_eq!(long.status(), 200);
    let mut got = long.chunk().await.unwrap().map_or(0, |c| c.len());
    let short = speech(&s, body("short", false)).await;
    assert_eq!(short.status(), 200);
    assert_eq!(short.bytes().await.unwrap().len(), 240 * 2);
    while let Some(c) = long.chunk().await.unwrap() {
        got += c.len();
    }
    assert_eq!(got, LONG_STEPS * 240 * 2, "the long request is whole");
    let metrics = s.get_text("/metrics").await;
    let capacity = metrics
        .lines()
        .find(|l| l.starts_with("chatterbox_batch_capacity_streams{"))
        .unwrap_or_default()
        .to_string();
    s.stop().await;
    (fake.log(), capacity)
}

fn joined_while_long_spoke(log: &[String]) -> bool {
    let at = |e: &str| log.iter().position(|l| l == e).unwrap();
    at("admitted:short") < at("done:long")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_seated_only_while_the_rounds_keep_pace() {
    // 2 ms rounds: two requests are forecast at 3 ms, within 24 ms (60 % of a token's 40 ms),
    // and so are all four slots
    let (quick, capacity) =
        long_then_short(Duration::from_millis(2), ServerConfig::default()).await;
    assert!(joined_while_long_spoke(&quick), "{quick:?}");
    assert!(capacity.contains("model=\"chatterbox\"} 4"), "{capacity:?}");
    // 30 ms rounds are already past it: the short request waits for the long one to finish,
    // and /metrics says the batch keeps no stream fed
    let (slow, capacity) =
        long_then_short(Duration::from_millis(30), ServerConfig::default()).await;
    assert!(!joined_while_long_spoke(&slow), "{slow:?}");
    assert!(capacity.contains("model=\"chatterbox\"} 0"), "{capacity:?}");
    // seated by slot, it joins all the same
    let by_slot = ServerConfig::default().with_capacity_admission(false);
    let (slots, _) = long_then_short(Duration::from_millis(30), by_slot).await;
    assert!(joined_while_long_spoke(&slots), "{slots:?}");
}
