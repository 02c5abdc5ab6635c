//! Writing mono WAV files with hound: whole (atomically), piece by piece (a temporary file
//! with a valid header after every piece, renamed into place at the end) or in memory.
use super::Audio;
use crate::error::{check_signal, DspError, Result};
use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::{Path, PathBuf};

/// Sample format of a written WAV file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WavFormat {
    /// 16-bit integer PCM; samples are clipped to `[-1, 1]` and scaled by 32767.
    #[default]
    Pcm16,
    /// 32-bit IEEE float, written as is.
    Float32,
}

/// Writes `audio` as a mono WAV file, atomically: the samples go to a temporary file beside
/// `path`, renamed over it once complete, so a failure or an interruption never leaves a
/// truncated file at `path` or destroys what was there.
pub fn write_wav(path: impl AsRef<Path>, audio: &Audio, format: WavFormat) -> Result<()> {
    let path = path.as_ref();
    check_signal(&path.display().to_string(), &audio.samples)?;
    let mut w = WavFileWriter::create(path, audio.sample_rate, format)?;
    w.push(&audio.samples)?;
    w.finish().map(drop)
}

/// The header of a mono file at `sample_rate` in `format`.
fn spec(sample_rate: u32, format: WavFormat) -> hound::WavSpec {
    hound::WavSpec {
        channels: 1,
        sample_rate,
        bits_per_sample: match format {
            WavFormat::Pcm16 => 16,
            WavFormat::Float32 => 32,
        },
        sample_format: match format {
            WavFormat::Pcm16 => hound::SampleFormat::Int,
            WavFormat::Float32 => hound::SampleFormat::Float,
        },
    }
}

/// Appends `samples` (PCM: clipped to `[-1, 1]`, scaled by 32767 and rounded).
fn write_samples<W: Write + Seek>(
    w: &mut hound::WavWriter<W>,
    samples: &[f32],
    format: WavFormat,
) -> hound::Result<()> {
    match format {
        WavFormat::Pcm16 => {
            for &s in samples {
                w.write_sample((s.clamp(-1.0, 1.0) * 32767.0).round() as i16)?;
            }
        }
        WavFormat::Float32 => {
            for &s in samples {
                w.write_sample(s)?;
            }
        }
    }
    Ok(())
}

/// A complete mono WAV file in memory (for pipes and network replies, which cannot seek).
pub fn wav_bytes(audio: &Audio, format: WavFormat) -> Result<Vec<u8>> {
    check_signal("audio", &audio.samples)?;
    check_rate("<memory>".as_ref(), audio.sample_rate)?;
    let enc = |e: hound::Error| DspError::Encode {
        path: "<memory>".into(),
        reason: e.to_string(),
    };
    let mut cursor = std::io::Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut cursor, spec(audio.sample_rate, format)).map_err(enc)?;
    write_samples(&mut w, &audio.samples, format).map_err(enc)?;
    w.finalize().map_err(enc)?;
    Ok(cursor.into_inner())
}

fn check_rate(path: &Path, sample_rate: u32) -> Result<()> {
    if sample_rate == 0 {
        return Err(DspError::UnsupportedSampleRate {
            what: path.display().to_string(),
            got: 0,
            expected: None,
        });
    }
    Ok(())
}

/// A mono WAV file written piece by piece, safely:
///
/// - the samples go to a temporary file beside the destination (`NAME.partial-XXXXXX.wav`),
///   whose header is brought up to date after every [`push`](Self::push), so at any moment
///   (a crash, a kill, a full disk) it is a valid WAV holding everything pushed so far;
/// - [`finish`](Self::finish) syncs it and renames it over the destination in one step: the
///   destination is never seen half-written, an earlier file there stays intact until then,
///   and of two writers to one destination the last to finish wins, whole;
/// - [`keep_partial`](Self::keep_partial) stops early and keeps what was written under the
///   temporary name (the destination untouched); dropping the writer unfinished removes it.
pub struct WavFileWriter {
    writer: Option<hound::WavWriter<BufWriter<File>>>,
    /// The same file, for `sync_all` after hound is done with it.
    file: File,
    temp: Option<tempfile::TempPath>,
    dest: PathBuf,
    format: WavFormat,
    samples: usize,
}

impl std::fmt::Debug for WavFileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WavFileWriter")
            .field("dest", &self.dest)
            .field("partial", &self.partial_path())
            .field("samples", &self.samples)
            .finish()
    }
}

impl WavFileWriter {
    /// Starts a file for `dest` (its folder must exist and be writable; `dest` itself is not
    /// touched until [`finish`](Self::finish)). A symbolic link at `dest` is followed: the
    /// file it points to is replaced, the link kept.
    pub fn create(dest: impl AsRef<Path>, sample_rate: u32, format: WavFormat) -> Result<Self> {
        let given = dest.as_ref();
        check_rate(given, sample_rate)?;
        let dest = std::fs::canonicalize(given).unwrap_or_else(|_| given.to_path_buf());
        let io = |source: std::io::Error| DspError::Io {
            path: given.to_path_buf(),
            source,
        };
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let stem = dest
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "audio".into());
        let named = tempfile::Builder::new()
            .prefix(&format!("{stem}.partial-"))
            .suffix(".wav")
            .tempfile_in(&dir)
            .map_err(io)?;
        let (file, temp) = named.into_parts();
        let clone = file.try_clone().map_err(io)?;
        let writer = hound::WavWriter::new(BufWriter::new(file), spec(sample_rate, format))
            .map_err(|e| DspError::Encode {
                path: temp.to_path_buf(),
                reason: e.to_string(),
            })?;
        let mut w = Self {
            writer: Some(writer),
            file: clone,
            temp: Some(temp),
            dest,
            format,
            samples: 0,
        };
        w.checkpoint()?;
        Ok(w)
    }

    /// The temporary file being written (where [`keep_partial`](Self::keep_partial) leaves it).
    pub fn partial_path(&self) -> &Path {
        self.temp.as_deref().unwrap_or(&self.dest)
    }

    /// Where [`finish`](Self::finish) puts the file.
    pub fn destination(&self) -> &Path {
        &self.dest
    }

    /// Samples written so far.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// Appends samples (checked finite first: nothing is written if one is not; an empty
    /// piece is fine) and brings the header up to date.
    pub fn push(&mut self, samples: &[f32]) -> Result<()> {
        if !samples.is_empty() {
            check_signal(&self.partial_path().display().to_string(), samples)?;
        }
        let path = self.partial_path().to_path_buf();
        let Some(w) = self.writer.as_mut() else {
            return Err(DspError::Encode {
                path,
                reason: "the writer is already finished".into(),
            });
        };
        write_samples(w, samples, self.format).map_err(|e| DspError::Encode {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        self.samples += samples.len();
        self.checkpoint()
    }

    /// Brings the header up to date and hands the data to the operating system.
    fn checkpoint(&mut self) -> Result<()> {
        let path = self.partial_path().to_path_buf();
        if let Some(w) = self.writer.as_mut() {
            w.flush().map_err(|e| DspError::Encode {
                path,
                reason: e.to_string(),
            })?;
        }
        Ok(())
    }

    /// Completes the header, syncs the file to disk and renames it over the destination;
    /// returns the destination.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.complete()?;
        let Some(temp) = self.temp.take() else {
            return Ok(self.dest.clone());
        };
        temp.persist(&self.dest).map_err(|e| DspError::Io {
            path: self.dest.clone(),
            source: e.error,
        })?;
        Ok(self.dest.clone())
    }

    /// Stops here and keeps the samples written so far in the temporary file (a complete
    /// WAV); returns its path. The destination is not touched.
    pub fn keep_partial(mut self) -> Result<PathBuf> {
        self.complete()?;
        let Some(temp) = self.temp.take() else {
            return Ok(self.dest.clone());
        };
        temp.keep().map_err(|e| DspError::Io {
            path: self.dest.clone(),
            source: e.error,
        })
    }

    fn complete(&mut self) -> Result<()> {
        let path = self.partial_path().to_path_buf();
        if let Some(w) = self.writer.take() {
            w.finalize().map_err(|e| DspError::Encode {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        }
        self.file
            .sync_all()
            .map_err(|source| DspError::Io { path, source })
    }
}

impl Drop for WavFileWriter {
    fn drop(&mut self) {
        // Unfinished: hound's own drop would complete the header; the temporary file is
        // removed by `TempPath`'s drop right after.
        if let Some(w) = self.writer.take() {
            let _ = w.finalize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type R = std::result::Result<(), Box<dyn std::error::Error>>;

    fn files(dir: &Path) -> std::io::Result<Vec<String>> {
        let mut v: Vec<String> = std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<_>>()?;
        v.sort();
        Ok(v)
    }

    #[test]
    fn the_partial_file_is_a_valid_wav_after_every_push_and_the_old_file_survives() -> R {
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("out.wav");
        write_wav(
            &dest,
            &Audio::new(vec![0.5; 10], 24_000),
            WavFormat::Float32,
        )?;
        let mut w = WavFileWriter::create(&dest, 24_000, WavFormat::Float32)?;
        let partial = w.partial_path().to_path_buf();
        let name = partial
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        assert!(
            name.as_deref()
                .is_some_and(|n| n.starts_with("out.partial-") && n.ends_with(".wav")),
            "{partial:?}"
        );
        let empty = hound::WavReader::open(&partial)?;
        assert_eq!(
            (empty.len(), empty.spec().sample_rate),
            (0, 24_000),
            "valid at once"
        );
        w.push(&[0.1, 0.2])?;
        // What a reader sees mid-way (no finalize): exactly the samples pushed so far.
        assert_eq!(super::super::load(&partial)?.samples, vec![0.1, 0.2]);
        w.push(&[])?;
        w.push(&[-0.3])?;
        assert_eq!(super::super::load(&partial)?.samples, vec![0.1, 0.2, -0.3]);
        assert!(w.push(&[f32::NAN]).is_err());
        assert_eq!(w.samples(), 3, "a refused piece writes nothing");
        // The earlier file is untouched until the end.
        assert_eq!(super::super::load(&dest)?.samples, vec![0.5; 10]);
        assert_eq!(w.finish()?, std::fs::canonicalize(&dest)?);
        assert_eq!(super::super::load(&dest)?.samples, vec![0.1, 0.2, -0.3]);
        assert_eq!(
            files(dir.path())?,
            vec!["out.wav"],
            "no temporary file left"
        );
        Ok(())
    }

    #[test]
    fn a_dropped_writer_leaves_nothing_and_keep_partial_keeps_a_valid_file() -> R {
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("a.wav");
        let mut w = WavFileWriter::create(&dest, 16_000, WavFormat::Pcm16)?;
        w.push(&[0.25; 100])?;
        drop(w);
        assert!(files(dir.path())?.is_empty(), "{:?}", files(dir.path())?);

        let mut w = WavFileWriter::create(&dest, 16_000, WavFormat::Pcm16)?;
        w.push(&[0.25; 100])?;
        let kept = w.keep_partial()?;
        let back = super::super::load(&kept)?;
        assert_eq!((back.samples.len(), back.sample_rate), (100, 16_000));
        assert!(!dest.exists(), "the destination is not touched");
        Ok(())
    }

    #[test]
    fn two_writers_to_one_destination_leave_the_last_finished_whole() -> R {
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("same.wav");
        let mut a = WavFileWriter::create(&dest, 24_000, WavFormat::Float32)?;
        let mut b = WavFileWriter::create(&dest, 24_000, WavFormat::Float32)?;
        a.push(&[0.1; 50])?;
        b.push(&[0.2; 7])?;
        b.finish()?;
        a.push(&[0.1; 50])?;
        a.finish()?;
        assert_eq!(super::super::load(&dest)?.samples, vec![0.1; 100]);
        assert_eq!(files(dir.path())?, vec!["same.wav"]);
        Ok(())
    }

    #[test]
    fn a_symlinked_destination_keeps_its_link() -> R {
        let dir = tempfile::tempdir()?;
        let real = dir.path().join("real.wav");
        write_wav(&real, &Audio::new(vec![0.5; 4], 24_000), WavFormat::Float32)?;
        #[cfg(unix)]
        {
            let link = dir.path().join("link.wav");
            std::os::unix::fs::symlink(&real, &link)?;
            write_wav(
                &link,
                &Audio::new(vec![0.25; 3], 24_000),
                WavFormat::Float32,
            )?;
            assert!(std::fs::symlink_metadata(&link)?.file_type().is_symlink());
            assert_eq!(super::super::load(&real)?.samples, vec![0.25; 3]);
        }
        Ok(())
    }

    #[test]
    fn in_memory_bytes_decode_to_the_samples() -> R {
        let audio = Audio::new(vec![0.0, 0.5, -0.25, 1.5], 24_000);
        let back = super::super::decode(wav_bytes(&audio, WavFormat::Float32)?, Some("wav"))?;
        assert_eq!(back.samples, audio.samples);
        let back = super::super::decode(wav_bytes(&audio, WavFormat::Pcm16)?, Some("wav"))?;
        assert!((back.samples[1] - 0.5).abs() < 1e-4);
        assert!((back.samples[3] - 1.0).abs() < 1e-4, "clipped to 1");
        Ok(())
    }
}
