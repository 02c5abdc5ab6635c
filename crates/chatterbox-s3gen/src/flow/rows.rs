//! The flow over several requests at once, each with its own tokens, reference voice, noise and
//! `finalize` (issue 27; the reference runs one request per `inference` call). Rows are padded
//! to the longest and masked as flow.py masks a padded training batch, with one difference that
//! makes every row equal its own call: padded frames are zeroed before the encoder's look-ahead
//! convolution (see `UpsampleConformerEncoder::forward_lengths`). Everything after that is causal
//! or key-masked, so a row's frames never see another row's or the padding.
//!
//! Where the estimator's calls replay kept CUDA graphs
//! ([`replays_graphs`](CausalMaskedDiffWithXvec::replays_graphs)), the frames are padded
//! further, to a bucket ([`frame_bucket`]): calls of one bucket and number of rows then have
//! one shape, whose estimator graph later calls replay (see `estimator_graphs.rs`). The extra
//! frames are padding like any other.

use super::mask::Lengths;
use super::masked_diff::{token_rows, CausalMaskedDiffWithXvec, FlowPrompt};
use super::ops::KeyBias;
use crate::{Result, S3GenError};
use candle_core::{DType, Module, Tensor};

/// One request of [`CausalMaskedDiffWithXvec::inference_rows`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FlowRow {
    /// Speech tokens `(n,)` or `(1, n)`, every id below `vocab_size`.
    pub tokens: Tensor,
    /// The reference voice, batch 1.
    pub prompt: FlowPrompt,
    /// The solver's initial noise `(1, 80, T)`, `T` from
    /// [`noise_shape`](CausalMaskedDiffWithXvec::noise_shape)`(1, n_prompt, n, finalize)`. A
    /// meanflow model's `noised_mels` go into its last frames beforehand (as `inference` puts
    /// them).
    pub noise: Tensor,
    /// Whether the row's token stream is complete (see [`super::FlowOptions::finalize`]).
    pub finalize: bool,
}

impl FlowRow {
    /// A row of `tokens` in the voice of `prompt`.
    pub fn new(tokens: Tensor, prompt: FlowPrompt, noise: Tensor, finalize: bool) -> Self {
        Self {
            tokens,
            prompt,
            noise,
            finalize,
        }
    }
}

/// A row's sizes, in tokens and frames.
struct RowShape {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    /// Prompt mel frames.
    prompt_frames: usize,
    /// Frames the solver makes (prompt included): the noise's length.
    frames: usize,
}

impl CausalMaskedDiffWithXvec {
    /// [`inference`](Self::inference) of every row in one batched call with `n_timesteps`
    /// Euler steps (`None`: the model's default); returns each row's mel `(1, 80, frames)`, f32,
    /// equal to the row's own `inference` call up to float rounding.
    pub fn inference_rows(
        &self,
        rows: &[FlowRow],
        n_timesteps: Option<usize>,
    ) -> Result<Vec<Tensor>> {
        let cfg = &self.cfg;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let shapes = rows
            .iter()
            .map(|r| self.row_shape(r))
            .collect::<Result<Vec<_>>>()?;
        let _span = tracing::debug_span!("flow_rows", rows = rows.len()).entered();
        let b = rows.len();
        let dev = self.input_embedding.embeddings().device().clone();
        let n_max = shapes
            .iter()
            .map(|s| s.prompt.len() + s.tokens.len())
            .max()
            .unwrap_or(0);
        let t_longest = shapes.iter().map(|s| s.frames).max().unwrap_or(0);
        let t_max = if self.replays_graphs() {
            frame_bucket(t_longest)
        } else {
            t_longest
        };

        // prompt ++ tokens, right-padded with id 0 and its embedding zeroed (flow.py's `* mask`)
        let mut ids = Vec::with_capacity(b * n_max);
        let mut token_lens = Vec::with_capacity(b);
        for s in &shapes {
            let n = s.prompt.len() + s.tokens.len();
            ids.extend(s.prompt.iter().chain(&s.tokens).copied());
            ids.extend(std::iter::repeat_n(0, n_max - n));
            token_lens.push(n);
        }
        let token_lens = Lengths::new(token_lens, n_max);
        let xs = self
            .input_embedding
            .forward(&Tensor::from_vec(ids, (b, n_max), &dev)?)?;
        let xs = if token_lens.has_padding() {
            let keep = token_lens
                .non_pad_mask(&dev)?
                .to_dtype(xs.dtype())?
                .reshape((b, n_max, 1))?;
            xs.broadcast_mul(&keep)?
        } else {
            xs
        };
        let (h, _) = self.encoder.forward_lengths(&xs, &token_lens, true)?;
        let h = h.narrow(1, 0, t_longest)?;
        let mu = self.encoder_proj.forward(&h)?.transpose(1, 2)?; // (b, 80, T)
        let mu = pad_frames(&mu, t_max)?;
        let dt = mu.dtype();

        // per row: its prompt mel at the start of `cond`, its noise, zeros after its frames
        let mut cond = Vec::with_capacity(b);
        let mut noise = Vec::with_capacity(b);
        let mut emb = Vec::with_capacity(b);
        for (r, s) in rows.iter().zip(&shapes) {
            let pfeat = r.prompt.prompt_feat.to_dtype(dt)?.transpose(1, 2)?; // (1, 80, P)
            cond.push(pad_frames(&pfeat, t_max)?);
            noise.push(pad_frames(&r.noise.to_dtype(DType::F32)?, t_max)?);
            emb.push(r.prompt.embedding.reshape((1, ()))?);
            debug_assert_eq!(pfeat.dim(2)?, s.prompt_frames);
        }
        let cond = Tensor::cat(&cond, 0)?;
        let noise = Tensor::cat(&noise, 0)?;
        let spks = self.speaker(&Tensor::cat(&emb, 0)?)?;

        let frames = Lengths::new(shapes.iter().map(|s| s.frames).collect(), t_max);
        let masks = if frames.has_padding() {
            let est = self.decoder.estimator().dtype();
            let mul = frames
                .non_pad_mask(&dev)?
                .to_dtype(est)?
                .reshape((b, t_max, 1))?;
            frames
                .key_bias(-1.0e10, est, &dev)?
                .map(|bias| -> Result<_> { Ok((mul, KeyBias::new(bias)?)) })
                .transpose()?
        } else {
            None
        };
        let steps = n_timesteps.unwrap_or(if cfg.meanflow() { 2 } else { 10 });
        let feat = self
            .decoder
            .solve(&mu, masks, steps, &spks, &cond, &noise, None)?;
        shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                Ok(feat
                    .narrow(0, i, 1)?
                    .narrow(2, s.prompt_frames, s.frames - s.prompt_frames)?
                    .contiguous()?)
            })
            .collect()
    }

    /// Checks a row as [`encode`](Self::encode) checks its inputs.
    fn row_shape(&self, row: &FlowRow) -> Result<RowShape> {
        let cfg = &self.cfg;
        let ratio = cfg.token_mel_ratio;
        let one = |rows: Vec<Vec<u32>>, what: &'static str| match <[Vec<u32>; 1]>::try_from(rows) {
            Ok([r]) => Ok(r),
            Err(rows) => Err(S3GenError::InvalidInput {
                what,
                reason: format!(
                    "a flow row holds one request, got a batch of {}",
                    rows.len()
                ),
            }),
        };
        let tokens = one(token_rows(&row.tokens, "token", cfg.vocab_size)?, "token")?;
        let prompt = one(
            token_rows(&row.prompt.prompt_token, "prompt_token", cfg.vocab_size)?,
            "prompt_token",
        )?;
        if tokens.is_empty() {
            return Err(S3GenError::InvalidInput {
                what: "token",
                reason: "no speech tokens".into(),
            });
        }
        let prompt_frames = ratio * prompt.len();
        let (pb, pt, pc) = row.prompt.prompt_feat.dims3()?;
        if (pb, pt, pc) != (1, prompt_frames, cfg.output_size) {
            return Err(S3GenError::InvalidInput {
                what: "prompt",
                reason: format!(
                    "prompt_feat is {:?} but {} prompt tokens need (1, {prompt_frames}, {})",
                    row.prompt.prompt_feat.dims(),
                    prompt.len(),
                    cfg.output_size
                ),
            });
        }
        if row.prompt.embedding.elem_count() != cfg.spk_embed_dim {
            return Err(S3GenError::InvalidInput {
                what: "embedding",
                reason: format!(
                    "expected one x-vector of {}, got {:?}",
                    cfg.spk_embed_dim,
                    row.prompt.embedding.dims()
                ),
            });
        }
        let (_, _, frames) = self.noise_shape(1, prompt.len(), tokens.len(), row.finalize);
        if frames <= prompt_frames {
            return Err(S3GenError::InvalidInput {
                what: "token",
                reason: format!(
                    "{} tokens leave no frame to generate with finalize={} (look-ahead {} \
                     tokens)",
                    tokens.len(),
                    row.finalize,
                    cfg.pre_lookahead_len
                ),
            });
        }
        if row.noise.dims() != [1, cfg.output_size, frames] {
            return Err(S3GenError::InvalidInput {
                what: "noise",
                reason: format!(
                    "expected shape {:?}, got {:?}",
                    [1, cfg.output_size, frames],
                    row.noise.dims()
                ),
            });
        }
        Ok(RowShape {
            prompt,
            tokens,
            prompt_frames,
            frames,
        })
    }
}

/// The frames a batched call of `t` frames is padded to where graphs are kept: a multiple of
/// 64 up to 1024 frames, of 128 up to 2048, of 256 beyond (1.3, 2.6 and 5.1 s of mel; behind
/// a 10 s prompt's 500 frames, at most ~12 % more frames).
pub(crate) fn frame_bucket(t: usize) -> usize {
    let step = match t {
        0..=1024 => 64,
        1025..=2048 => 128,
        _ => 256,
    };
    t.div_ceil(step) * step
}

/// `x (b, C, t)` followed by zeros to `t_max` frames.
fn pad_frames(x: &Tensor, t_max: usize) -> Result<Tensor> {
    let t = x.dim(2)?;
    Ok(x.pad_with_zeros(2, 0, t_max - t)?)
}

#[cfg(test)]
mod tests {
    use super::frame_bucket;

    #[test]
    fn frame_buckets_round_up_by_a_step_that_grows_with_the_call() {
        assert_eq!(frame_bucket(0), 0);
        assert_eq!(frame_bucket(1), 64);
        assert_eq!(frame_bucket(520), 576);
        assert_eq!(frame_bucket(576), 576);
        assert_eq!(frame_bucket(1024), 1024);
        assert_eq!(frame_bucket(1025), 1152);
        assert_eq!(frame_bucket(2049), 2304);
        for t in 1..5000 {
            let b = frame_bucket(t);
            assert!(b >= t && b - t < 64.max(t / 8), "{t} -> {b}");
        }
    }
}
