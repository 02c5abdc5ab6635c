//! The input columns of decoder.py's causal convolutions (im2col of `(x + time embedding) *
//! mask`) as one kernel.
use super::{operand, source, suffix, view};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, DType, Layout, Tensor};
use chatterbox_cuda::{Elem, Ptx};

pub(crate) static PTX: Ptx = Ptx::new(
    source!("columns.cu"),
    None,
    "flow convolution columns kernel",
);

/// The convolution columns of `x (n, t, c)` (see [`columns`]).
struct Columns<'a> {
    mask: Option<&'a Tensor>,
    add: Option<&'a Tensor>,
    kernel: usize,
    pad_left: usize,
    t_out: usize,
}

impl Columns<'_> {
    fn launch<T: Elem>(
        &self,
        x: &CudaStorage,
        xl: &Layout,
    ) -> candle_core::Result<(CudaStorage, candle_core::Shape)> {
        let (n, t, c) = xl.shape().dims3()?;
        let (k, t_out) = (self.kernel, self.t_out);
        let (rows, kc) = (n * t_out, k * c);
        if rows > i32::MAX as usize || kc > i32::MAX as usize || n * t > u32::MAX as usize {
            candle_core::bail!("flow columns: input {:?} is too large", xl.shape())
        }
        let xv = view::<T>(x, xl, n * t * c, "columns input")?;
        let mask = self.mask.map(|m| m.storage_and_layout());
        let add = self.add.map(|a| a.storage_and_layout());
        let add_rows = self.add.map_or(1, |a| a.elem_count() / c.max(1));
        let mv = match &mask {
            Some((s, l)) => Some(operand::<T>(s, l, n * t, "mask")?),
            None => None,
        };
        let av = match &add {
            Some((s, l)) => Some(operand::<T>(s, l, add_rows * c, "time embedding")?),
            None => None,
        };
        let dev: CudaDevice = x.device.clone();
        // 16-byte vectors when every vector starts aligned: rows of c values and the input's
        // start (allocations themselves are 256-byte aligned).
        let size = T::DTYPE.size_in_bytes();
        let per = 16 / size;
        let vec = c.is_multiple_of(per) && (xl.start_offset() * size).is_multiple_of(16);
        let name = format!(
            "flow_columns{}_{}",
            if vec { "16" } else { "" },
            suffix(T::DTYPE)?
        );
        let func = PTX.function(&dev, &name)?;
        // SAFETY: the kernel writes every one of the rows * kc values.
        let out = unsafe { dev.alloc::<T>(rows * kc)? };
        if rows > 0 && kc > 0 {
            let items = kc.div_ceil(if vec { per } else { 1 });
            let threads = items.next_multiple_of(32).min(256) as u32;
            let (t32, t_out32, c32, k32, pl32, ar32) = (
                t as u32,
                t_out as u32,
                c as u32,
                k as u32,
                self.pad_left as u32,
                add_rows as u32,
            );
            let mut builder = func.builder();
            builder.arg(&out);
            builder.arg(&xv);
            // absent operands: a null pointer (the kernel tests for it)
            let null = 0u64;
            match &av {
                Some(a) => builder.arg(a),
                None => builder.arg(&null),
            };
            match &mv {
                Some(m) => builder.arg(m),
                None => builder.arg(&null),
            };
            builder.arg(&t32);
            builder.arg(&t_out32);
            builder.arg(&c32);
            builder.arg(&k32);
            builder.arg(&pl32);
            builder.arg(&ar32);
            let cfg = LaunchConfig {
                grid_dim: (rows as u32, 1, 1),
                block_dim: (threads, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: reads `x` (n t c values), `mask` (n t) and `add` (add_rows c) inside
            // their lengths (checked above); each block writes its own output row.
            unsafe { builder.launch(cfg) }.w()?;
        }
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            candle_core::Shape::from((n, t_out, kc)),
        ))
    }
}

impl candle_core::CustomOp1 for Columns<'_> {
    chatterbox_cuda::cuda_only_op!(1, "flow-columns-cuda");

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
    ) -> candle_core::Result<(CudaStorage, candle_core::Shape)> {
        match x.dtype() {
            DType::F32 => self.launch::<f32>(x, xl),
            DType::BF16 => self.launch::<half::bf16>(x, xl),
            DType::F16 => self.launch::<half::f16>(x, xl),
            d => candle_core::bail!("flow columns: dtype {d:?}"),
        }
    }
}

/// The input columns of a convolution over `x (n, t, c)` (see [`applies`](super::applies)) with `kernel` taps
/// and `pad_left` / `pad_right` zero frames: `(n, t_out, kernel * c)`, tap-major, where tap
/// `j` of output frame `s` is input frame `s - pad_left + j`, taken as `(x + add) * mask`:
/// `add (1 or n, 1, c)` (a time embedding), `mask (n, t, 1)` (1 valid, 0 padding).
pub(crate) fn columns(
    x: &Tensor,
    mask: Option<&Tensor>,
    add: Option<&Tensor>,
    kernel: usize,
    pad_left: usize,
    pad_right: usize,
) -> candle_core::Result<Tensor> {
    let (n, t, c) = x.dims3()?;
    let bad_mask = mask.is_some_and(|m| m.elem_count() != n * t || m.dtype() != x.dtype());
    let bad_add = add.is_some_and(|a| {
        (a.elem_count() != c && a.elem_count() != n * c) || a.dtype() != x.dtype()
    });
    if kernel == 0 || t + pad_left + pad_right < kernel || bad_mask || bad_add {
        candle_core::bail!(
            "flow columns: x {:?}, mask {:?}, add {:?}, kernel {kernel}, padding {pad_left} + \
             {pad_right}",
            x.shape(),
            mask.map(Tensor::shape),
            add.map(Tensor::shape)
        )
    }
    let mask = mask.map(Tensor::contiguous).transpose()?;
    let add = add.map(Tensor::contiguous).transpose()?;
    x.contiguous()?.apply_op1_no_bwd(&Columns {
        mask: mask.as_ref(),
        add: add.as_ref(),
        kernel,
        pad_left,
        t_out: t + pad_left + pad_right + 1 - kernel,
    })
}
