//! The `response_format` and `stream_format` values, their content types, and which formats
//! this build encodes.
use crate::error::ApiError;

/// An audio format of OpenAI's `response_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AudioFormat {
    /// MPEG layer III (OpenAI's default; encoded with the `mp3` feature).
    Mp3,
    /// Opus in Ogg.
    Opus,
    /// AAC (not encoded by this build).
    Aac,
    /// FLAC, 16-bit.
    Flac,
    /// WAV, 16-bit PCM.
    Wav,
    /// Raw signed 16-bit little-endian samples, 24 kHz mono.
    Pcm,
}

impl AudioFormat {
    /// Every format of the protocol.
    pub const ALL: [AudioFormat; 6] = [
        Self::Mp3,
        Self::Opus,
        Self::Aac,
        Self::Flac,
        Self::Wav,
        Self::Pcm,
    ];

    /// The protocol name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mp3 => "mp3",
            Self::Opus => "opus",
            Self::Aac => "aac",
            Self::Flac => "flac",
            Self::Wav => "wav",
            Self::Pcm => "pcm",
        }
    }

    /// Parses `response_format`: an unknown name, or one this build cannot encode, is a 400
    /// naming the field and the format (never a substitution).
    pub fn parse(name: &str) -> Result<Self, ApiError> {
        let Some(f) = Self::ALL.into_iter().find(|f| f.name() == name) else {
            return Err(ApiError::invalid(
                "response_format",
                format!(
                    "unknown response_format {name:?}; expected one of mp3, opus, aac, flac, \
                     wav, pcm"
                ),
            ));
        };
        if !f.is_supported() {
            return Err(ApiError::invalid(
                "response_format",
                format!(
                    "response_format {name:?} is not supported by this server; use one of {}",
                    Self::supported().join(", ")
                ),
            ));
        }
        Ok(f)
    }

    /// Whether this build encodes the format.
    pub fn is_supported(self) -> bool {
        match self {
            Self::Flac | Self::Wav | Self::Pcm | Self::Opus => true,
            Self::Mp3 => cfg!(feature = "mp3"),
            Self::Aac => false,
        }
    }

    /// The names of the formats this build encodes.
    pub fn supported() -> Vec<&'static str> {
        Self::ALL
            .into_iter()
            .filter(|f| f.is_supported())
            .map(Self::name)
            .collect()
    }

    /// `Content-Type` of the audio.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Mp3 => "audio/mpeg",
            Self::Opus => "audio/ogg",
            Self::Aac => "audio/aac",
            Self::Flac => "audio/flac",
            Self::Wav => "audio/wav",
            Self::Pcm => "audio/pcm",
        }
    }
}

/// How the response is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFormat {
    /// No `stream_format`: the whole file at once, with exact sizes and `Content-Length`.
    File,
    /// `audio`: the file's bytes chunked as the model produces them.
    Audio,
    /// `sse`: server-sent `speech.audio.delta` events, then `speech.audio.done`.
    Sse,
}

impl StreamFormat {
    /// Parses `stream_format` (`audio` or `sse`).
    pub fn parse(name: &str) -> Result<Self, ApiError> {
        match name {
            "audio" => Ok(Self::Audio),
            "sse" => Ok(Self::Sse),
            _ => Err(ApiError::invalid(
                "stream_format",
                format!("unknown stream_format {name:?}; expected audio or sse"),
            )),
        }
    }
}
