//! Progress events of long generations (no counterpart in the reference), for progress bars.

/// What `generate` reports while it runs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Progress {
    /// Generation of chunk `index` (of `total`) starts; `chars` characters of text.
    ChunkStarted {
        /// Chunk index, from 0.
        index: usize,
        /// Number of chunks.
        total: usize,
        /// Characters in the chunk.
        chars: usize,
    },
    /// T3 drew another speech token for chunk `chunk`.
    Tokens {
        /// Chunk index.
        chunk: usize,
        /// Tokens drawn so far in this chunk.
        generated: usize,
        /// The most it will draw.
        max: usize,
    },
    /// Chunk `index` is synthesised: `samples` samples at 24 kHz.
    ChunkFinished {
        /// Chunk index.
        index: usize,
        /// Number of chunks.
        total: usize,
        /// Samples produced for it (before the crossfade).
        samples: usize,
    },
}
