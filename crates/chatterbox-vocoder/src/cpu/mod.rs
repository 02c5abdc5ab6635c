//! CPU kernels for the vocoder's hot loops, used when tensors live on the CPU (every other
//! backend runs the same layers as plain candle ops).
//!
//! Nearly all of HiFT's arithmetic is in the residual blocks: stride-1 convolutions whose input
//! is a Snake activation and whose output is added to a residual. Candle's CPU `conv1d` builds a
//! full im2col matrix, multiplies, transposes the result and adds the bias in another pass, and
//! its `sin` is scalar. Here:
//!
//! - [`ResBlockKernel`] runs a whole `ResBlock` channels-last, each convolution a Winograd
//!   convolution (`winograd::WinogradConv`: F(4, 3) / F(4, 4) tiles, about half the
//!   multiply-adds of a direct convolution) with the Snake (vectorised `sin`), bias and
//!   residual fused in, in cache-sized blocks spread over rayon's threads;
//! - [`Conv1dKernel`] does the other stride-1 convolutions (`conv_pre`, `conv_post`, the F0
//!   predictor) as blocked im2col + GEMM with a fused input activation and bias.
mod conv;
mod op;
mod resblock;
mod vmath;
mod winograd;

pub(crate) use conv::{Conv1dKernel, PreAct};
pub(crate) use op::{conv1d, snake};
pub(crate) use resblock::{Layer as ResBlockLayer, ResBlockKernel};
pub(crate) use winograd::WinogradConv;

/// A raw output pointer handed to rayon workers. Every use writes a region no other worker
/// touches, of a buffer that outlives the parallel loop.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: see above; the kernels only write disjoint regions through it while the owner waits.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}
