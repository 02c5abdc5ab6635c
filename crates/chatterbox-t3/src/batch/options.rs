//! The sizes of a [`BatchDecoder`]: its slots, their positions, the attention bucket, CUDA
//! graphs and the prefill budget of an admission round.
#[cfg(doc)]
use super::BatchDecoder;
use crate::generate::DEFAULT_GRAPH_BUCKET;

/// Sizes of a [`BatchDecoder`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchOptions {
    /// Requests decoded at once. Default: 16.
    pub slots: usize,
    /// Sequence positions per request (prompt plus generated tokens); a request needing more
    /// is refused at admission. Default: 1500.
    pub positions: usize,
    /// Attention-length bucket (positions) of the masked attention; each step attends over
    /// the smallest multiple covering its longest request. Default: [`DEFAULT_GRAPH_BUCKET`].
    pub bucket: usize,
    /// On CUDA, replay steps as CUDA graphs (one per slot-count and attention bucket).
    /// Default: `true`.
    pub cuda_graphs: bool,
    /// Padded prompt positions (rows × longest prompt) one [`BatchDecoder::admit_queued`]
    /// call prefills at most; the queued requests beyond wait for the next call (one request
    /// always goes). Its keys and values are the call's transient memory. Default: 8192.
    pub prefill_positions: usize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            slots: 16,
            positions: 1500,
            bucket: DEFAULT_GRAPH_BUCKET,
            cuda_graphs: true,
            prefill_positions: 8192,
        }
    }
}

impl BatchOptions {
    /// Sets [`BatchOptions::slots`].
    pub fn with_slots(mut self, slots: usize) -> Self {
        self.slots = slots;
        self
    }

    /// Sets [`BatchOptions::positions`].
    pub fn with_positions(mut self, positions: usize) -> Self {
        self.positions = positions;
        self
    }

    /// Sets [`BatchOptions::bucket`].
    pub fn with_bucket(mut self, bucket: usize) -> Self {
        self.bucket = bucket;
        self
    }

    /// Sets [`BatchOptions::cuda_graphs`].
    pub fn with_cuda_graphs(mut self, on: bool) -> Self {
        self.cuda_graphs = on;
        self
    }

    /// Sets [`BatchOptions::prefill_positions`].
    pub fn with_prefill_positions(mut self, positions: usize) -> Self {
        self.prefill_positions = positions;
        self
    }
}
