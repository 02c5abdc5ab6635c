//! The output WAV file: checked for writability before any model work, written at the end
//! (to a file, or to standard output for `-o -`).
use crate::args::WavFormatArg;
use anyhow::{bail, Context, Result};
use chatterbox_dsp::{Audio, WavFormat};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A checked output destination.
#[derive(Debug, Clone)]
pub enum Output {
    /// A file that can be created or overwritten.
    File(PathBuf),
    /// Standard output.
    Stdout,
}

impl Output {
    /// Checks that `path` can be written, without leaving anything behind: an existing file
    /// is opened for appending (not modified), a new one created and removed again.
    pub fn check(path: &Path) -> Result<Self> {
        if path == Path::new("-") {
            return Ok(Self::Stdout);
        }
        let what = || format!("cannot write the output file {}", path.display());
        if path.is_dir() {
            bail!("{}: it is a directory", what());
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.is_dir() {
                bail!("{}: the folder {} does not exist", what(), parent.display());
            }
        }
        if path.exists() {
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .with_context(what)?;
        } else {
            std::fs::File::create(path).with_context(what)?;
            std::fs::remove_file(path).with_context(what)?;
        }
        Ok(Self::File(path.to_path_buf()))
    }

    /// Writes `audio` as a mono WAV file.
    pub fn write(&self, audio: &Audio, format: WavFormatArg) -> Result<()> {
        match self {
            Self::File(path) => {
                let format = match format {
                    WavFormatArg::Pcm16 => WavFormat::Pcm16,
                    WavFormatArg::F32 => WavFormat::Float32,
                };
                chatterbox_dsp::audio::write_wav(path, audio, format)
                    .with_context(|| format!("cannot write {}", path.display()))
            }
            Self::Stdout => {
                let bytes = wav_bytes(audio, format)?;
                let mut out = std::io::stdout().lock();
                out.write_all(&bytes)
                    .and_then(|()| out.flush())
                    .context("cannot write the WAV data to standard output")
            }
        }
    }

    /// A writer that takes the audio piece by piece (long texts: memory stays flat). A file is
    /// written as the audio comes, and removed again if the sink is dropped unfinished.
    pub fn sink(&self, sample_rate: u32, format: WavFormatArg) -> Result<Sink> {
        let inner = match self {
            Self::File(path) => {
                let w = hound::WavWriter::create(path, spec(sample_rate, format))
                    .with_context(|| format!("cannot write {}", path.display()))?;
                SinkInner::File {
                    writer: Some(w),
                    path: path.clone(),
                }
            }
            Self::Stdout => SinkInner::Memory(Vec::new()),
        };
        Ok(Sink {
            inner,
            format,
            sample_rate,
            samples: 0,
        })
    }

    /// How messages name it.
    pub fn describe(&self) -> String {
        match self {
            Self::File(p) => p.display().to_string(),
            Self::Stdout => "standard output".into(),
        }
    }
}

/// `Wrote FILE: 3.2 s of audio in 1.1 s (real-time factor 0.34)`.
pub fn summary(out: &Output, audio_secs: f64, took: std::time::Duration) -> String {
    let took = took.as_secs_f64();
    let rtf = if audio_secs > 0.0 {
        took / audio_secs
    } else {
        f64::NAN
    };
    format!(
        "Wrote {}: {audio_secs:.1} s of audio in {took:.1} s (real-time factor {rtf:.2})",
        out.describe()
    )
}

type FileWriter = hound::WavWriter<std::io::BufWriter<std::fs::File>>;

enum SinkInner {
    File {
        writer: Option<FileWriter>,
        path: PathBuf,
    },
    Memory(Vec<f32>),
}

/// Audio written as it is generated; see [`Output::sink`].
pub struct Sink {
    inner: SinkInner,
    format: WavFormatArg,
    sample_rate: u32,
    samples: usize,
}

impl Sink {
    /// Appends samples.
    pub fn push(&mut self, samples: &[f32]) -> Result<()> {
        chatterbox_dsp::check_signal("generated audio", samples)?;
        self.samples += samples.len();
        match &mut self.inner {
            SinkInner::File { writer, path } => {
                let Some(w) = writer.as_mut() else {
                    bail!("{} is already finished", path.display());
                };
                write_samples(w, samples, self.format)
                    .with_context(|| format!("cannot write {}", path.display()))
            }
            SinkInner::Memory(v) => {
                v.extend_from_slice(samples);
                Ok(())
            }
        }
    }

    /// Completes the file (or writes the WAV to stdout); returns the number of samples.
    pub fn finish(mut self) -> Result<usize> {
        match &mut self.inner {
            SinkInner::File { writer, path } => {
                if let Some(w) = writer.take() {
                    w.finalize()
                        .with_context(|| format!("cannot write {}", path.display()))?;
                }
            }
            SinkInner::Memory(v) => {
                let audio = Audio::new(std::mem::take(v), self.sample_rate);
                Output::Stdout.write(&audio, self.format)?;
            }
        }
        Ok(self.samples)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        // Unfinished (an error stopped generation): no half-written file is left behind.
        if let SinkInner::File { writer, path } = &mut self.inner {
            if writer.take().is_some() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

fn spec(sample_rate: u32, format: WavFormatArg) -> hound::WavSpec {
    hound::WavSpec {
        channels: 1,
        sample_rate,
        bits_per_sample: match format {
            WavFormatArg::Pcm16 => 16,
            WavFormatArg::F32 => 32,
        },
        sample_format: match format {
            WavFormatArg::Pcm16 => hound::SampleFormat::Int,
            WavFormatArg::F32 => hound::SampleFormat::Float,
        },
    }
}

/// Samples as chatterbox-dsp's `write_wav` writes them (PCM: clipped to [-1, 1], × 32767).
fn write_samples<W: std::io::Write + std::io::Seek>(
    w: &mut hound::WavWriter<W>,
    samples: &[f32],
    format: WavFormatArg,
) -> hound::Result<()> {
    for &s in samples {
        match format {
            WavFormatArg::Pcm16 => w.write_sample((s.clamp(-1.0, 1.0) * 32767.0).round() as i16)?,
            WavFormatArg::F32 => w.write_sample(s)?,
        }
    }
    Ok(())
}

/// A complete WAV file in memory (hound needs a seekable writer; stdout is not).
fn wav_bytes(audio: &Audio, format: WavFormatArg) -> Result<Vec<u8>> {
    chatterbox_dsp::check_signal("generated audio", &audio.samples)?;
    let mut cursor = std::io::Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut cursor, spec(audio.sample_rate, format))?;
    write_samples(&mut w, &audio.samples, format)?;
    w.finalize()?;
    Ok(cursor.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritable_paths_are_refused_and_nothing_is_left_behind() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let ok = dir.path().join("out.wav");
        assert!(matches!(Output::check(&ok)?, Output::File(_)));
        assert!(!ok.exists(), "the check must not leave a file");
        let err = Output::check(&dir.path().join("no/such/dir/out.wav"))
            .err()
            .context("no error")?;
        assert!(format!("{err:#}").contains("does not exist"), "{err:#}");
        assert!(Output::check(dir.path()).is_err());
        assert!(matches!(Output::check(Path::new("-"))?, Output::Stdout));
        Ok(())
    }

    #[test]
    fn a_sink_writes_as_it_goes_and_cleans_up_when_abandoned() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("s.wav");
        let out = Output::check(&path)?;
        let mut sink = out.sink(24_000, WavFormatArg::F32)?;
        sink.push(&[0.1, 0.2])?;
        sink.push(&[-0.3])?;
        assert_eq!(sink.finish()?, 3);
        let back = chatterbox_dsp::audio::load(&path)?;
        assert_eq!(back.samples, vec![0.1, 0.2, -0.3]);

        let mut sink = out.sink(24_000, WavFormatArg::Pcm16)?;
        sink.push(&[0.1])?;
        assert!(sink.push(&[f32::NAN]).is_err());
        drop(sink);
        assert!(!path.exists(), "an abandoned sink removes its file");
        Ok(())
    }

    #[test]
    fn in_memory_wav_decodes_to_the_samples() -> Result<()> {
        let audio = Audio::new(vec![0.0, 0.5, -0.25, 1.5], 24_000);
        let bytes = wav_bytes(&audio, WavFormatArg::F32)?;
        let back = chatterbox_dsp::audio::decode(bytes, Some("wav"))?;
        assert_eq!(back.sample_rate, 24_000);
        assert_eq!(back.samples, audio.samples);
        let pcm = wav_bytes(&audio, WavFormatArg::Pcm16)?;
        let back = chatterbox_dsp::audio::decode(pcm, Some("wav"))?;
        assert!((back.samples[1] - 0.5).abs() < 1e-4);
        assert!((back.samples[3] - 1.0).abs() < 1e-4, "clipped to 1");
        Ok(())
    }
}
