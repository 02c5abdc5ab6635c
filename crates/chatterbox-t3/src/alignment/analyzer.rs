//! The analyzer's host-side state machine (`AlignmentStreamAnalyzer.step`).

/// `LLAMA_ALIGNED_HEADS`: the (layer, head) pairs of Llama-520M whose attention follows the
/// text, in the reference's order.
pub const LLAMA_ALIGNED_HEADS: [(usize, usize); 3] = [(12, 15), (13, 11), (9, 2)];

/// The logit the reference writes to suppress (`-2**15`) or force (`+2**15`) a token.
const LOGIT_EDIT: f32 = 32768.0;

/// Settings of the alignment-stream analyzer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AlignmentAnalyzerConfig {
    /// `(layer, head)` pairs whose attention weights are averaged into the alignment matrix.
    /// Default: [`LLAMA_ALIGNED_HEADS`] (needs >= 14 layers of >= 16 heads).
    pub aligned_heads: Vec<(usize, usize)>,
    /// Whether the analyzer edits the logits (the reference's behaviour: suppress or force the
    /// stop token). `false` only follows the text: the same attention rows and state machine,
    /// the text position of every step recorded ([`crate::TokenStream::text_positions`]), and
    /// the tokens drawn exactly as with the analyzer off (word timings for captions).
    /// Default: `true`.
    pub edit_logits: bool,
}

impl Default for AlignmentAnalyzerConfig {
    fn default() -> Self {
        Self {
            aligned_heads: LLAMA_ALIGNED_HEADS.to_vec(),
            edit_logits: true,
        }
    }
}

impl AlignmentAnalyzerConfig {
    /// The analyzer over other `(layer, head)` pairs (tiny test models).
    pub fn with_heads(aligned_heads: Vec<(usize, usize)>) -> Self {
        Self {
            aligned_heads,
            edit_logits: true,
        }
    }

    /// The analyzer that only follows the text and never edits the logits (see
    /// [`AlignmentAnalyzerConfig::edit_logits`]): the generation's tokens are those of the
    /// analyzer off.
    pub fn tracking(mut self) -> Self {
        self.edit_logits = false;
        self
    }
}

/// `AlignmentAnalysisResult` of one step, plus the logits edits the step made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AlignmentAnalysisResult {
    /// Still waiting for a clean start (no strong early-text activation yet).
    pub false_start: bool,
    /// Attention on the last text tokens lasted too long after completion.
    pub long_tail: bool,
    /// Attention went back to earlier text after completion (`alignment_repetition`).
    pub repetition: bool,
    /// The same token was generated twice in a row (`token_repetition`).
    pub token_repetition: bool,
    /// The attended position jumped too far (the position was not updated).
    pub discontinuity: bool,
    /// The attended position reached the last 3 text tokens (sticky).
    pub complete: bool,
    /// Approximate position in the text tokens (`text_position`).
    pub position: usize,
    /// The stop-token logit was set to `-2**15` (text not nearly read).
    pub eos_suppressed: bool,
    /// Every logit was set to `-2**15` and the stop token's to `+2**15`.
    pub eos_forced: bool,
}

/// Host-side state of `AlignmentStreamAnalyzer`: fed, per step, the attention of the aligned
/// heads over the text span; returns the edits to make to the CFG-combined logits.
#[derive(Debug, Clone)]
pub struct AlignmentStreamAnalyzer {
    /// `(i, j)`: the text tokens' positions in the prompt (`len_cond..len_cond + text_len`).
    text_tokens_slice: (usize, usize),
    eos_idx: u32,
    /// Alignment matrix `[rows, S]`, row-major.
    alignment: Vec<f32>,
    rows: usize,
    curr_frame_pos: usize,
    text_position: usize,
    started: bool,
    started_at: Option<usize>,
    complete: bool,
    completed_at: Option<usize>,
    generated_tokens: Vec<u32>,
    /// The latest step's per-head text-span rows `[heads, rows, S]` and its `(heads, rows)`.
    last_aligned_attns: (Vec<f32>, usize, usize),
}

impl AlignmentStreamAnalyzer {
    /// A fresh analyzer for text at prompt positions `text_tokens_slice.0..text_tokens_slice.1`
    /// and stop token `eos_idx`.
    pub fn new(text_tokens_slice: (usize, usize), eos_idx: u32) -> Self {
        Self {
            text_tokens_slice,
            eos_idx,
            alignment: Vec::new(),
            rows: 0,
            curr_frame_pos: 0,
            text_position: 0,
            started: false,
            started_at: None,
            complete: false,
            completed_at: None,
            generated_tokens: Vec::new(),
            last_aligned_attns: (Vec::new(), 0, 0),
        }
    }

    /// Text length `S` (SOT and EOT included).
    pub fn text_len(&self) -> usize {
        self.text_tokens_slice
            .1
            .saturating_sub(self.text_tokens_slice.0)
    }

    /// The text span of the prompt.
    pub fn text_tokens_slice(&self) -> (usize, usize) {
        self.text_tokens_slice
    }

    /// The stop token.
    pub fn eos_idx(&self) -> u32 {
        self.eos_idx
    }

    /// Frames analysed so far (`curr_frame_pos`).
    pub fn frames(&self) -> usize {
        self.curr_frame_pos
    }

    /// The alignment matrix so far, row-major `[rows, S]`, and its row count.
    pub fn alignment(&self) -> (&[f32], usize) {
        (&self.alignment, self.rows)
    }

    /// `last_aligned_attns` over the text span: the latest step's attention rows per aligned
    /// head, row-major `[heads, rows, S]`, with `heads` and `rows`.
    pub fn last_aligned_attns(&self) -> (&[f32], usize, usize) {
        let (v, h, r) = &self.last_aligned_attns;
        (v, *h, *r)
    }

    fn row(&self, r: usize) -> &[f32] {
        let s = self.text_len();
        &self.alignment[r * s..(r + 1) * s]
    }

    /// One `step`: `chunk` holds, per aligned head, `rows` attention rows over the text span,
    /// f32 `[heads, rows, S]` row-major (the first step: the prompt's rows after the text, then
    /// one row per step); `next_token` is the latest id of the sequence (the start token at
    /// the first step). Returns the result and the edits to apply to the logits.
    ///
    /// Deviation: with `S <= 5` the reference raises (a `max` over zero columns) once the text
    /// is complete; here the alignment repetition is then `false`.
    pub fn step(
        &mut self,
        chunk: &[f32],
        heads: usize,
        rows: usize,
        next_token: Option<u32>,
    ) -> AlignmentAnalysisResult {
        let s = self.text_len();
        self.last_aligned_attns.0.clear();
        self.last_aligned_attns.0.extend_from_slice(chunk);
        self.last_aligned_attns.1 = heads;
        self.last_aligned_attns.2 = rows;
        // aligned_attn = torch.stack(last_aligned_attns).mean(dim=0)
        let mut a_chunk = vec![0f32; rows * s];
        if heads > 0 && chunk.len() >= heads * rows * s {
            for (idx, v) in a_chunk.iter_mut().enumerate() {
                let mut acc = 0f32;
                for h in 0..heads {
                    acc += chunk[h * rows * s + idx];
                }
                *v = acc / heads as f32;
            }
        }
        // A_chunk[:, curr_frame_pos + 1:] = 0
        for r in 0..rows {
            for c in (self.curr_frame_pos + 1).min(s)..s {
                a_chunk[r * s + c] = 0.0;
            }
        }
        self.alignment.extend_from_slice(&a_chunk);
        self.rows += rows;
        let t = self.rows;

        // cur_text_posn = A_chunk[-1].argmax() (first maximum)
        let cur_text_posn = match rows {
            0 => 0,
            _ => argmax(&a_chunk[(rows - 1) * s..rows * s]),
        };
        let delta = cur_text_posn as i64 - self.text_position as i64;
        let discontinuity = !(-4 < delta && delta < 7);
        if !discontinuity {
            self.text_position = cur_text_posn;
        }

        // false_start = not started and (A[-2:, -2:].max() > 0.1 or A[:, :4].max() < 0.5)
        let false_start = !self.started && {
            let last2 = t.saturating_sub(2)..t;
            let corner = last2
                .flat_map(|r| self.row(r)[s.saturating_sub(2)..].to_vec())
                .fold(f32::NEG_INFINITY, f32::max);
            let head = (0..t)
                .flat_map(|r| self.row(r)[..s.min(4)].to_vec())
                .fold(f32::NEG_INFINITY, f32::max);
            corner > 0.1 || head < 0.5
        };
        self.started = !false_start;
        if self.started && self.started_at.is_none() {
            self.started_at = Some(t);
        }

        self.complete = self.complete || self.text_position + 3 >= s;
        if self.complete && self.completed_at.is_none() {
            self.completed_at = Some(t);
        }
        let done = self.completed_at.unwrap_or(t);

        // long_tail = complete and A[completed_at:, -3:].sum(dim=0).max() >= 5
        let long_tail = self.complete && {
            let cols = s.saturating_sub(3)..s;
            cols.map(|c| (done..t).fold(0f32, |acc, r| acc + self.row(r)[c]))
                .fold(0f32, f32::max)
                >= 5.0
        };
        // alignment_repetition = complete and A[completed_at:, :-5].max(dim=1).values.sum() > 5
        let repetition = self.complete && s > 5 && {
            (done..t).fold(0f32, |acc, r| {
                acc + self.row(r)[..s - 5]
                    .iter()
                    .copied()
                    .fold(f32::NEG_INFINITY, f32::max)
            }) > 5.0
        };

        if let Some(tok) = next_token {
            self.generated_tokens.push(tok);
            if self.generated_tokens.len() > 8 {
                let cut = self.generated_tokens.len() - 8;
                self.generated_tokens.drain(..cut);
            }
        }
        let n = self.generated_tokens.len();
        let token_repetition =
            n >= 3 && self.generated_tokens[n - 1] == self.generated_tokens[n - 2];

        let eos_suppressed = cur_text_posn + 3 < s && s > 5;
        let eos_forced = long_tail || repetition || token_repetition;
        self.curr_frame_pos += 1;
        AlignmentAnalysisResult {
            false_start,
            long_tail,
            repetition,
            token_repetition,
            discontinuity,
            complete: self.complete,
            position: self.text_position,
            eos_suppressed: eos_suppressed && !eos_forced,
            eos_forced,
        }
    }

    /// Applies a step's edits to host logits `[vocab]` (what the reference does to its tensor).
    pub fn apply(&self, result: &AlignmentAnalysisResult, logits: &mut [f32]) {
        let eos = self.eos_idx as usize;
        if result.eos_forced {
            logits.iter_mut().for_each(|v| *v = -LOGIT_EDIT);
            if let Some(v) = logits.get_mut(eos) {
                *v = LOGIT_EDIT;
            }
        } else if result.eos_suppressed {
            if let Some(v) = logits.get_mut(eos) {
                *v = -LOGIT_EDIT;
            }
        }
    }
}

/// Index of the first maximum (`torch.argmax`); NaN never wins.
fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// The logit written by the edits, for the device path.
pub(crate) const fn logit_edit() -> f32 {
    LOGIT_EDIT
}
