//! Writing mono WAV files with hound: whole (atomically), piece by piece (a temporary file
//! with a valid header after every piece, renamed into place at the end) or in memory; WAV
//! streams of unknown length for pipes (a header with the sizes `0xFFFFFFFF`, then the samples
//! as they come); and headerless PCM files, piece by piece as safely as WAV files.
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

/// A sample as 16-bit PCM: clipped to `[-1, 1]`, scaled by 32767 and rounded.
fn pcm16(s: f32) -> i16 {
    (s.clamp(-1.0, 1.0) * 32767.0).round() as i16
}

/// Appends `samples` (PCM: see [`pcm16`]).
fn write_samples<W: Write + Seek>(
    w: &mut hound::WavWriter<W>,
    samples: &[f32],
    format: WavFormat,
) -> hound::Result<()> {
    match format {
        WavFormat::Pcm16 => {
            for &s in samples {
                w.write_sample(pcm16(s))?;
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

/// The RIFF and data chunk sizes of a WAV stream whose length is unknown when its header is
/// written: `0xFFFFFFFF`, as ffmpeg and sox write to pipes. Readers (ffmpeg, sox, aplay,
/// [`decode`](super::decode())) take the data to the end of the stream.
pub const UNKNOWN_WAV_SIZE: u32 = u32::MAX;

/// The 44-byte header of a mono WAV stream of unknown length ([`UNKNOWN_WAV_SIZE`]) at
/// `sample_rate` in `format`, for outputs that cannot seek back to fill in the sizes (pipes,
/// network replies): the samples follow as [`encode_samples`] writes them, for as long as
/// there are any.
pub fn wav_stream_header(sample_rate: u32, format: WavFormat) -> Result<Vec<u8>> {
    check_rate("<stream>".as_ref(), sample_rate)?;
    // WAVE_FORMAT_PCM or WAVE_FORMAT_IEEE_FLOAT, in the 16-byte `fmt ` chunk of plain PCM.
    let (tag, bytes): (u16, u16) = match format {
        WavFormat::Pcm16 => (1, 2),
        WavFormat::Float32 => (3, 4),
    };
    let byte_rate = sample_rate.checked_mul(u32::from(bytes)).ok_or_else(|| {
        DspError::UnsupportedSampleRate {
            what: "<stream>".into(),
            got: sample_rate,
            expected: None,
        }
    })?;
    let mut h = Vec::with_capacity(44);
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&UNKNOWN_WAV_SIZE.to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&tag.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&sample_rate.to_le_bytes());
    h.extend_from_slice(&byte_rate.to_le_bytes());
    h.extend_from_slice(&bytes.to_le_bytes());
    h.extend_from_slice(&(bytes * 8).to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&UNKNOWN_WAV_SIZE.to_le_bytes());
    Ok(h)
}

/// Appends `samples` to `out` as the data of a WAV file in `format` (little-endian 16-bit PCM,
/// clipped and scaled as in the files written here, or 32-bit float): after a
/// [`wav_stream_header`], or alone as headerless PCM (`s16le`, `f32le`).
pub fn encode_samples(samples: &[f32], format: WavFormat, out: &mut Vec<u8>) {
    match format {
        WavFormat::Pcm16 => {
            out.reserve(samples.len() * 2);
            for &s in samples {
                out.extend_from_slice(&pcm16(s).to_le_bytes());
            }
        }
        WavFormat::Float32 => {
            out.reserve(samples.len() * 4);
            for &s in samples {
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
    }
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

/// A file being written beside its destination: its temporary path (removed when dropped
/// unfinished) and the destination it is renamed over when finished.
struct Partial {
    temp: Option<tempfile::TempPath>,
    dest: PathBuf,
}

impl Partial {
    /// The temporary file (once finished or kept: the file's path).
    fn path(&self) -> &Path {
        self.temp.as_deref().unwrap_or(&self.dest)
    }

    /// Renames the temporary file over the destination; returns the destination.
    fn persist(&mut self) -> Result<PathBuf> {
        let Some(temp) = self.temp.take() else {
            return Ok(self.dest.clone());
        };
        temp.persist(&self.dest).map_err(|e| DspError::Io {
            path: self.dest.clone(),
            source: e.error,
        })?;
        Ok(self.dest.clone())
    }

    /// Keeps the temporary file under its own name; returns its path.
    fn keep(&mut self) -> Result<PathBuf> {
        let Some(temp) = self.temp.take() else {
            return Ok(self.dest.clone());
        };
        temp.keep().map_err(|e| DspError::Io {
            path: self.dest.clone(),
            source: e.error,
        })
    }
}

/// The destination `given` stands for (a symbolic link followed) with an open temporary file
/// beside it (`STEM.partial-XXXXXX{suffix}`), removed when dropped.
fn partial_file(given: &Path, suffix: &str) -> Result<(Partial, File)> {
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
    let prefix = format!("{stem}.partial-");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(suffix);
    // The permissions of a file the user creates (0666 less the umask), not a temporary
    // file's 0600: the output keeps them after the rename.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let named = builder.tempfile_in(&dir).map_err(io)?;
    let (file, temp) = named.into_parts();
    let partial = Partial {
        temp: Some(temp),
        dest,
    };
    Ok((partial, file))
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
    out: Partial,
    format: WavFormat,
    samples: usize,
}

impl std::fmt::Debug for WavFileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WavFileWriter")
            .field("dest", &self.out.dest)
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
        let (out, file) = partial_file(given, ".wav")?;
        let clone = file.try_clone().map_err(|source| DspError::Io {
            path: given.to_path_buf(),
            source,
        })?;
        let writer = hound::WavWriter::new(BufWriter::new(file), spec(sample_rate, format))
            .map_err(|e| DspError::Encode {
                path: out.path().to_path_buf(),
                reason: e.to_string(),
            })?;
        let mut w = Self {
            writer: Some(writer),
            file: clone,
            out,
            format,
            samples: 0,
        };
        w.checkpoint()?;
        Ok(w)
    }

    /// The temporary file being written (where [`keep_partial`](Self::keep_partial) leaves it).
    pub fn partial_path(&self) -> &Path {
        self.out.path()
    }

    /// Where [`finish`](Self::finish) puts the file.
    pub fn destination(&self) -> &Path {
        &self.out.dest
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
        self.out.persist()
    }

    /// Stops here and keeps the samples written so far in the temporary file (a complete
    /// WAV); returns its path. The destination is not touched.
    pub fn keep_partial(mut self) -> Result<PathBuf> {
        self.complete()?;
        self.out.keep()
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

/// A headerless mono PCM file (`s16le` or `f32le`, as [`encode_samples`] writes them)
/// written piece by piece as safely as a [`WavFileWriter`]: into a temporary file beside the
/// destination (`NAME.partial-XXXXXX.raw`) that holds whole samples after every
/// [`push`](Self::push), renamed over the destination by [`finish`](Self::finish), kept by
/// [`keep_partial`](Self::keep_partial), removed when dropped unfinished.
pub struct RawFileWriter {
    file: File,
    out: Partial,
    format: WavFormat,
    samples: usize,
    buf: Vec<u8>,
}

impl std::fmt::Debug for RawFileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawFileWriter")
            .field("dest", &self.out.dest)
            .field("partial", &self.partial_path())
            .field("samples", &self.samples)
            .finish()
    }
}

impl RawFileWriter {
    /// Starts a file for `dest` (its folder must exist and be writable; `dest` itself is not
    /// touched until [`finish`](Self::finish); a symbolic link there is followed).
    pub fn create(dest: impl AsRef<Path>, format: WavFormat) -> Result<Self> {
        let (out, file) = partial_file(dest.as_ref(), ".raw")?;
        Ok(Self {
            file,
            out,
            format,
            samples: 0,
            buf: Vec::new(),
        })
    }

    /// The temporary file being written (where [`keep_partial`](Self::keep_partial) leaves it).
    pub fn partial_path(&self) -> &Path {
        self.out.path()
    }

    /// Where [`finish`](Self::finish) puts the file.
    pub fn destination(&self) -> &Path {
        &self.out.dest
    }

    /// Samples written so far.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// Appends samples (checked finite first: nothing is written if one is not; an empty
    /// piece is fine) and hands them to the operating system.
    pub fn push(&mut self, samples: &[f32]) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        let path = self.partial_path().to_path_buf();
        check_signal(&path.display().to_string(), samples)?;
        self.buf.clear();
        encode_samples(samples, self.format, &mut self.buf);
        self.file
            .write_all(&self.buf)
            .and_then(|()| self.file.flush())
            .map_err(|source| DspError::Io { path, source })?;
        self.samples += samples.len();
        Ok(())
    }

    /// Syncs the file to disk and renames it over the destination; returns the destination.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.sync()?;
        self.out.persist()
    }

    /// Stops here and keeps the samples written so far in the temporary file; returns its
    /// path. The destination is not touched.
    pub fn keep_partial(mut self) -> Result<PathBuf> {
        self.sync()?;
        self.out.keep()
    }

    fn sync(&mut self) -> Result<()> {
        let path = self.partial_path().to_path_buf();
        self.file
            .sync_all()
            .map_err(|source| DspError::Io { path, source })
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
        // the output has the permissions of a file created by the user, not 0600
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let plain = dir.path().join("plain");
            std::fs::File::create(&plain)?;
            let mode = |p: &Path| -> std::io::Result<u32> {
                Ok(std::fs::metadata(p)?.permissions().mode() & 0o777)
            };
            assert_eq!(mode(&dest)?, mode(&plain)?);
        }
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
        approx::assert_abs_diff_eq!(back.samples[1], 0.5, epsilon = 1e-4);
        approx::assert_abs_diff_eq!(back.samples[3], 1.0, epsilon = 1e-4); // clipped to 1
        Ok(())
    }

    #[test]
    fn a_wav_stream_of_unknown_length_decodes_to_its_end() -> R {
        // More samples than symphonia reads per packet and no multiple of it: the last,
        // partial packet is what a reader that wants the data size loses.
        let samples: Vec<f32> = (0..10_007).map(|i| 0.5 * (i as f32 * 0.01).sin()).collect();
        let audio = Audio::new(samples.clone(), 24_000);
        let dir = tempfile::tempdir()?;
        for format in [WavFormat::Pcm16, WavFormat::Float32] {
            let mut bytes = wav_stream_header(24_000, format)?;
            assert_eq!(bytes.len(), 44);
            assert_eq!(
                (&bytes[4..8], &bytes[40..44]),
                (&[0xFF; 4][..], &[0xFF; 4][..])
            );
            encode_samples(&samples, format, &mut bytes);
            let whole = super::super::decode(wav_bytes(&audio, format)?, Some("wav"))?;
            assert_eq!(whole.samples.len(), samples.len());
            let back = super::super::decode(bytes.clone(), Some("wav"))?;
            assert_eq!(back.sample_rate, 24_000);
            assert_eq!(back.samples, whole.samples, "{format:?}");
            // From a file, cut in the middle of a sample (a stream stopped mid-write): the
            // whole samples before the cut.
            let path = dir.path().join("stream.wav");
            bytes.push(0x12);
            std::fs::write(&path, &bytes)?;
            assert_eq!(super::super::load(&path)?.samples, whole.samples);
            // The RIFF size filled in, the data size not.
            let data = u32::try_from(bytes.len() - 8)?;
            bytes[4..8].copy_from_slice(&data.to_le_bytes());
            let back = super::super::decode(bytes, Some("wav"))?;
            assert_eq!(back.samples, whole.samples);
        }
        // Headerless PCM is the same data.
        let mut raw = Vec::new();
        encode_samples(&[0.5, -2.0, 0.0], WavFormat::Pcm16, &mut raw);
        assert_eq!(raw, [0x00, 0x40, 0x01, 0x80, 0x00, 0x00]);
        assert!(wav_stream_header(0, WavFormat::Pcm16).is_err());
        assert!(wav_stream_header(u32::MAX, WavFormat::Float32).is_err());
        Ok(())
    }

    #[test]
    fn a_raw_file_is_written_like_a_wav_file() -> R {
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("out.raw");
        std::fs::write(&dest, b"old")?;
        let mut w = RawFileWriter::create(&dest, WavFormat::Pcm16)?;
        let partial = w.partial_path().to_path_buf();
        w.push(&[0.5, -0.5])?;
        w.push(&[])?;
        assert!(w.push(&[f32::INFINITY]).is_err());
        assert_eq!(w.samples(), 2, "a refused piece writes nothing");
        assert_eq!(std::fs::read(&partial)?, [0x00, 0x40, 0x00, 0xC0]);
        assert_eq!(std::fs::read(&dest)?, b"old", "untouched until the end");
        w.finish()?;
        assert_eq!(std::fs::read(&dest)?, [0x00, 0x40, 0x00, 0xC0]);
        assert_eq!(files(dir.path())?, vec!["out.raw"]);

        let mut w = RawFileWriter::create(&dest, WavFormat::Float32)?;
        w.push(&[0.25])?;
        drop(w);
        assert_eq!(files(dir.path())?, vec!["out.raw"], "dropped: removed");
        let mut w = RawFileWriter::create(&dest, WavFormat::Float32)?;
        w.push(&[0.25])?;
        let kept = w.keep_partial()?;
        assert_eq!(std::fs::read(&kept)?, 0.25f32.to_le_bytes());
        Ok(())
    }
}
