//! The CPU side of a candle custom op that runs on CUDA only.

/// Inside `impl CustomOpN for Op` (`$arity` = N: 1, 2 or 3), the op's `name` (`$name`) and a
/// `cpu_fwd` that fails with `"$name: CUDA only$why"`: what each of the crates' CUDA kernels
/// would otherwise spell out, so that only its `cuda_fwd` is written by hand.
#[macro_export]
macro_rules! cuda_only_op {
    ($arity:tt, $name:literal) => {
        $crate::cuda_only_op!($arity, $name, "");
    };
    (1, $name:literal, $why:literal) => {
        $crate::cuda_only_op!(@op $name, $why, (_s1, _l1));
    };
    (2, $name:literal, $why:literal) => {
        $crate::cuda_only_op!(@op $name, $why, (_s1, _l1), (_s2, _l2));
    };
    (3, $name:literal, $why:literal) => {
        $crate::cuda_only_op!(@op $name, $why, (_s1, _l1), (_s2, _l2), (_s3, _l3));
    };
    (@op $name:literal, $why:literal, $(($storage:ident, $layout:ident)),+) => {
        fn name(&self) -> &'static str {
            $name
        }

        fn cpu_fwd(
            &self,
            $($storage: &$crate::__candle::CpuStorage, $layout: &$crate::__candle::Layout),+
        ) -> $crate::__candle::Result<($crate::__candle::CpuStorage, $crate::__candle::Shape)> {
            $crate::__candle::bail!("{}: CUDA only{}", $name, $why)
        }
    };
}
