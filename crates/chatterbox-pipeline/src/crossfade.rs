//! Joining the audio of consecutive text chunks with a linear crossfade, streaming (no
//! counterpart in the reference, which speaks the whole text at once).

/// Streams segments out while holding back only the last `len` samples of the current one,
/// which are blended into the head of the next one. A segment may arrive whole ([`push`]) or in
/// parts ([`push_part`] then [`end_segment`]); the output is the same. Memory stays at one part.
///
/// [`push`]: Crossfader::push
/// [`push_part`]: Crossfader::push_part
/// [`end_segment`]: Crossfader::end_segment
#[derive(Debug, Clone)]
pub(crate) struct Crossfader {
    len: usize,
    /// The previous segment's last samples, to blend into the current one's head.
    tail: Vec<f32>,
    /// The current segment's first samples while fewer than `tail.len()` have come.
    head: Vec<f32>,
    /// Whether the current segment's head has been blended (or needs no blend).
    blended: bool,
    /// Samples of the current segment not handed out yet (at most `len` between calls).
    held: Vec<f32>,
}

impl Crossfader {
    pub(crate) fn new(len: usize) -> Self {
        Self {
            len,
            tail: Vec::new(),
            head: Vec::new(),
            blended: true,
            held: Vec::new(),
        }
    }

    /// Adds a whole segment; returns the samples that are final.
    pub(crate) fn push(&mut self, wav: Vec<f32>) -> Vec<f32> {
        let mut out = self.push_part(&wav);
        out.extend(self.end_segment());
        out
    }

    /// Adds the next samples of the current segment; returns the samples that are final.
    pub(crate) fn push_part(&mut self, part: &[f32]) -> Vec<f32> {
        let mut out = Vec::new();
        if self.blended {
            self.held.extend_from_slice(part);
        } else {
            self.head.extend_from_slice(part);
            if self.head.len() >= self.tail.len() {
                out = self.blend();
            }
        }
        out.extend(self.release());
        out
    }

    /// Ends the current segment; returns the samples that are final. Its last `len` samples
    /// are kept to blend into the next segment.
    pub(crate) fn end_segment(&mut self) -> Vec<f32> {
        let mut out = if self.blended {
            Vec::new()
        } else {
            self.blend()
        };
        let keep = self.len.min(self.held.len());
        let rest = self.held.split_off(self.held.len() - keep);
        out.append(&mut self.held);
        self.tail = rest;
        self.blended = self.tail.is_empty();
        out
    }

    /// Blends the head (or as much of the tail as it covers) with the tail: the tail fades out
    /// while the head fades in, a linear ramp over `n = min(tail, head)` samples. Returns the
    /// tail's samples before the blend.
    fn blend(&mut self) -> Vec<f32> {
        let n = self.tail.len().min(self.head.len());
        let skip = self.tail.len() - n;
        for (i, (w, t)) in self.head.iter_mut().zip(&self.tail[skip..]).enumerate() {
            let a = (i as f32 + 1.0) / (n as f32 + 1.0);
            *w = a * *w + (1.0 - a) * t;
        }
        self.tail.truncate(skip);
        self.held.append(&mut self.head);
        self.blended = true;
        std::mem::take(&mut self.tail)
    }

    /// Hands out all but the last `len` held samples (the whole segment so far is held back
    /// until its head is blended).
    fn release(&mut self) -> Vec<f32> {
        if !self.blended || self.held.len() <= self.len {
            return Vec::new();
        }
        let rest = self.held.split_off(self.held.len() - self.len);
        std::mem::replace(&mut self.held, rest)
    }

    /// The held-back samples, at the end.
    pub(crate) fn finish(&mut self) -> Vec<f32> {
        let mut out = if self.blended {
            Vec::new()
        } else {
            self.blend()
        };
        out.append(&mut self.held);
        out.append(&mut self.tail);
        self.blended = true;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_chunk_passes_through() {
        let mut c = Crossfader::new(3);
        let mut out = c.push(vec![1.0, 2.0, 3.0, 4.0, 5.0]);
        out.extend(c.finish());
        assert_eq!(out, vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn two_chunks_overlap_by_len() {
        let mut c = Crossfader::new(3);
        let mut out = c.push(vec![1.0; 5]);
        out.extend(c.push(vec![0.0; 5]));
        out.extend(c.finish());
        // 5 + 5 - 3 samples; the 3 overlapped ones ramp from 1 to 0.
        assert_eq!(out.len(), 7);
        assert_eq!(&out[..2], &[1.0, 1.0]);
        assert!((out[2] - 0.75).abs() < 1e-6);
        assert!((out[3] - 0.5).abs() < 1e-6);
        assert!((out[4] - 0.25).abs() < 1e-6);
        assert_eq!(&out[5..], &[0.0, 0.0]);
    }

    /// Whole segments through `push`, the reference semantics, written out.
    fn joined_whole(len: usize, segments: &[Vec<f32>]) -> Vec<f32> {
        let mut out: Vec<f32> = Vec::new();
        let mut tail: Vec<f32> = Vec::new();
        for wav in segments {
            let mut wav = wav.clone();
            let n = tail.len().min(wav.len());
            let skip = tail.len() - n;
            out.extend(&tail[..skip]);
            for (i, (w, t)) in wav.iter_mut().zip(&tail[skip..]).enumerate() {
                let a = (i as f32 + 1.0) / (n as f32 + 1.0);
                *w = a * *w + (1.0 - a) * t;
            }
            let keep = len.min(wav.len());
            tail = wav.split_off(wav.len() - keep);
            out.extend(wav);
        }
        out.extend(tail);
        out
    }

    proptest::proptest! {
        /// Segments given in parts of any size join exactly as given whole, and every call
        /// holds back at most `2 len` samples (bounded latency).
        #[test]
        fn parts_join_as_whole_segments(
            len in 0usize..12,
            segments in proptest::collection::vec(
                proptest::collection::vec(-1.0f32..1.0, 0..30), 1..5),
            cuts in proptest::collection::vec(1usize..9, 1..8),
        ) {
            let want = joined_whole(len, &segments);
            let mut whole = Crossfader::new(len);
            let mut got_whole = Vec::new();
            for s in &segments {
                got_whole.extend(whole.push(s.clone()));
            }
            got_whole.extend(whole.finish());
            proptest::prop_assert_eq!(&got_whole, &want);

            let mut parts = Crossfader::new(len);
            let mut got = Vec::new();
            let mut cut = cuts.iter().cycle();
            for s in &segments {
                let mut rest: &[f32] = s;
                while !rest.is_empty() {
                    let k = (*cut.next().unwrap_or(&1)).min(rest.len());
                    got.extend(parts.push_part(&rest[..k]));
                    rest = &rest[k..];
                    let buffered = parts.tail.len() + parts.head.len() + parts.held.len();
                    proptest::prop_assert!(buffered <= 2 * len, "{buffered} samples held");
                }
                got.extend(parts.end_segment());
            }
            got.extend(parts.finish());
            proptest::prop_assert_eq!(got, want);
        }
    }
}
