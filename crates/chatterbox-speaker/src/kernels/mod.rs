//! Plain-Rust CPU kernels for the hot loops of both encoders, used when a model runs on the CPU
//! in f32 (candle's CPU backend runs element-wise ops one at a time, single-threaded, and its
//! 2-D convolution is a direct loop). Every kernel has a portable version and, on x86-64, an
//! AVX2+FMA version picked at run time (the packed GEMM also an AVX-512 one); chatterbox-cpu
//! answers which may run (`CHATTERBOX_PORTABLE_KERNELS=1` forces the portable ones).
mod activation;
mod packed;

pub(crate) use activation::{affine_relu_cols, lstm_cell, sigmoid_inplace};
pub(crate) use packed::{gemm_rows, gemm_rows_into, PackedB};

/// Threads the CPU kernels may use: `RAYON_NUM_THREADS`, else the number of CPUs (as candle).
pub(crate) fn num_threads() -> usize {
    candle_core::utils::get_num_threads().max(1)
}

/// `a * b + c`, fused when the kernel is compiled with FMA (otherwise `mul_add` would be a
/// slow library call).
#[inline(always)]
pub(crate) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// Defines `$name(args)` that runs `$body::<true>` compiled for AVX2+FMA when the CPU has them
/// and `$body::<false>` otherwise. `$body` must be `#[inline(always)]` so that it is compiled
/// inside the `target_feature` function.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $body:ident) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) {
                    $body::<true>($($arg),*)
                }
                if chatterbox_cpu::avx2_fma() {
                    // SAFETY: the CPU supports AVX2 and FMA (checked at run time just above);
                    // `avx2` is otherwise the same safe code as the portable version.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body::<false>($($arg),*)
        }
    };
}
pub(crate) use multiversion;
