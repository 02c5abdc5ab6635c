//! The kernels against candle's ops on a CUDA device.
use super::*;

fn max_rel(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
    let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
    let scale = b.abs()?.max_all()?.to_scalar::<f32>()?.max(1e-30);
    Ok((a - b)?.abs()?.max_all()?.to_scalar::<f32>()? / scale)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn match_the_candle_ops() -> candle_core::Result<()> {
    let dev = chatterbox_cuda::open(0)?;
    for (dtype, tol) in [(DType::F32, 1e-6), (DType::BF16, 8e-3), (DType::F16, 1e-3)] {
        let y = (Tensor::randn(0f32, 1.0, (2, 37, 96), &dev)? * 3.0)?;
        let b = Tensor::randn(0f32, 1.0, 96, &dev)?;
        let r = Tensor::randn(0f32, 1.0, (2, 37, 96), &dev)?;
        let (yd, bd, rd) = (y.to_dtype(dtype)?, b.to_dtype(dtype)?, r.to_dtype(dtype)?);
        // the f32 candle ops on the same rounded inputs
        let (yf, bf, rf) = (
            yd.to_dtype(DType::F32)?,
            bd.to_dtype(DType::F32)?,
            rd.to_dtype(DType::F32)?,
        );
        let want = yf.broadcast_add(&bf)?.gelu_erf()?;
        let got = bias_gelu_inplace(yd.copy()?, &bd)?;
        assert!(max_rel(&got, &want)? <= tol, "{dtype:?} gelu");
        let want = (yf.broadcast_add(&bf)? + &rf)?;
        let got = bias_residual_inplace(yd.copy()?, &bd, &rd)?;
        assert!(max_rel(&got, &want)? <= tol, "{dtype:?} residual");
        let want = (&yf * (yf.exp()? + 1.0)?.log()?.tanh()?)?;
        let got = mish_inplace(yd.copy()?)?;
        assert!(max_rel(&got, &want)? <= tol, "{dtype:?} mish");
        assert!(bias_gelu_inplace(yd.copy()?, &bd.narrow(0, 0, 95)?).is_err());
        let want = yf.broadcast_add(&bf)?;
        let got = bias_add_inplace(yd.copy()?, &bd)?;
        assert!(max_rel(&got, &want)? <= tol, "{dtype:?} bias");
    }
    Ok(())
}

/// The candle ops the fused kernels replace: `(x + add) * mask` padded, shifted and
/// stacked tap-major.
fn columns_by_ops(
    x: &Tensor,
    mask: Option<&Tensor>,
    add: Option<&Tensor>,
    k: usize,
    pl: usize,
    pr: usize,
) -> candle_core::Result<Tensor> {
    let x = match add {
        Some(a) => x.broadcast_add(a)?,
        None => x.clone(),
    };
    let x = match mask {
        Some(m) => x.broadcast_mul(m)?,
        None => x,
    };
    let xp = x.pad_with_zeros(1, pl, pr)?;
    let t_out = xp.dim(1)? + 1 - k;
    let taps = (0..k)
        .map(|j| xp.narrow(1, j, t_out))
        .collect::<candle_core::Result<Vec<_>>>()?;
    Tensor::cat(&taps, 2)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn columns_equal_the_candle_ops() -> candle_core::Result<()> {
    let dev = chatterbox_cuda::open(0)?;
    // (n, t, c, k, pad_left, pad_right): vectorised (c % 8 == 0) and scalar rows, causal,
    // pointwise and look-ahead padding
    for (n, t, c, k, pl, pr) in [
        (3usize, 37usize, 256usize, 3usize, 2usize, 0usize),
        (2, 5, 320, 3, 2, 0),
        (2, 9, 80, 1, 0, 0),
        (1, 7, 12, 4, 0, 3),
        (2, 6, 5, 3, 1, 1),
    ] {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let x = Tensor::randn(0f32, 1.0, (n, t, c), &dev)?.to_dtype(dtype)?;
            let add = Tensor::randn(0f32, 1.0, (n, 1, c), &dev)?.to_dtype(dtype)?;
            let add1 = add.narrow(0, 0, 1)?;
            let lens: Vec<f32> = (0..n * t)
                .map(|i| f32::from(u8::from(i % t < t - i / t)))
                .collect();
            let mask = Tensor::from_vec(lens, (n, t, 1), &dev)?.to_dtype(dtype)?;
            for (m, a) in [
                (None, None),
                (Some(&mask), None),
                (Some(&mask), Some(&add)),
                (None, Some(&add1)),
            ] {
                let want = columns_by_ops(&x, m, a, k, pl, pr)?.to_dtype(DType::F32)?;
                let got = columns(&x, m, a, k, pl, pr)?.to_dtype(DType::F32)?;
                assert_eq!(got.dims(), want.dims());
                // the same roundings: equal to the bit
                let err = (got - want)?.abs()?.max_all()?.to_scalar::<f32>()?;
                assert_eq!(err, 0.0, "{dtype:?} ({n}, {t}, {c}) k {k}");
            }
        }
    }
    // an unaligned start (a view one value in) takes the scalar kernel
    let x = Tensor::randn(0f32, 1.0, 2 * 4 * 16 + 1, &dev)?;
    let x = x.narrow(0, 1, 2 * 4 * 16)?.reshape((2, 4, 16))?;
    let err = (columns(&x, None, None, 3, 2, 0)? - columns_by_ops(&x, None, None, 3, 2, 0)?)?
        .abs()?
        .max_all()?
        .to_scalar::<f32>()?;
    assert_eq!(err, 0.0);
    assert!(columns(&x, None, None, 9, 2, 0).is_err());
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn block_tail_equals_the_candle_ops() -> candle_core::Result<()> {
    use candle_core::Module;
    let dev = chatterbox_cuda::open(0)?;
    for (dtype, tol) in [
        (DType::F32, 2e-6),
        (DType::BF16, 1.6e-2),
        (DType::F16, 2e-3),
    ] {
        let (n, t, c) = (3, 29, 256);
        let y = (Tensor::randn(0f32, 1.0, (n, t, c), &dev)? * 2.0)?.to_dtype(dtype)?;
        let bias = Tensor::randn(0f32, 1.0, c, &dev)?.to_dtype(dtype)?;
        let w = (Tensor::randn(0f32, 0.3, c, &dev)? + 1.0)?.to_dtype(dtype)?;
        let b = Tensor::randn(0f32, 0.3, c, &dev)?.to_dtype(dtype)?;
        let norm = candle_nn::LayerNorm::new(w, b, 1e-5);
        let flags: Vec<f32> = (0..n * t)
            .map(|i| f32::from(u8::from(i % 7 != 3)))
            .collect();
        let mask = Tensor::from_vec(flags, (n, t, 1), &dev)?.to_dtype(dtype)?;
        for m in [None, Some(&mask)] {
            let h = norm.forward(&y.broadcast_add(&bias)?)?;
            let h = mish_inplace(h)?;
            let want = match m {
                Some(m) => h.broadcast_mul(m)?,
                None => h,
            };
            let got = block_tail(y.copy()?, &bias, &norm, m)?;
            // the norm's sums in another order: within one rounding of the output
            let err = max_rel(&got, &want)?;
            assert!(err <= tol, "{dtype:?}: {err}");
            if let Some(m) = m {
                let masked = (got.to_dtype(DType::F32)?
                    * (1.0 - m.to_dtype(DType::F32)?)?.broadcast_as((n, t, c))?)?;
                let leak = masked.abs()?.max_all()?.to_scalar::<f32>()?;
                assert_eq!(leak, 0.0, "padding frames must be zero");
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rel_scores_equal_the_candle_ops() -> candle_core::Result<()> {
    let dev = chatterbox_cuda::open(0)?;
    let (b, h, t) = (3usize, 2usize, 23usize);
    let scale = 0.125f64;
    for dtype in [DType::F32, DType::BF16] {
        let ac = (Tensor::randn(0f32, 1.0, (b, h, t, t), &dev)? * 3.0)?.to_dtype(dtype)?;
        let bd = (Tensor::randn(0f32, 1.0, (b, h, t, 2 * t - 1), &dev)? * 3.0)?.to_dtype(dtype)?;
        // row 1 pads its last 5 keys, row 2 none, row 0 its last one
        let mut kb = vec![0f32; b * t];
        for j in t - 5..t {
            kb[t + j] = f32::NEG_INFINITY;
        }
        kb[t - 1] = f32::NEG_INFINITY;
        let kb = Tensor::from_vec(kb, (b, 1, 1, t), &dev)?.to_dtype(dtype)?;
        for bias in [None, Some(&kb)] {
            // candle's ops: rel_shift by pad-and-reshape, add, affine, bias add
            let p = 2 * t - 1;
            let shifted = bd
                .pad_with_zeros(candle_core::D::Minus1, 1, 0)?
                .reshape((b, h, p + 1, t))?
                .narrow(2, 1, p)?
                .contiguous()?
                .reshape((b, h, t, p))?
                .narrow(3, 0, t)?;
            let want = (&ac + shifted)?.affine(scale, 0.0)?;
            let want = match bias {
                Some(k) => want.broadcast_add(k)?,
                None => want,
            };
            let got = match rel_scores(ac.copy()?, &bd, scale as f32, bias)? {
                Ok(g) => g,
                Err(_) => candle_core::bail!("the kernel did not take {dtype:?}"),
            };
            let (got, want) = (
                got.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?,
                want.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?,
            );
            assert_eq!(got, want, "{dtype:?}, bias {}", bias.is_some());
        }
    }
    Ok(())
}
