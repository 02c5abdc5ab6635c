//! Checkpoint key names as errors report them: with the `VarBuilder`'s prefix, so a missing
//! tensor reads `flow.input_embedding.weight`, not `input_embedding.weight`.
use candle_nn::VarBuilder;

/// `name` under `vb`'s prefix (`prefix.name`, or `name` at the root).
pub(crate) fn full_key(vb: &VarBuilder, name: &str) -> String {
    let prefix = vb.prefix();
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}
