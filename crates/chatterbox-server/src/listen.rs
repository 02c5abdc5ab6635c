//! The accept loop: each TCP connection is served as HTTP/1.1 by hyper with a deadline for the
//! request head (a client that sends its head too slowly, or leaves a kept-alive connection
//! idle, is disconnected), and a graceful shutdown that stops accepting, lets the open
//! connections finish their requests and closes whatever is still open after a deadline.
//! (axum's own `serve` sets no timer, so hyper's header timeout would never fire there.)
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;

/// Pause after a failed `accept` (out of file descriptors, say) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Deadlines of a connection and of the shutdown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Longest wait for a request head, from its first byte or from the end of the previous
    /// response on a kept-alive connection.
    pub header: Duration,
    /// Longest wait, after the shutdown signal, for open connections to finish.
    pub drain: Duration,
}

/// Serves `router` on `listener` until `shutdown` completes, then drains.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    timeouts: Timeouts,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let open = graceful.count();
    if tokio::time::timeout(timeouts.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open,
            secs = timeouts.drain.as_secs_f32(),
            "connections still open at the shutdown deadline: closing them"
        );
    }
}
