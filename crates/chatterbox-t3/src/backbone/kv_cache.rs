//! A key/value cache preallocated for a whole generation and written in place: no per-step
//! concatenation, and its storage never moves (a captured CUDA graph can keep pointers to it).
use crate::{Result, T3Error};
use candle_core::{DType, Device, Tensor};

/// Keys and values of one attention layer, `[batch, heads, capacity, head_dim]` each.
#[derive(Debug, Clone)]
pub struct KvCache {
    k: Tensor,
    v: Tensor,
    len: usize,
}

impl KvCache {
    /// A zeroed cache. Zeroing matters for masked attention over unwritten slots: an additive
    /// `-inf` mask does not hide NaN garbage.
    pub fn new(
        batch: usize,
        heads: usize,
        capacity: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let shape = (batch, heads, capacity, head_dim);
        Ok(Self {
            k: Tensor::zeros(shape, dtype, device)?,
            v: Tensor::zeros(shape, dtype, device)?,
            len: 0,
        })
    }

    /// Positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.k.dims()[2]
    }

    /// Positions written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets the contents (the storage is kept and overwritten by the next generation).
    pub fn reset(&mut self) {
        self.len = 0;
    }

    /// The whole key buffer (for graph capture: its storage is fixed).
    pub fn keys_buffer(&self) -> &Tensor {
        &self.k
    }

    /// The whole value buffer.
    pub fn values_buffer(&self) -> &Tensor {
        &self.v
    }

    /// The first `rows` batch rows as a cache of their own that shares this one's storage
    /// (a batched step over the occupied slots only).
    pub(crate) fn first_rows(&self, rows: usize) -> Result<Self> {
        Ok(Self {
            k: self.k.narrow(0, 0, rows)?,
            v: self.v.narrow(0, 0, rows)?,
            len: self.len,
        })
    }

    /// Copies positions `0..len` of `src`'s rows `src_rows` (`b` of them: `rows` or 1) into
    /// rows `row..row + rows` of this cache, in place.
    pub(crate) fn copy_rows_from(
        &self,
        src: &KvCache,
        src_rows: std::ops::Range<usize>,
        len: usize,
        row: usize,
        rows: usize,
    ) -> Result<()> {
        self.check_room(len)?;
        for (dst, src) in [(&self.k, &src.k), (&self.v, &src.v)] {
            let (_, h, _, d) = src.dims4()?;
            let b = src_rows.len();
            let s = src.narrow(0, src_rows.start, b)?.narrow(2, 0, len)?;
            let s = if b == rows {
                s.contiguous()?
            } else {
                s.broadcast_as((rows, h, len, d))?.contiguous()?
            };
            dst.narrow(0, row, rows)?.slice_set(&s, 2, 0)?;
        }
        Ok(())
    }

    /// Writes `[B, H, T, D]` keys and values at positions `len..len + T` (host offset: prefill).
    /// A batch-1 chunk is written to every row (a prefix shared by the CFG rows).
    pub(crate) fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<()> {
        let (b, h, t, d) = k.dims4()?;
        self.check_room(self.len + t)?;
        let rows = self.k.dims()[0];
        let (k, v) = if b == rows {
            (k.clone(), v.clone())
        } else {
            let shape = (rows, h, t, d);
            (
                k.broadcast_as(shape)?.contiguous()?,
                v.broadcast_as(shape)?.contiguous()?,
            )
        };
        self.k.slice_set(&k, 2, self.len)?;
        self.v.slice_set(&v, 2, self.len)?;
        self.len += t;
        Ok(())
    }

    /// Keys and values of positions `0..len` for the first `batch` rows (views), after a
    /// chunk was appended.
    pub(crate) fn written(&self, batch: usize) -> Result<(Tensor, Tensor)> {
        Ok((
            self.k.narrow(2, 0, self.len)?.narrow(0, 0, batch)?,
            self.v.narrow(2, 0, self.len)?.narrow(0, 0, batch)?,
        ))
    }

    /// Writes one step's `[B, H, 1, D]` keys and values at the device-side position held (as
    /// u32, broadcast to `[B, H, 1, D]`) in `index`: capturable, no host offset.
    pub(crate) fn write_step(
        &mut self,
        k: &Tensor,
        v: &Tensor,
        index: &Tensor,
        pos: usize,
    ) -> Result<()> {
        self.check_room(pos + 1)?;
        self.k.scatter_set(index, k, 2)?;
        self.v.scatter_set(index, v, 2)?;
        self.mark_step(pos)
    }

    /// Records that a step wrote position `pos` (after checking it fits): for kernels that
    /// write the buffers themselves.
    pub(crate) fn mark_step(&mut self, pos: usize) -> Result<()> {
        self.check_room(pos + 1)?;
        self.len = self.len.max(pos + 1);
        Ok(())
    }

    /// Keys of positions `0..n` (a view).
    pub(crate) fn keys(&self, n: usize) -> Result<Tensor> {
        Ok(self.k.narrow(2, 0, n)?)
    }

    /// Values of positions `0..n` (a view).
    pub(crate) fn values(&self, n: usize) -> Result<Tensor> {
        Ok(self.v.narrow(2, 0, n)?)
    }

    fn check_room(&self, need: usize) -> Result<()> {
        if need > self.capacity() {
            return Err(T3Error::SequenceTooLong {
                what: "preallocated KV cache",
                len: need,
                max: self.capacity(),
            });
        }
        Ok(())
    }
}
