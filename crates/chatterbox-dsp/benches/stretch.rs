//! `cargo xtask bench stretch --no-reference`: the cost of `speed` (pitch-preserving time
//! stretch, [`chatterbox_dsp::stretch`]) per second of 24 kHz speech on one core, whole and
//! streamed in 0.5 s pieces, and its listening-free quality: the dominant frequency of a tone
//! and of a harmonic signal before and after, the output's length against `len / speed`, and
//! the streamed output against the whole one. The reference has no speed control: no Python
//! side. Records as JSON (`CHATTERBOX_BENCH_OUT`, else stdout); the quality table on stderr.
use chatterbox_dsp::stretch::{stretched_len, time_stretch, TimeStretcher};
use chatterbox_testkit::{
    black_box, dominant_hz, harmonic_tone, noisy_harmonics, time_it, BenchRecord,
};

const SR: u32 = 24_000;
const SPEEDS: [f32; 6] = [0.25, 0.5, 0.8, 1.5, 2.0, 4.0];

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
        let x = harmonic_tone(SR, f0, harmonics, 2.0);
        let y = time_stretch(&x, SR, speed)?;
        let got = dominant_hz(&y, SR)?;
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
