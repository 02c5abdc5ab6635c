//! Port of `AlignmentStreamAnalyzer` (chatterbox/models/t3/inference/alignment_stream_analyzer.py
//! of the multilingual releases, chatterbox-tts 0.1.4-0.1.6; removed upstream before 5de7a54):
//! optional, off by default ([`crate::GenerateOptions::alignment`]).
//!
//! The multilingual T3 aligns speech to text in a few attention heads. The analyzer reads the
//! attention of three (layer, head) pairs of the conditional CFG row over the text span, tracks
//! the attended text position, and edits the CFG-combined logits before the repetition penalty:
//! the stop token is suppressed while the text is not nearly read, and forced on a long tail,
//! an alignment repetition or the same token twice in a row.
//!
//! The same analyzer without its edits ([`AlignmentAnalyzerConfig::tracking`]) only follows
//! the text: it records the text position of every token drawn
//! ([`crate::TokenStream::text_positions`]), which the pipeline turns into word timings for
//! captions, and leaves the tokens as they are with the analyzer off.
//!
//! Cost when on: only the requested heads' `softmax(q kᵀ / √d)` rows are computed (no eager
//! attention for the whole model), and each step reads `3 × text_len` floats to the host for
//! the state machine, a second host sync per token; decode steps run eagerly (no CUDA graph).
//! When off, nothing of this runs.
mod analyzer;
mod run;

pub use analyzer::{
    AlignmentAnalysisResult, AlignmentAnalyzerConfig, AlignmentStreamAnalyzer, LLAMA_ALIGNED_HEADS,
};
pub(crate) use run::AlignmentRun;
