//! `chatterbox speak` and `chatterbox vc` end to end on the tiny random checkpoint of the
//! committed pipeline fixtures (parity/fixtures/pipeline/english.*, vc.*), laid out as a
//! hub-layout checkpoint directory.
#[path = "../common/mod.rs"]
mod common;
mod support;

#[cfg(unix)]
mod interrupt;
mod speak;
mod stream;
mod vc;
mod watermark;
