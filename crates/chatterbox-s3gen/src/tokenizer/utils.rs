//! Port of the helpers of s3tokenizer/utils.py that the v2 tokenizer uses: `make_non_pad_mask`,
//! `mask_to_bias`, `padding` and `merge_tokenized_segments`.
use crate::{Result, S3GenError};
use candle_core::{Device, Tensor};

/// `make_non_pad_mask(lengths, max_len)`: `(batch, max_len)` f32, 1 on the first `lengths[i]`
/// frames of row `i`, 0 after.
pub fn make_non_pad_mask(lengths: &[usize], max_len: usize, device: &Device) -> Result<Tensor> {
    let mut m = vec![0f32; lengths.len() * max_len];
    for (row, &l) in m.chunks_exact_mut(max_len.max(1)).zip(lengths) {
        row[..l.min(max_len)].fill(1.0);
    }
    Ok(Tensor::from_vec(m, (lengths.len(), max_len), device)?)
}

/// `mask_to_bias`: `(1 - mask) * -1e10`, the additive attention bias.
pub fn mask_to_bias(mask: &Tensor) -> Result<Tensor> {
    Ok(((1.0 - mask)? * -1.0e10)?)
}

/// `padding`: stacks `(n_mels, frames_i)` matrices (row-major, `n_mels` rows) into one
/// zero-padded `(batch, n_mels, max frames)` tensor and returns it with the frame counts.
pub(crate) fn padding(
    mels: &[(Vec<f32>, usize)],
    n_mels: usize,
    device: &Device,
) -> Result<(Tensor, Vec<usize>)> {
    let lens: Vec<usize> = mels.iter().map(|(_, frames)| *frames).collect();
    let t = lens.iter().copied().max().unwrap_or(0);
    let mut data = vec![0f32; mels.len() * n_mels * t];
    for (b, (mel, frames)) in mels.iter().enumerate() {
        if mel.len() != n_mels * frames {
            return Err(S3GenError::InvalidInput {
                what: "mel",
                reason: format!("{} values for {n_mels} x {frames}", mel.len()),
            });
        }
        for (r, row) in mel.chunks_exact((*frames).max(1)).take(n_mels).enumerate() {
            let start = (b * n_mels + r) * t;
            data[start..start + frames].copy_from_slice(&row[..*frames]);
        }
    }
    let mel = Tensor::from_vec(data, (mels.len(), n_mels, t), device)?;
    Ok((mel, lens))
}

/// Python's `seq[start:stop]` bounds for a sequence of `len` items (negative indices count
/// from the end, out-of-range ones are clamped, an inverted range is empty).
fn py_slice(len: usize, start: isize, stop: isize) -> std::ops::Range<usize> {
    let clamp = |i: isize| -> usize {
        let i = if i < 0 { i + len as isize } else { i };
        i.clamp(0, len as isize) as usize
    };
    let (a, b) = (clamp(start), clamp(stop));
    a..b.max(a)
}

/// `merge_tokenized_segments(segments, overlap, token_rate)`: keeps each segment's middle,
/// dropping `overlap / 2` seconds of tokens (integer division) on both sides of every overlap.
pub fn merge_tokenized_segments(
    segments: &[Vec<u32>],
    overlap: usize,
    token_rate: usize,
) -> Vec<u32> {
    let overlap_tokens = ((overlap / 2) * token_rate) as isize;
    let mut merged = Vec::new();
    for (i, tokens) in segments.iter().enumerate() {
        let l = if i == 0 { 0 } else { overlap_tokens };
        let r = if i != segments.len() - 1 {
            -overlap_tokens
        } else {
            tokens.len() as isize
        };
        merged.extend_from_slice(&tokens[py_slice(tokens.len(), l, r)]);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_slices() {
        // the reference's own examples of list slicing semantics
        assert_eq!(py_slice(10, 2, -3), 2..7);
        assert_eq!(py_slice(10, 0, -50), 0..0);
        assert_eq!(py_slice(30, 50, 30), 30..30);
        assert_eq!(py_slice(5, -7, 3), 0..3);
    }

    #[test]
    fn merge_keeps_middles() {
        let seg = |a: u32, n: u32| (a..a + n).collect::<Vec<u32>>();
        // 3 segments, 4 s overlap at 25 Hz: drop 50 tokens on each side of each overlap
        let segs = [seg(0, 750), seg(1000, 750), seg(2000, 120)];
        let m = merge_tokenized_segments(&segs, 4, 25);
        assert_eq!(m.len(), 700 + 650 + 70);
        assert_eq!(m[699], 699);
        assert_eq!(m[700], 1050);
        assert_eq!(m[1349], 1699);
        assert_eq!(m[1350], 2050);
        // a last segment shorter than the dropped overlap contributes nothing
        let m = merge_tokenized_segments(&[seg(0, 750), seg(1000, 30)], 4, 25);
        assert_eq!(m.len(), 700);
    }

    #[test]
    fn non_pad_mask_docstring_example() -> Result<()> {
        // `make_non_pad_mask(torch.tensor([5, 3, 2]))` in the reference's docstring
        let m = make_non_pad_mask(&[5, 3, 2], 5, &Device::Cpu)?.to_vec2::<f32>()?;
        let row = |n: usize| {
            (0..5)
                .map(|i| if i < n { 1.0 } else { 0.0 })
                .collect::<Vec<f32>>()
        };
        assert_eq!(m, vec![row(5), row(3), row(2)]);
        let bias = mask_to_bias(&make_non_pad_mask(&[1, 0], 2, &Device::Cpu)?)?.to_vec2::<f32>()?;
        assert_eq!(bias, vec![vec![0.0, -1e10], vec![-1e10, -1e10]]);
        Ok(())
    }
}
