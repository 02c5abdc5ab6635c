//! `chatterbox speak` and `chatterbox vc` end to end on the tiny random checkpoint of the
//! committed pipeline fixtures (parity/fixtures/pipeline/english.*, vc.*), laid out as a
//! hub-layout checkpoint directory; and `chatterbox serve` as several replicas (behind HAProxy,
//! on one voice library) on that checkpoint.
#[path = "../common/mod.rs"]
mod common;
mod support;

#[cfg(unix)]
mod interrupt;
#[cfg(unix)]
mod replicas;
#[cfg(unix)]
mod served;
#[cfg(unix)]
mod shared_voices;
mod speak;
mod stream;
mod vc;
mod watermark;
