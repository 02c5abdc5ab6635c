//! The reference's own resampler: libsoxr's "HQ" recipe called exactly as python-soxr 1.1.0's
//! `soxr.resample(x, in_rate, out_rate, quality='HQ')` calls it (`csoxr_split_ch<float>` in
//! `src/soxr_ext.cpp`), which is what `librosa.load(path, sr=...)` and `librosa.resample` run
//! with their default `res_type='soxr_hq'` (librosa 0.11.0, `core/audio.py`).
//!
//! libsoxr (LGPL-2.1-or-later) is linked dynamically from the system (`libsoxr-dev` on Debian
//! and Ubuntu, found with pkg-config); only the `soxr` feature brings it in.
use super::check_rates;
use crate::error::{check_signal, DspError, Result};
use libsoxr_sys as sys;
use std::ffi::CStr;
use std::os::raw::{c_char, c_ulong, c_void};

/// Input frames per `soxr_process` call, as python-soxr divides long input:
/// `max(1000, 48000 * in_rate / out_rate)`, truncated to an integer. libsoxr's output does not
/// depend on this (checked bit for bit), but the calls stay the same as the reference's.
fn div_len(in_rate: f64, out_rate: f64) -> usize {
    let len = 48000.0 * in_rate / out_rate;
    (if 1000.0 < len { len } else { 1000.0 }) as usize
}

/// python-soxr's output capacity: `ilen * out_rate / in_rate + 1` frames, truncated. libsoxr
/// writes at most this many, the flush included.
fn output_capacity(ilen: usize, in_rate: f64, out_rate: f64) -> usize {
    (ilen as f64 * out_rate / in_rate + 1.0) as usize
}

fn soxr_err(what: &str, err: *const c_char) -> DspError {
    // SAFETY: libsoxr's errors are static NUL-terminated strings.
    let msg = unsafe { CStr::from_ptr(err) }.to_string_lossy();
    DspError::Resampler(format!("libsoxr {what}: {msg}"))
}

/// A `soxr_t` deleted on drop.
struct Handle(sys::soxr_t);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by `soxr_create`, deleted once.
        unsafe { sys::soxr_delete(self.0) }
    }
}

/// Resamples a mono clip from `from_hz` to `to_hz` with libsoxr's "HQ" recipe, exactly as
/// python-soxr's `soxr.resample(x, from_hz, to_hz, quality='HQ')` does: float32 split-channel
/// I/O, linear phase, default runtime settings, the input fed in python-soxr's blocks and then
/// flushed. The output has libsoxr's own length (about `x.len() * to_hz / from_hz`);
/// `librosa.resample` then pads or cuts it to `ceil(x.len() * to_hz / from_hz)`, which
/// [`HqResampler`](super::HqResampler) does.
///
/// Available with the `soxr` feature (LGPL-2.1-or-later libsoxr, linked dynamically).
pub fn soxr_hq(x: &[f32], from_hz: u32, to_hz: u32) -> Result<Vec<f32>> {
    check_signal("resample input", x)?;
    check_rates(from_hz, to_hz)?;
    let (in_rate, out_rate) = (f64::from(from_hz), f64::from(to_hz));
    let ilen = x.len();
    let olen = output_capacity(ilen, in_rate, out_rate);
    let div = div_len(in_rate, out_rate);
    let mut y = vec![0f32; olen];

    // SAFETY: plain value constructors of libsoxr.
    let io_spec = unsafe { sys::soxr_io_spec(sys::SOXR_FLOAT32_S, sys::SOXR_FLOAT32_S) };
    // SAFETY: as above.
    let quality = unsafe { sys::soxr_quality_spec(c_ulong::from(sys::SOXR_HQ), 0) };
    let mut err: sys::soxr_error_t = std::ptr::null();
    // SAFETY: the specs outlive the call; a null runtime spec selects libsoxr's defaults, as
    // python-soxr passes.
    let raw = unsafe {
        sys::soxr_create(
            in_rate,
            out_rate,
            1,
            &mut err,
            &io_spec,
            &quality,
            std::ptr::null(),
        )
    };
    if !err.is_null() {
        if !raw.is_null() {
            drop(Handle(raw));
        }
        return Err(soxr_err("create", err));
    }
    if raw.is_null() {
        return Err(DspError::Resampler("libsoxr create: no resampler".into()));
    }
    let soxr = Handle(raw);

    let mut out_pos = 0usize;
    let mut idx = 0usize;
    // The blocks, then one flush (no input) into the rest of the buffer.
    loop {
        let flush = idx >= ilen;
        let n_in = if flush { 0 } else { div.min(ilen - idx) };
        // Split-channel I/O: one pointer per channel.
        let in_ptrs: [*const c_void; 1] = [x[idx..].as_ptr().cast()];
        let mut out_ptrs: [*mut c_void; 1] = [y[out_pos..].as_mut_ptr().cast()];
        let input: sys::soxr_in_t = if flush {
            std::ptr::null()
        } else {
            in_ptrs.as_ptr().cast()
        };
        let mut odone = 0usize;
        // SAFETY: `input` points at `n_in` readable samples (or is null to flush); the output
        // pointer has `olen - out_pos` writable samples; both outlive the call.
        let err = unsafe {
            sys::soxr_process(
                soxr.0,
                input,
                n_in,
                std::ptr::null_mut(),
                out_ptrs.as_mut_ptr().cast(),
                olen - out_pos,
                &mut odone,
            )
        };
        if !err.is_null() {
            return Err(soxr_err("process", err));
        }
        out_pos += odone.min(olen - out_pos);
        if flush {
            break;
        }
        idx += n_in;
    }
    y.truncate(out_pos);
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_soxr_block_and_buffer_sizes() {
        assert_eq!(div_len(44100.0, 24000.0), 88200);
        assert_eq!(div_len(24000.0, 48000.0), 24000);
        assert_eq!(div_len(1000.0, 96000.0), 1000);
        assert_eq!(output_capacity(44100, 44100.0, 24000.0), 24001);
        assert_eq!(output_capacity(3, 24000.0, 16000.0), 3);
    }

    #[test]
    fn long_input_is_fed_in_blocks_without_a_seam() {
        // Longer than one python-soxr block (72 000 input samples at 24 -> 16 kHz): a tone
        // stays the same tone across the seam between the blocks.
        let n = 150_000;
        let tone = |i: usize, sr: f64| {
            ((i as f64 * 2.0 * std::f64::consts::PI * 440.0 / sr).sin() * 0.5) as f32
        };
        let x: Vec<f32> = (0..n).map(|i| tone(i, 24_000.0)).collect();
        let y = soxr_hq(&x, 24_000, 16_000).unwrap();
        assert_eq!(y.len(), 100_000);
        let seam = 72_000 * 2 / 3;
        for (i, &v) in y.iter().enumerate().skip(seam - 200).take(400) {
            let want = tone(i, 16_000.0);
            assert!((v - want).abs() < 1e-4, "sample {i}: {v} vs {want}");
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(matches!(
            soxr_hq(&[], 24_000, 16_000),
            Err(DspError::EmptyAudio { .. })
        ));
        assert!(matches!(
            soxr_hq(&[0.1, f32::NAN], 24_000, 16_000),
            Err(DspError::NonFinite { .. })
        ));
        assert!(matches!(
            soxr_hq(&[0.1], 0, 16_000),
            Err(DspError::UnsupportedSampleRate { .. })
        ));
    }
}
