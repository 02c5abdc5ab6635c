//! Decoding WAV, FLAC, MP3 and Ogg/Vorbis with symphonia, downmixed to mono by the channel
//! mean (librosa's `to_mono`).
use super::Audio;
use crate::error::{DspError, Result};
use std::fs::File;
use std::io::Cursor;
use std::path::Path;
use symphonia::core::codecs::audio::AudioDecoderOptions;
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, TrackType};
use symphonia::core::io::{MediaSource, MediaSourceStream};
use symphonia::core::meta::MetadataOptions;

/// Decodes the audio file at `path` to mono.
pub fn load(path: impl AsRef<Path>) -> Result<Audio> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|source| DspError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let ext = path.extension().and_then(|e| e.to_str());
    decode_source(Box::new(file), ext, &path.display().to_string())
}

/// Decodes an in-memory audio file to mono. `extension` (`"wav"`, `"mp3"`, ...) is a hint for
/// the container probe; the content decides.
pub fn decode(bytes: Vec<u8>, extension: Option<&str>) -> Result<Audio> {
    decode_source(Box::new(Cursor::new(bytes)), extension, "<memory>")
}

fn decode_source(source: Box<dyn MediaSource>, ext: Option<&str>, name: &str) -> Result<Audio> {
    let unsupported = |reason: String| DspError::UnsupportedFormat {
        source_name: name.to_string(),
        reason,
    };
    let corrupt = |reason: String| DspError::Decode {
        source_name: name.to_string(),
        reason,
    };
    let mss = MediaSourceStream::new(source, Default::default());
    let mut hint = Hint::new();
    if let Some(ext) = ext {
        hint.with_extension(ext.trim_start_matches('.'));
    }
    let mut format = symphonia::default::get_probe()
        .probe(
            &hint,
            mss,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(|e| unsupported(e.to_string()))?;
    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| unsupported("no audio track".into()))?;
    let track_id = track.id;
    let params = track
        .codec_params
        .as_ref()
        .and_then(|p| p.audio())
        .ok_or_else(|| unsupported("track has no audio codec parameters".into()))?
        .clone();
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(|e| unsupported(e.to_string()))?;
    let mut rate = params.sample_rate;
    let mut mono: Vec<f32> = Vec::new();
    let mut interleaved: Vec<f32> = Vec::new();
    loop {
        let packet = match format.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(SymphoniaError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break
            }
            Err(e) => return Err(corrupt(e.to_string())),
        };
        if packet.track_id != track_id {
            continue;
        }
        let buf = decoder
            .decode(&packet)
            .map_err(|e| corrupt(e.to_string()))?;
        let spec = buf.spec();
        rate = rate.or(Some(spec.rate()));
        let channels = spec.channels().count().max(1);
        interleaved.resize(buf.samples_interleaved(), 0.0);
        buf.copy_to_slice_interleaved(&mut interleaved);
        if channels == 1 {
            mono.extend_from_slice(&interleaved);
        } else {
            let inv = channels as f32;
            mono.extend(
                interleaved
                    .chunks_exact(channels)
                    .map(|f| f.iter().sum::<f32>() / inv),
            );
        }
    }
    let sample_rate = rate.ok_or_else(|| unsupported("unknown sample rate".into()))?;
    if sample_rate == 0 {
        return Err(DspError::UnsupportedSampleRate {
            what: name.to_string(),
            got: 0,
            expected: None,
        });
    }
    if mono.is_empty() {
        return Err(DspError::EmptyAudio {
            what: name.to_string(),
        });
    }
    Ok(Audio {
        samples: mono,
        sample_rate,
    })
}
