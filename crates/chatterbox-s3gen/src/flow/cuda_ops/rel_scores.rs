//! The encoder's relative-position attention scores `(ac + rel_shift(bd)) * scale + key bias`
//! (transformer/attention.py) in place, as one kernel.
use super::{applies, launch_config, source, suffix, view};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, DType, InplaceOp3, Layout, Tensor};
use chatterbox_cuda::{Elem, Ptx};

pub(crate) static PTX: Ptx = Ptx::new(
    source!("rel_scores.cu"),
    None,
    "flow relative-position scores kernel",
);

/// `(ac + rel_shift(bd)) * scale (+ key_bias)` in place over `ac` (see the kernel).
struct RelScores {
    t: usize,
    heads: usize,
    scale: f32,
}

impl RelScores {
    fn launch<T: Elem>(
        &self,
        ac: &mut CudaStorage,
        al: &Layout,
        bd: (&CudaStorage, &Layout),
        key_bias: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<()> {
        let n = al.shape().elem_count();
        let rows = n / self.t.max(1);
        let batches = rows / (self.heads * self.t).max(1);
        if n == 0 {
            return Ok(());
        }
        let dev: CudaDevice = ac.device.clone();
        let name = format!("flow_rel_scores_{}", suffix(T::DTYPE)?);
        let func = PTX.function(&dev, &name)?;
        let bd = view::<T>(bd.0, bd.1, rows * (2 * self.t - 1), "position scores")?;
        let kb = key_bias
            .map(|(s, l)| view::<T>(s, l, batches * self.t, "key bias"))
            .transpose()?;
        let Some((a, z)) = al.contiguous_offsets() else {
            candle_core::bail!("flow-rel-scores: non-contiguous scores")
        };
        let mut acv = ac.as_cuda_slice_mut::<T>()?.slice_mut(a..z);
        let null = 0u64;
        let (t32, h32, n64) = (self.t as u32, self.heads as u32, n as u64);
        let mut builder = func.builder();
        builder.arg(&mut acv);
        builder.arg(&bd);
        match &kb {
            Some(k) => builder.arg(k),
            None => builder.arg(&null),
        };
        builder.arg(&t32);
        builder.arg(&h32);
        builder.arg(&self.scale);
        builder.arg(&n64);
        // SAFETY: the kernel writes the `n` scores in place and reads `rows (2t - 1)` position
        // scores and `batches t` key-bias values (lengths checked above).
        unsafe { builder.launch(launch_config(n)) }.w()?;
        Ok(())
    }

    fn dispatch(
        &self,
        ac: &mut CudaStorage,
        al: &Layout,
        bd: (&CudaStorage, &Layout),
        key_bias: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<()> {
        match ac.dtype() {
            DType::F32 => self.launch::<f32>(ac, al, bd, key_bias),
            DType::BF16 => self.launch::<half::bf16>(ac, al, bd, key_bias),
            DType::F16 => self.launch::<half::f16>(ac, al, bd, key_bias),
            d => candle_core::bail!("flow-rel-scores: dtype {d:?}"),
        }
    }
}

impl InplaceOp3 for RelScores {
    fn name(&self) -> &'static str {
        "flow-rel-scores"
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<()> {
        candle_core::bail!("flow-rel-scores: CUDA only")
    }

    fn cuda_fwd(
        &self,
        ac: &mut CudaStorage,
        al: &Layout,
        bd: &CudaStorage,
        bl: &Layout,
        kb: &CudaStorage,
        kl: &Layout,
    ) -> candle_core::Result<()> {
        self.dispatch(ac, al, (bd, bl), Some((kb, kl)))
    }
}

/// `(ac + rel_shift(bd)) * scale + key_bias` for `ac (b, h, t, t)` (overwritten), `bd (b, h, t,
/// 2t - 1)` and `key_bias (b, 1, 1, t)` of `ac`'s dtype; `None` (nothing done) where the
/// kernel does not take the operands.
pub(crate) fn rel_scores(
    ac: Tensor,
    bd: &Tensor,
    scale: f32,
    key_bias: Option<&Tensor>,
) -> candle_core::Result<Result<Tensor, Tensor>> {
    let Ok((b, h, t, t2)) = ac.dims4() else {
        return Ok(Err(ac));
    };
    let fits = applies(&ac)
        && t2 == t
        && t > 0
        && bd.dims() == [b, h, t, 2 * t - 1]
        && bd.dtype() == ac.dtype()
        && bd.is_contiguous()
        && key_bias.is_none_or(|k| {
            k.dims() == [b, 1, 1, t] && k.dtype() == ac.dtype() && k.is_contiguous()
        });
    if !fits
        || !PTX.available(ac.device(), |e| {
            tracing::warn!("{e}: the encoder's attention runs candle's ops")
        })
    {
        return Ok(Err(ac));
    }
    let op = RelScores { t, heads: h, scale };
    // no key bias: zeros (adding 0 leaves every score as it is)
    let zeros;
    let kb = match key_bias {
        Some(k) => k,
        None => {
            zeros = Tensor::zeros((b, 1, 1, t), ac.dtype(), ac.device())?;
            &zeros
        }
    };
    ac.inplace_op3(bd, kb, &op)?;
    Ok(Ok(ac))
}
