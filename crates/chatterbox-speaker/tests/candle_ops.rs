//! The same fixtures as `parity.rs` through candle tensor ops (`with_cpu_kernels(false)`): the
//! code path CUDA and Metal run, checked on the CPU, or on a GPU with `CHATTERBOX_DEVICE=cuda`
//! and `--features cuda` (see `common::device`).
mod common;

use chatterbox_testkit::Row;

#[test]
fn candle_ops_match_the_reference() {
    let rows = common::suite(false).run();
    println!("{}", Row::header());
    for r in &rows {
        println!("{}", r.line());
    }
    let failed: Vec<String> = rows.iter().filter(|r| !r.passed()).map(Row::line).collect();
    assert!(!rows.is_empty(), "no rows");
    assert!(failed.is_empty(), "failed:\n{}", failed.join("\n"));
}
