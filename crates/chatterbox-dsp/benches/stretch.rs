//! `cargo xtask bench stretch --no-reference`: the cost of `speed` (pitch-preserving time
//! stretch, [`chatterbox_dsp::stretch`]) per second of 24 kHz speech on one core, whole and
//! streamed in 0.5 s pieces, and its listening-free quality: the dominant frequency of a tone
//! and of a harmonic signal before and after, the output's length against `len / speed`, and
//! the streamed output against the whole one. The reference has no speed control: no Python
//! side. Records as JSON (`CHATTERBOX_BENCH_OUT`, else stdout); the quality table on stderr.
use chatterbox_dsp::stretch::{stretched_len, time_stretch, TimeStretcher};
use chatterbox_testkit::{black_box, noisy_harmonics, time_it, BenchRecord};
use realfft::RealFftPlanner;

const SR: u32 = 24_000;
const SPEEDS: [f32; 6] = [0.25, 0.5, 0.8, 1.5, 2.0, 4.0];

/// `secs` of a steady tone of `f0` Hz with `harmonics` harmonics of amplitude 1/h.
fn harmonic(f0: f64, harmonics: usize, secs: f64) -> Vec<f32> {
    let n = (f64::from(SR) * secs) as usize;
    (0..n)
        .map(|i| {
            let t = i as f64 / f64::from(SR);
            let v: f64 = (1..=harmonics)
                .map(|h| (2.0 * std::f64::consts::PI * f0 * h as f64 * t).sin() / h as f64)
                .sum();
            (0.3 * v) as f32
        })
        .collect()
}

/// The strongest spectral peak of `x` in Hz (Hann window, parabolic interpolation), the first
/// and last 10 % left out.
fn dominant_hz(x: &[f32]) -> anyhow::Result<f64> {
    let x = &x[x.len() / 10..x.len() - x.len() / 10];
    let n = x.len();
    let mut buf: Vec<f32> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let w = 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos();
            v * w as f32
        })
        .collect();
    let fft = RealFftPlanner::<f32>::new().plan_fft_forward(n);
    let mut spec = fft.make_output_vec();
    fft.process(&mut buf, &mut spec)?;
    let mag: Vec<f64> = spec.iter().map(|c| f64::from(c.norm())).collect();
    let k = (1..mag.len() - 1)
        .max_by(|&a, &b| mag[a].total_cmp(&mag[b]))
        .unwrap_or(1);
    let (a, b, c) = (mag[k - 1].ln(), mag[k].ln(), mag[k + 1].ln());
    let delta = 0.5 * (a - c) / (a - 2.0 * b + c);
    Ok((k as f64 + delta) * f64::from(SR) / n as f64)
}

/// `x` through a [`TimeStretcher`] in pieces of `piece` samples.
fn streamed(x: &[f32], speed: f32, piece: usize) -> anyhow::Result<Vec<f32>> {
    let mut s = TimeStretcher::new(SR, speed)?;
    let mut out = Vec::new();
    for p in x.chunks(piece) {
        out.extend(s.process(p)?);
    }
    out.extend(s.finish()?);
    Ok(out)
}

/// One line of the quality table: pitch error of a tone and of a harmonic signal, length
/// error, and the largest difference of the streamed output from the whole one.
fn quality(speed: f32) -> anyhow::Result<String> {
    let mut cells = Vec::new();
    for (f0, harmonics) in [(220.0, 1), (150.0, 8)] {
        let x = harmonic(f0, harmonics, 2.0);
        let y = time_stretch(&x, SR, speed)?;
        let got = dominant_hz(&y)?;
        cells.push(format!("{got:.2} Hz ({:+.3} %)", 100.0 * (got - f0) / f0));
    }
    let x = noisy_harmonics(SR, 10.0);
    let whole = time_stretch(&x, SR, speed)?;
    let exact = x.len() as f64 / f64::from(speed);
    let len_err = 100.0 * (whole.len() as f64 - exact) / exact;
    let s = streamed(&x, speed, SR as usize / 2)?;
    let diff = if s.len() == whole.len() {
        let d = s
            .iter()
            .zip(&whole)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        format!("{d:e}")
    } else {
        format!("length {} vs {}", s.len(), whole.len())
    };
    Ok(format!(
        "| {speed} | {} | {} | {} ({len_err:+.4} %) | {diff} |",
        cells[0],
        cells[1],
        whole.len()
    ))
}

fn main() -> anyhow::Result<()> {
    let mut records = Vec::new();
    let mut push = |stage: String, shape: &str, timing| {
        let r = BenchRecord {
            group: "stretch".into(),
            stage,
            implementation: "rust".into(),
            device: "cpu".into(),
            threads: 1,
            timing,
            shape: shape.into(),
        };
        eprintln!(
            "{:<30} {:>9.3} ms (median of {}) = {:.2} ms per second of input",
            r.stage,
            r.timing.median_ms,
            r.timing.iters,
            r.timing.median_ms / 10.0
        );
        records.push(r);
    };
    let x = noisy_harmonics(SR, 10.0);
    for speed in SPEEDS {
        push(
            format!("stretch_x{speed}"),
            "10 s @ 24 kHz, whole",
            time_it(1, 5, 1.0, || {
                black_box(time_stretch(&x, SR, speed).ok());
            }),
        );
        push(
            format!("stretch_x{speed}_streamed"),
            "10 s @ 24 kHz, 0.5 s pieces",
            time_it(1, 5, 1.0, || {
                black_box(streamed(&x, speed, SR as usize / 2).ok());
            }),
        );
    }
    eprintln!(
        "\n| speed | 220 Hz tone after | 150 Hz, 8 harmonics, after | samples of 10 s (error) | streamed vs whole, max abs |"
    );
    eprintln!("|---|---|---|---|---|");
    for speed in SPEEDS {
        eprintln!("{}", quality(speed)?);
    }
    let check = stretched_len(x.len(), 2.0);
    anyhow::ensure!(check == 120_000, "stretched_len: {check}");
    chatterbox_testkit::emit_records(&records)?;
    Ok(())
}
