//! `POST /v1/audio/speech`: validates the request, queues it, waits for the first audio (so
//! every error before it is an ordinary HTTP error), then answers the whole file, the file's
//! bytes as they are encoded (`stream_format=audio`), or SSE events (`stream_format=sse`).
//! Dropping the response body (the client left) closes the job's channel: the worker stops.
//!
//! Speech cut at the token cap (a sentence reached `max_new_tokens` before the model drew its
//! stop token) is told where the protocol allows: a whole file carries
//! `X-Chatterbox-Truncated: true`, an SSE stream's `speech.audio.done` event
//! `"truncated": true`; a chunked audio stream cannot say it (its headers went out with the
//! first audio, and a body is only audio). `chatterbox_speech_truncated_total` counts them
//! all.
use crate::app::{App, RequestId};
use crate::auth::BodyDeadline;
use crate::config::MAX_INPUT_CHARS;
use crate::encoder::{encode_file, encoder, Encoder};
use crate::error::ApiError;
use crate::format::{AudioFormat, StreamFormat};
use crate::job::{Event, SpeechJob, Work};
use crate::model::SAMPLE_RATE;
use crate::request::SpeechRequest;
use crate::sse;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chatterbox_pipeline::SentenceTiming;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// Extra wait past the request deadline for the worker to report the timeout itself.
const GRACE: Duration = Duration::from_secs(2);

/// The response header naming the request's fields that its model ignores (only those the
/// request set), e.g. `cfg_weight, exaggeration` for Turbo.
pub(crate) const IGNORED_OPTIONS: HeaderName =
    HeaderName::from_static("x-chatterbox-ignored-options");

/// The response header of a whole file whose speech was cut at the token cap (`true`; absent
/// otherwise).
pub(crate) const TRUNCATED: HeaderName = HeaderName::from_static("x-chatterbox-truncated");

/// The handler.
pub(crate) async fn speech(
    State(app): State<Arc<App>>,
    id: Option<Extension<RequestId>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let id = id.map_or_else(|| app.request_id(), |Extension(RequestId(id))| id);
    match handle(app, id, body, Answer::Speech).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// The API error of a body that could not be read: 413 past the limit, 408 when the client
/// paused longer than the body timeout or the whole body missed the body deadline, 400
/// otherwise.
pub(crate) fn body_error(
    status: StatusCode,
    text: String,
    error: &(dyn std::error::Error + 'static),
    limit: usize,
) -> ApiError {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return ApiError::body_timeout();
        }
        if e.is::<BodyDeadline>() {
            return ApiError::body_deadline();
        }
        source = e.source();
    }
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(limit)
    } else {
        ApiError::bad_request(text)
    }
}

/// The job's events, with the request deadline.
struct Events {
    rx: UnboundedReceiver<Event>,
    deadline: tokio::time::Instant,
    /// Sentence timings received and not yet taken ([`Event::Timings`] never leaves
    /// [`Events::next`]: they gather here).
    timings: Vec<SentenceTiming>,
}

impl Events {
    /// The next event other than timings (those are kept in `timings`); a timeout or a
    /// worker gone without a word become errors.
    async fn next(&mut self) -> Next {
        loop {
            match tokio::time::timeout_at(self.deadline, self.rx.recv()).await {
                Ok(Some(Event::Timings(t))) => self.timings.extend(t),
                Ok(Some(Event::Audio(s))) => return Next::Audio(s),
                Ok(Some(Event::Done { truncated })) => return Next::Done { truncated },
                Ok(Some(Event::Error(e))) => return Next::Error(e),
                Ok(None) => {
                    return Next::Error(ApiError::internal("the generation ended unexpectedly"))
                }
                Err(_) => return Next::Error(ApiError::timeout()),
            }
        }
    }
}

/// A job's event as [`Events::next`] hands it on (timings gathered aside).
enum Next {
    /// See [`Event::Audio`].
    Audio(Vec<f32>),
    /// See [`Event::Done`].
    Done {
        /// See [`Event::Done`].
        truncated: bool,
    },
    /// See [`Event::Error`].
    Error(ApiError),
}

/// What the request answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// `/v1/audio/speech`: a file, an audio stream or SSE events, as `stream_format` asks.
    Speech,
    /// `/v1/audio/captioned_speech`: one JSON object with the whole file and the timings
    /// ([`crate::captioned`]).
    Captioned,
}

/// A speech request, answered as `answer` says.
pub(crate) async fn handle(
    app: Arc<App>,
    id: u64,
    body: Result<Bytes, BytesRejection>,
    answer: Answer,
) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let body =
        body.map_err(|e| body_error(e.status(), e.body_text(), &e, app.config.max_json_bytes))?;
    let req = SpeechRequest::from_json(&body, MAX_INPUT_CHARS)?;
    if answer == Answer::Speech && req.timestamps && req.stream != StreamFormat::Sse {
        return Err(ApiError::invalid(
            "timestamps",
            "`timestamps` come as SSE events: use `stream_format: \"sse\"`, or POST \
             /v1/audio/captioned_speech for the audio and timestamps in one JSON object",
        ));
    }
    let lexicon = match &req.lexicon {
        None => None,
        Some(name) => Some(app.config.lexicons.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = app.config.lexicons.keys().map(String::as_str).collect();
            ApiError::invalid(
                "lexicon",
                if known.is_empty() {
                    format!("no lexicon {name:?}: this server has no lexicons")
                } else {
                    format!("no lexicon {name:?}; this server has: {}", known.join(", "))
                },
            )
        })?),
    };
    let model = app.resolve_model(&req.model)?;
    let voice = app.resolve_voice(req.voice.as_deref(), model)?;
    let ignored = req.ignored_by(model);
    let deadline = t0 + app.config.request_timeout;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let chars = req.input.chars().count();
    tracing::info!(
        request = id,
        model = %model,
        chars,
        format = req.format.name(),
        stream = ?req.stream,
        "speech request"
    );
    let job = SpeechJob {
        id,
        text: req.input,
        overrides: req.overrides,
        max_new_tokens: app.config.max_new_tokens,
        lexicon,
        voice,
        deadline,
        live: answer == Answer::Speech && req.stream != StreamFormat::File,
        word_timings: answer == Answer::Captioned || req.timestamps,
        tx,
    };
    app.engine
        .submit(model, Work::Speech(job), app.config.retry_after_secs)?;
    let mut events = Events {
        rx,
        deadline: tokio::time::Instant::from_std(deadline) + GRACE,
        timings: Vec::new(),
    };
    let (first, done, truncated) = match events.next().await {
        Next::Audio(s) => (s, false, false),
        Next::Done { truncated } => (Vec::new(), true, truncated),
        Next::Error(e) => return Err(e),
    };
    app.metrics.first_audio(t0.elapsed());
    let run = Run {
        app,
        id,
        events,
        t0,
        samples: first.len(),
        chars,
        truncated,
    };
    let mut r = match (answer, req.stream) {
        (Answer::Captioned, _) => {
            let (bytes, run) = whole_bytes(run, req.format, first, done).await?;
            crate::captioned::response(req.format, &bytes, &run.events.timings, run.truncated)
        }
        (Answer::Speech, StreamFormat::File) => whole_file(run, req.format, first, done).await?,
        (Answer::Speech, StreamFormat::Audio | StreamFormat::Sse) => {
            streamed(run, req.format, req.stream, req.timestamps, first, done)?
        }
    };
    if !ignored.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&ignored.join(", ")) {
            r.headers_mut().insert(IGNORED_OPTIONS, v);
        }
    }
    Ok(r)
}

/// A request whose audio is arriving.
struct Run {
    app: Arc<App>,
    /// The request id, for logs.
    id: u64,
    events: Events,
    t0: Instant,
    samples: usize,
    chars: usize,
    /// Whether the speech was cut at the token cap (known at `Done`).
    truncated: bool,
}

impl Run {
    fn finished(&self) {
        let secs = self.samples as f64 / f64::from(SAMPLE_RATE);
        self.app.metrics.speech_done(self.t0.elapsed(), secs);
        if self.truncated {
            self.app.metrics.speech_truncated();
        }
    }
}

async fn whole_file(
    run: Run,
    format: AudioFormat,
    samples: Vec<f32>,
    done: bool,
) -> Result<Response, ApiError> {
    let (bytes, run) = whole_bytes(run, format, samples, done).await?;
    let mut r = ([(header::CONTENT_TYPE, format.content_type())], bytes).into_response();
    if run.truncated {
        r.headers_mut()
            .insert(TRUNCATED, HeaderValue::from_static("true"));
    }
    Ok(r)
}

/// The whole audio, encoded as one file.
async fn whole_bytes(
    mut run: Run,
    format: AudioFormat,
    mut samples: Vec<f32>,
    mut done: bool,
) -> Result<(Vec<u8>, Run), ApiError> {
    while !done {
        match run.events.next().await {
            Next::Audio(s) => samples.extend(s),
            Next::Done { truncated } => {
                done = true;
                run.truncated = truncated;
            }
            Next::Error(e) => return Err(e),
        }
    }
    run.samples = samples.len();
    let bytes = tokio::task::spawn_blocking(move || encode_file(format, &samples))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(e.to_string()))?;
    run.finished();
    Ok((bytes, run))
}

/// What the streamed body is made of, before framing.
enum Piece {
    /// Encoded bytes (never empty).
    Audio(Vec<u8>),
    /// Sentence timings (never empty), for a `timestamps` event.
    Timestamps(Vec<SentenceTiming>),
    /// The audio is complete; whether it was cut at the token cap.
    End {
        /// See [`Run::truncated`].
        truncated: bool,
    },
    /// The generation failed after the response started.
    Failed(ApiError),
}

/// The body's state: the events, the encoder, and the audio not yet encoded.
struct Streaming {
    run: Run,
    enc: Box<dyn Encoder>,
    /// The file's first bytes, not sent yet.
    start: Option<Vec<u8>>,
    /// The first audio, not encoded yet.
    first: Option<Vec<f32>>,
    /// The job said `Done`.
    done: bool,
    /// The encoder has been finished: only the end is left.
    finished: bool,
    /// Nothing more to send.
    over: bool,
    /// Whether the request asked for `timestamps` events.
    timestamps: bool,
}

impl Streaming {
    fn fail(&mut self, e: ApiError) -> Option<Piece> {
        self.over = true;
        // the response has started: this is the only place the failure is told
        if e.is_internal() {
            tracing::error!(request = self.run.id, detail = %e.message, "the stream failed after its first audio");
        } else {
            tracing::warn!(
                request = self.run.id,
                status = e.status.as_u16(),
                code = e.code,
                "the stream failed after its first audio"
            );
        }
        Some(Piece::Failed(e))
    }

    /// The timings gathered so far, when the request wants them.
    fn pending_timestamps(&mut self) -> Option<Piece> {
        if !self.timestamps || self.run.events.timings.is_empty() {
            return None;
        }
        Some(Piece::Timestamps(std::mem::take(
            &mut self.run.events.timings,
        )))
    }

    async fn next_piece(&mut self) -> Option<Piece> {
        if self.over {
            return None;
        }
        if self.start.is_none() {
            // a chunk's timings follow its audio
            if let Some(p) = self.pending_timestamps() {
                return Some(p);
            }
        }
        let mut out = self.start.take().unwrap_or_default();
        loop {
            if self.finished {
                if let Some(p) = self.pending_timestamps() {
                    return Some(p);
                }
                self.over = true;
                self.run.finished();
                return Some(Piece::End {
                    truncated: self.run.truncated,
                });
            }
            let samples = match self.first.take() {
                Some(s) => s,
                None if self.done => {
                    match self.enc.finish() {
                        Ok(b) => out.extend(b),
                        Err(e) => return self.fail(ApiError::internal(e.to_string())),
                    }
                    self.finished = true;
                    if out.is_empty() {
                        continue;
                    }
                    return Some(Piece::Audio(out));
                }
                None => match self.run.events.next().await {
                    Next::Audio(s) => {
                        self.run.samples += s.len();
                        s
                    }
                    Next::Done { truncated } => {
                        self.done = true;
                        self.run.truncated = truncated;
                        continue;
                    }
                    Next::Error(e) => return self.fail(e),
                },
            };
            match self.enc.push(&samples) {
                Ok(b) => out.extend(b),
                Err(e) => return self.fail(ApiError::internal(e.to_string())),
            }
            if !out.is_empty() {
                return Some(Piece::Audio(out));
            }
        }
    }
}

fn streamed(
    run: Run,
    format: AudioFormat,
    framing: StreamFormat,
    timestamps: bool,
    first: Vec<f32>,
    done: bool,
) -> Result<Response, ApiError> {
    let (enc, start) = encoder(format, None).map_err(|e| ApiError::internal(e.to_string()))?;
    let chars = run.chars;
    let state = Streaming {
        run,
        enc,
        start: Some(start),
        first: Some(first),
        done,
        finished: false,
        over: false,
        timestamps: timestamps && framing == StreamFormat::Sse,
    };
    let sse_mode = framing == StreamFormat::Sse;
    let body = futures_util::stream::unfold(state, move |mut st| async move {
        let piece = st.next_piece().await?;
        let item: Result<Bytes, std::io::Error> = match (piece, sse_mode) {
            (Piece::Audio(b), false) => Ok(Bytes::from(b)),
            (Piece::Audio(b), true) => Ok(Bytes::from(sse::delta(&b))),
            (Piece::Timestamps(t), true) => Ok(Bytes::from(sse::timestamps(&t))),
            // never made: timestamps are SSE only
            (Piece::Timestamps(_), false) => Ok(Bytes::new()),
            (Piece::End { .. }, false) => return None,
            (Piece::End { truncated }, true) => Ok(Bytes::from(sse::done(chars, truncated))),
            // Aborts the chunked body: the client sees a truncated response, not a file
            // that looks complete.
            (Piece::Failed(e), false) => Err(std::io::Error::other(e.public_message().to_string())),
            (Piece::Failed(e), true) => Ok(Bytes::from(sse::error(&e))),
        };
        Some((item, st))
    });
    let content_type = if sse_mode {
        "text/event-stream"
    } else {
        format.content_type()
    };
    Ok((
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response())
}
