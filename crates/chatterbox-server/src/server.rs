//! The server: the router (routes, body limits and timeouts, auth, metrics, tracing), [`Server::bind`] to
//! listen and start the device workers, [`Server::run`] to serve until the shutdown signal
//! (then in-flight requests finish and new ones get 503: the listener keeps accepting until
//! the drain is over), and [`serve`] doing both.
use crate::app::App;
use crate::config::ServerConfig;
use crate::engine::{DeviceModels, Engine};
use crate::error::{ApiError, ServerError};
use crate::listen::{self, Timeouts};
use crate::voices::VoiceLibrary;
use crate::{auth, captioned, info, speech, voices_api};
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use axum::Router;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

/// How long past the request timeout the shutdown waits for open connections.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// A bound server with its workers started.
#[derive(Debug)]
pub struct Server {
    listener: tokio::net::TcpListener,
    app: Arc<App>,
}

impl Server {
    /// Checks the configuration ([`ServerConfig::validate`]: an empty API key is an error, not
    /// "no key"), opens the voice library, starts a worker per device (each loads its models
    /// in the background: `/ready` says when) and binds `config.addr`.
    pub async fn bind(
        config: ServerConfig,
        devices: Vec<DeviceModels>,
    ) -> Result<Self, ServerError> {
        config.validate()?;
        let voices = config
            .voices_dir
            .clone()
            .map(VoiceLibrary::open)
            .transpose()?;
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| ServerError::Bind {
                addr: config.addr.to_string(),
                source,
            })?;
        let engine = Engine::start(devices, config.queue_capacity, config.capacity_admission)?;
        Ok(Self {
            listener,
            app: Arc::new(App::new(config, engine, voices)),
        })
    }

    /// The address bound (the port chosen when the configuration asked for port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        self.listener.local_addr().map_err(ServerError::Io)
    }

    /// Serves until `shutdown` completes; then answers new requests 503 (new connections are
    /// still accepted, for one request each), lets in-flight ones finish, closes the listener
    /// and stops the workers.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let app = self.app.clone();
        let drain = async move {
            shutdown.await;
            tracing::info!("shutting down: finishing in-flight requests");
            app.draining.store(true, Ordering::Release);
        };
        let config = &self.app.config;
        let timeouts = Timeouts {
            header: config.header_timeout,
            write: config.write_timeout,
            // in-flight speech ends by its own deadline; a little more for the last bytes
            drain: config.request_timeout + DRAIN_GRACE,
            max_connections: config.max_connections,
        };
        let counter = self.app.clone();
        let on_refuse = Arc::new(move || counter.metrics.connection_refused());
        listen::serve(
            self.listener,
            router(self.app.clone()),
            timeouts,
            on_refuse,
            drain,
        )
        .await;
        self.app.draining.store(true, Ordering::Release);
        let app = self.app.clone();
        let _ = tokio::task::spawn_blocking(move || app.engine.join()).await;
        tracing::info!("server stopped");
        Ok(())
    }
}

/// Binds, serves until `shutdown` completes, then stops gracefully. The `chatterbox serve`
/// command calls this with [`shutdown_signal`].
pub async fn serve(
    config: ServerConfig,
    devices: Vec<DeviceModels>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let server = Server::bind(config, devices).await?;
    if let Ok(addr) = server.local_addr() {
        tracing::info!(%addr, "listening");
    }
    server.run(shutdown).await
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

fn router(app: Arc<App>) -> Router {
    let api = Router::new()
        .route(
            "/v1/audio/speech",
            post(speech::speech).layer(DefaultBodyLimit::max(app.config.max_json_bytes)),
        )
        .route(
            "/v1/audio/captioned_speech",
            post(captioned::captioned_speech)
                .layer(DefaultBodyLimit::max(app.config.max_json_bytes)),
        )
        .route(
            "/dev/captioned_speech",
            post(captioned::captioned_speech)
                .layer(DefaultBodyLimit::max(app.config.max_json_bytes)),
        )
        .route("/v1/models", get(info::models))
        .route(
            "/v1/voices",
            get(voices_api::list)
                .post(voices_api::create)
                .layer(DefaultBodyLimit::max(app.config.max_upload_bytes)),
        )
        .route("/v1/voices/{name}", delete(voices_api::delete))
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            auth::guard,
        ));
    // Layers run outside in: the trace span, the body's pause timeout and total deadline, then
    // `finish` (request id, OpenAI's JSON for every error, counts, the access log) around the
    // routes. Failures are logged by `finish` at the level their status deserves, not by the
    // trace layer (which would log every 503 of `/ready` while loading as an ERROR).
    Router::new()
        .route("/health", get(info::health))
        .route("/ready", get(info::ready))
        .route("/metrics", get(info::metrics))
        .merge(api)
        .fallback(|req: axum::extract::Request| async move {
            ApiError::no_route_for(req.method().as_str(), req.uri().path())
        })
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            auth::finish,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            auth::body_deadline,
        ))
        .layer(RequestBodyTimeoutLayer::new(app.config.body_timeout))
        .layer(TraceLayer::new_for_http().on_failure(()))
        .with_state(app)
}
