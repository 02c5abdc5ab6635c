//! The output WAV (or raw PCM) file: checked before any model work (writable, not one of the
//! inputs, not binary onto a terminal), then written safely: a temporary file beside it whose
//! header is valid after every chunk, renamed into place at the end (see `chatterbox_dsp::
//! audio::WavFileWriter` and `RawFileWriter`); on Ctrl-C or SIGTERM the finished chunks stay in
//! that file (`interrupt`).
//!
//! Standard output cannot seek back to fill in a WAV header: a whole WAV is written there at
//! the end, except when streaming (`speak --stream`), where a header of unknown length (sizes
//! `0xFFFFFFFF`, as ffmpeg writes to pipes) goes first and the samples follow as they come;
//! raw PCM goes there as it comes. Either way each piece is flushed as soon as it is written.
use crate::args::WavFormatArg;
use crate::interrupt;
use anyhow::{anyhow, bail, Context, Result};
use chatterbox_dsp::audio::{RawFileWriter, WavFileWriter};
use chatterbox_dsp::{Audio, WavFormat};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

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
    /// is opened for appending (not modified), and a temporary file is created and removed in
    /// its folder (where the output is written before it is renamed into place). `-` is
    /// standard output, refused when that is a terminal.
    pub fn check(path: &Path) -> Result<Self> {
        if path == Path::new("-") {
            if std::io::stdout().is_terminal() {
                bail!(
                    "-o -: standard output is a terminal, and audio data is binary; redirect it \
                     (-o - > out.wav, or -o - | aplay) or pass -o FILE"
                );
            }
            return Ok(Self::Stdout);
        }
        let what = || format!("cannot write the output file {}", path.display());
        if path.is_dir() {
            bail!("{}: it is a directory", what());
        }
        let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) if !parent.is_dir() => {
                bail!("{}: the folder {} does not exist", what(), parent.display())
            }
            Some(parent) => parent.to_path_buf(),
            None => PathBuf::from("."),
        };
        if path.exists() {
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .with_context(what)?;
        }
        tempfile::Builder::new()
            .prefix(".chatterbox-check-")
            .tempfile_in(&dir)
            .with_context(|| format!("{}: cannot create a file in {}", what(), dir.display()))?;
        Ok(Self::File(path.to_path_buf()))
    }

    /// Refuses to write over one of the inputs (`(option, path)` pairs): the output would
    /// destroy it.
    pub fn refuse_inputs(&self, inputs: &[(&str, &Path)]) -> Result<()> {
        let Self::File(out) = self else {
            return Ok(());
        };
        for (option, input) in inputs {
            // Equal when both exist and are one file (links and `./` spellings included).
            if same_file::is_same_file(out, input).unwrap_or(false) {
                bail!(
                    "the output {} is the {option} file: writing it would destroy the input; \
                     pass another -o",
                    out.display()
                );
            }
        }
        Ok(())
    }

    /// A writer that takes the audio piece by piece (long texts: memory stays flat). A file is
    /// written into a temporary file as the audio comes and renamed into place by
    /// [`Sink::finish`]; dropped unfinished, the temporary file is removed; on a signal it is
    /// kept (see `interrupt`). On standard output a WAV is written whole by [`Sink::finish`],
    /// unless `live` (`--stream`): then as the audio comes, after a header of unknown length;
    /// raw PCM always as it comes.
    pub fn sink(&self, sample_rate: u32, format: WavFormatArg, live: bool) -> Result<Sink> {
        let samples = sample_format(format);
        let inner = match self {
            Self::File(path) => {
                let w = if format == WavFormatArg::Raw {
                    RawFileWriter::create(path, samples).map(FileWriter::Raw)
                } else {
                    WavFileWriter::create(path, sample_rate, samples).map(FileWriter::Wav)
                }
                .with_context(|| format!("cannot write {}", path.display()))?;
                let shared: interrupt::Shared = Arc::new(Mutex::new(Some(w)));
                interrupt::guard(&shared);
                SinkInner::File {
                    writer: shared,
                    path: path.clone(),
                }
            }
            Self::Stdout if format == WavFormatArg::Raw => SinkInner::Pipe { header: None },
            Self::Stdout if live => SinkInner::Pipe {
                header: Some(chatterbox_dsp::audio::wav_stream_header(
                    sample_rate,
                    samples,
                )?),
            },
            Self::Stdout => SinkInner::Memory(Vec::new()),
        };
        Ok(Sink {
            inner,
            format: samples,
            sample_rate,
            samples: 0,
            bytes: Vec::new(),
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

/// The sample format (raw PCM is 16-bit).
fn sample_format(format: WavFormatArg) -> WavFormat {
    match format {
        WavFormatArg::Pcm16 | WavFormatArg::Raw => WavFormat::Pcm16,
        WavFormatArg::F32 => WavFormat::Float32,
    }
}

/// The file being written: a WAV file or a raw PCM one, each through a temporary file beside
/// its destination.
#[derive(Debug)]
pub enum FileWriter {
    /// `--wav-format pcm16` or `f32`.
    Wav(WavFileWriter),
    /// `--wav-format raw`.
    Raw(RawFileWriter),
}

impl FileWriter {
    /// Appends samples (the file is valid after it).
    pub fn push(&mut self, samples: &[f32]) -> chatterbox_dsp::Result<()> {
        match self {
            Self::Wav(w) => w.push(samples),
            Self::Raw(w) => w.push(samples),
        }
    }

    /// Completes the file and renames it over the destination.
    pub fn finish(self) -> chatterbox_dsp::Result<PathBuf> {
        match self {
            Self::Wav(w) => w.finish(),
            Self::Raw(w) => w.finish(),
        }
    }

    /// Stops and keeps what was written under the temporary name; returns it.
    pub fn keep_partial(self) -> chatterbox_dsp::Result<PathBuf> {
        match self {
            Self::Wav(w) => w.keep_partial(),
            Self::Raw(w) => w.keep_partial(),
        }
    }

    /// Where [`FileWriter::finish`] puts the file.
    pub fn destination(&self) -> &Path {
        match self {
            Self::Wav(w) => w.destination(),
            Self::Raw(w) => w.destination(),
        }
    }

    /// Samples written so far.
    pub fn samples(&self) -> usize {
        match self {
            Self::Wav(w) => w.samples(),
            Self::Raw(w) => w.samples(),
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

enum SinkInner {
    File {
        writer: interrupt::Shared,
        path: PathBuf,
    },
    /// Standard output, written as the audio comes: `header` (a WAV stream's) goes before the
    /// first samples.
    Pipe { header: Option<Vec<u8>> },
    /// Standard output, a whole WAV written at the end.
    Memory(Vec<f32>),
}

/// Audio written as it is generated; see [`Output::sink`].
pub struct Sink {
    inner: SinkInner,
    format: WavFormat,
    sample_rate: u32,
    samples: usize,
    /// The bytes of the piece going to standard output (reused).
    bytes: Vec<u8>,
}

impl Sink {
    /// Appends samples (none is fine) and flushes them to the file or standard output.
    pub fn push(&mut self, samples: &[f32]) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        chatterbox_dsp::check_signal("generated audio", samples)?;
        match &mut self.inner {
            SinkInner::File { writer, path } => {
                let mut guard = writer.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(w) = guard.as_mut() else {
                    bail!("{} is already finished", path.display());
                };
                w.push(samples)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            SinkInner::Pipe { header } => {
                self.bytes.clear();
                if let Some(h) = header.take() {
                    self.bytes.extend_from_slice(&h);
                }
                chatterbox_dsp::audio::encode_samples(samples, self.format, &mut self.bytes);
                to_stdout(&self.bytes)?;
                interrupt::piped(samples.len());
            }
            SinkInner::Memory(v) => v.extend_from_slice(samples),
        }
        self.samples += samples.len();
        Ok(())
    }

    /// Completes the file and renames it into place (or completes standard output); returns
    /// the number of samples.
    pub fn finish(mut self) -> Result<usize> {
        match &mut self.inner {
            SinkInner::File { writer, path } => {
                let taken = writer.lock().unwrap_or_else(PoisonError::into_inner).take();
                interrupt::release();
                if let Some(w) = taken {
                    w.finish()
                        .with_context(|| format!("cannot write {}", path.display()))?;
                }
            }
            // A stream without a sample is still a (valid, empty) WAV stream.
            SinkInner::Pipe { header } => to_stdout(&header.take().unwrap_or_default())?,
            SinkInner::Memory(v) => {
                let audio = Audio::new(std::mem::take(v), self.sample_rate);
                let bytes = chatterbox_dsp::audio::wav_bytes(&audio, self.format)?;
                to_stdout(&bytes)?;
            }
        }
        Ok(self.samples)
    }
}

/// Writes `bytes` to standard output and flushes it.
fn to_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => anyhow!(
                "cannot write the audio to standard output: it was closed (the program \
                 reading it has stopped)"
            ),
            _ => anyhow!(e).context("cannot write the audio to standard output"),
        })
}

impl Drop for Sink {
    fn drop(&mut self) {
        // Unfinished (an error stopped generation): the writer's drop removes its temporary
        // file, and the file at `-o` is untouched.
        if let SinkInner::File { writer, .. } = &self.inner {
            let taken = writer.lock().unwrap_or_else(PoisonError::into_inner).take();
            if taken.is_some() {
                interrupt::release();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Result<Vec<String>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(dir)? {
            v.push(e?.file_name().to_string_lossy().into_owned());
        }
        v.sort();
        Ok(v)
    }

    #[test]
    fn unwritable_paths_are_refused_and_nothing_is_left_behind() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let ok = dir.path().join("out.wav");
        assert!(matches!(Output::check(&ok)?, Output::File(_)));
        assert!(
            names(dir.path())?.is_empty(),
            "the check must not leave a file"
        );
        let err = Output::check(&dir.path().join("no/such/dir/out.wav"))
            .err()
            .context("no error")?;
        assert!(format!("{err:#}").contains("does not exist"), "{err:#}");
        assert!(Output::check(dir.path()).is_err());
        // `-` is refused exactly when standard output is a terminal.
        let stdout = Output::check(Path::new("-"));
        assert_eq!(stdout.is_ok(), !std::io::stdout().is_terminal());
        Ok(())
    }

    #[test]
    fn inputs_are_not_overwritten() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let voice = dir.path().join("voice.wav");
        std::fs::write(&voice, b"clip")?;
        let spelled = dir.path().join(".").join("voice.wav");
        let out = Output::check(&spelled)?;
        let err = out
            .refuse_inputs(&[("--file", Path::new("/nonexistent")), ("--voice", &voice)])
            .err()
            .context("no error")?;
        assert!(format!("{err}").contains("is the --voice file"), "{err}");
        #[cfg(unix)]
        {
            let link = dir.path().join("link.wav");
            std::os::unix::fs::symlink(&voice, &link)?;
            assert!(Output::check(&link)?
                .refuse_inputs(&[("--voice", &voice)])
                .is_err());
        }
        let other = Output::check(&dir.path().join("out.wav"))?;
        other.refuse_inputs(&[("--voice", &voice)])?;
        Output::Stdout.refuse_inputs(&[("--voice", &voice)])?;
        assert_eq!(std::fs::read(&voice)?, b"clip");
        Ok(())
    }

    #[test]
    fn a_sink_writes_as_it_goes_and_an_abandoned_one_leaves_the_old_file() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("s.wav");
        let out = Output::check(&path)?;
        let mut sink = out.sink(24_000, WavFormatArg::F32, true)?;
        sink.push(&[0.1, 0.2])?;
        sink.push(&[-0.3])?;
        assert!(!path.exists(), "renamed into place only at the end");
        assert_eq!(sink.finish()?, 3);
        let back = chatterbox_dsp::audio::load(&path)?;
        assert_eq!(back.samples, vec![0.1, 0.2, -0.3]);

        let mut sink = out.sink(24_000, WavFormatArg::Pcm16, false)?;
        sink.push(&[0.1])?;
        assert!(sink.push(&[f32::NAN]).is_err());
        drop(sink);
        assert_eq!(names(dir.path())?, vec!["s.wav"], "no temporary file left");
        let back = chatterbox_dsp::audio::load(&path)?;
        assert_eq!(
            back.samples,
            vec![0.1, 0.2, -0.3],
            "the earlier file is intact"
        );
        Ok(())
    }

    #[test]
    fn a_raw_sink_writes_headerless_pcm_and_keeps_the_old_file_until_done() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("s.raw");
        std::fs::write(&path, b"old")?;
        let out = Output::check(&path)?;
        let mut sink = out.sink(24_000, WavFormatArg::Raw, true)?;
        sink.push(&[0.5])?;
        sink.push(&[])?;
        sink.push(&[-1.5, 0.0])?;
        assert_eq!(std::fs::read(&path)?, b"old");
        assert_eq!(sink.finish()?, 3);
        assert_eq!(
            std::fs::read(&path)?,
            [0x00, 0x40, 0x01, 0x80, 0x00, 0x00],
            "s16le, clipped"
        );
        assert_eq!(names(dir.path())?, vec!["s.raw"]);
        Ok(())
    }
}
