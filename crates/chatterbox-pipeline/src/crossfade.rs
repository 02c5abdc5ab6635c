//! Joining the audio of consecutive text chunks with a linear crossfade, streaming (no
//! counterpart in the reference, which speaks the whole text at once).

/// Streams chunks out while holding back only the last `len` samples of the previous chunk,
/// which are blended into the head of the next one. Memory stays at one chunk.
#[derive(Debug, Clone)]
pub(crate) struct Crossfader {
    len: usize,
    tail: Vec<f32>,
}

impl Crossfader {
    pub(crate) fn new(len: usize) -> Self {
        Self {
            len,
            tail: Vec::new(),
        }
    }

    /// Adds a chunk; returns the samples that are final.
    pub(crate) fn push(&mut self, mut wav: Vec<f32>) -> Vec<f32> {
        let n = self.tail.len().min(wav.len());
        if n > 0 {
            // The tail fades out while the new head fades in (a linear ramp over n samples).
            let skip = self.tail.len() - n;
            let mut out: Vec<f32> = self.tail[..skip].to_vec();
            for (i, (w, t)) in wav.iter_mut().zip(&self.tail[skip..]).enumerate() {
                let a = (i as f32 + 1.0) / (n as f32 + 1.0);
                *w = a * *w + (1.0 - a) * t;
            }
            out.extend(self.hold(wav));
            return out;
        }
        let mut out = std::mem::take(&mut self.tail);
        out.extend(self.hold(wav));
        out
    }

    fn hold(&mut self, mut wav: Vec<f32>) -> Vec<f32> {
        let keep = self.len.min(wav.len());
        self.tail = wav.split_off(wav.len() - keep);
        wav
    }

    /// The held-back tail, at the end.
    pub(crate) fn finish(&mut self) -> Vec<f32> {
        std::mem::take(&mut self.tail)
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
}
