//! Streamed audio watermarked piece by piece ([`StreamWatermarker`]) against the whole clip
//! watermarked at once (what `generate` does), with Perth's real weights:
//!
//! ```sh
//! cargo run --release -p chatterbox-pipeline --example watermark_stream -- \
//!     perth_net_250000.pth.tar [speech.wav]
//! ```
//!
//! For each piece size: Resemble's detector score of the joined stream, how far it is from
//! the whole-clip watermark (dB below the watermark itself), and the largest sample step at a
//! join beyond the clip's own (a click would show there). The clip defaults to chatterbox-dsp's
//! example speech; pieces follow the English stream schedule (12, 36, 144, 576 tokens of 40 ms).
use anyhow::{Context, Result};
use chatterbox_pipeline::{perth_watermarker, Device, StreamWatermarker};
use chatterbox_watermark::PerthWatermarker;
use std::path::PathBuf;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let checkpoint = PathBuf::from(
        args.next()
            .context("usage: watermark_stream CHECKPOINT [WAV]")?,
    );
    let wav = args.next().map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../chatterbox-dsp/examples/data/speech_24k.wav")
    });
    let audio = chatterbox_dsp::audio::load(&wav)?.resampled(24_000)?;
    let x = audio.samples;
    let detector = PerthWatermarker::load(&checkpoint, &Device::Cpu)?;
    let marker = perth_watermarker(&checkpoint, &Device::Cpu)?;
    let mut whole = x.clone();
    marker.apply(&mut whole, 24_000)?;
    println!(
        "{}: {:.2} s; whole clip watermarked: score {:.3}",
        wav.display(),
        x.len() as f64 / 24_000.0,
        detector.detect(&whole, 24_000)?.score
    );
    let schedule: Vec<usize> = [12, 36, 144, 576].iter().map(|t| t * 960).collect();
    for (name, sizes) in [
        ("stream schedule (0.48, 1.44, 5.76 s, ...)", schedule),
        ("0.2 s pieces", vec![4_800]),
        ("0.48 s pieces", vec![11_520]),
    ] {
        let mut s = StreamWatermarker::new(Some(marker.clone()), 24_000);
        let (mut out, mut joins, mut pos, mut i) = (Vec::new(), Vec::new(), 0, 0);
        while pos < x.len() {
            let n = sizes[i.min(sizes.len() - 1)].min(x.len() - pos);
            out.extend(s.push(x[pos..pos + n].to_vec())?);
            pos += n;
            i += 1;
            joins.push(pos);
        }
        let n = out.len().min(whole.len());
        let (mut diff, mut mark) = (0f64, 0f64);
        for k in 0..n {
            diff += f64::from(out[k] - whole[k]).powi(2);
            mark += f64::from(whole[k] - x[k]).powi(2);
        }
        let step = |k: usize| (out[k] - out[k - 1]).abs() - (x[k] - x[k - 1]).abs();
        let at_joins = joins
            .iter()
            .filter(|&&k| k < n)
            .map(|&k| step(k))
            .fold(0f32, f32::max);
        let elsewhere = (1..n)
            .filter(|k| !joins.contains(k))
            .map(step)
            .fold(0f32, f32::max);
        println!(
            "{name}: score {:.3}; stream vs whole {:.1} dB below the watermark; extra step at joins {at_joins:.4}, elsewhere {elsewhere:.4}",
            detector.detect(&out, 24_000)?.score,
            10.0 * (mark / diff.max(1e-30)).log10()
        );
    }
    Ok(())
}
