//! The accept loop: each TCP connection is served as HTTP/1.1 by hyper with a deadline for the
//! request head (a client that sends its head too slowly, or leaves a kept-alive connection
//! idle, is disconnected) and for every blocked write (a client that stops reading a response
//! is disconnected), at most `max_connections` at once (one more is answered 503 and closed),
//! and a graceful shutdown. (axum's own `serve` sets no timer, so hyper's header timeout would
//! never fire there.)
//!
//! The shutdown keeps accepting: while the open connections finish their requests, a new
//! connection is served one request (the router answers `/v1` with 503 while draining) and
//! closed, so a client that arrives during the drain gets the documented 503 rather than a
//! refused connection. Once every connection that was open has finished (or the drain deadline
//! has passed) the listener is closed.
use crate::error::ApiError;
use crate::refusal::Refusal;
use axum::response::IntoResponse;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Pause after a failed `accept` (out of file descriptors, say) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Connections over the limit being answered 503 at once; beyond these, one is closed without
/// an answer.
const REJECTING: usize = 64;

/// Longest a connection over the limit is kept to answer it.
const REJECT_DEADLINE: Duration = Duration::from_secs(5);

/// How long, after the drain, connections accepted during it get to finish their answer.
const LATE_GRACE: Duration = Duration::from_secs(2);

/// Least time between two warnings about refused connections.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Deadlines and limits of the connections and of the shutdown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Longest wait for a request head, from its first byte or from the end of the previous
    /// response on a kept-alive connection.
    pub header: Duration,
    /// Longest a write may stay blocked because the client does not read.
    pub write: Duration,
    /// Longest wait, after the shutdown signal, for open connections to finish.
    pub drain: Duration,
    /// Most connections served at once.
    pub max_connections: usize,
}

/// A connection whose writes fail with `TimedOut` once one has been blocked for `timeout`
/// (the peer's receive window stayed full: it stopped reading). Hyper then drops the
/// connection and with it the response body, which stops the request's generation.
struct WriteTimeout<T> {
    io: T,
    timeout: Duration,
    /// Started when a write could not go on; cleared by any write that does.
    blocked: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteTimeout<T> {
    fn new(io: T, timeout: Duration) -> Self {
        Self {
            io,
            timeout,
            blocked: None,
        }
    }

    /// The result of a write step: `Pending` starts (or goes on with) the timer, which turns
    /// into `TimedOut` once it has run out.
    fn check<R>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match r {
            Poll::Ready(r) => {
                self.blocked = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let timer = self
                    .blocked
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client stopped reading the response (write timeout)",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.check(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.check(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.check(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.check(cx, r)
    }
}

/// Connections refused for the limit: counted, and warned about at most every
/// [`WARN_EVERY`].
struct Refusals {
    since_warning: u64,
    last_warning: Option<Instant>,
    on_refuse: Arc<dyn Fn() + Send + Sync>,
}

impl Refusals {
    fn refused(&mut self, limit: usize) {
        (self.on_refuse)();
        self.since_warning += 1;
        if self.last_warning.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            tracing::warn!(
                limit,
                refused = self.since_warning,
                reason = Refusal::TooManyConnections.name(),
                retry_after = ApiError::too_many_connections().retry_after,
                "connection limit reached: refusing connections with 503"
            );
            self.since_warning = 0;
            self.last_warning = Some(Instant::now());
        }
    }
}

/// What the accept loop shares with each connection.
struct Acceptor {
    router: Router,
    timeouts: Timeouts,
    builder: http1::Builder,
    /// One builder for the connections of the drain (one request each).
    last_call: http1::Builder,
    open: Arc<Semaphore>,
    rejecting: Arc<Semaphore>,
    refusals: Refusals,
}

impl Acceptor {
    /// Serves `stream` unless the limit is reached (then answers it 503). `graceful`: watch
    /// it for the shutdown (before the drain); `None`: serve one request and close it (during
    /// the drain), tracked in `late`.
    fn take(
        &mut self,
        stream: TcpStream,
        peer: std::net::SocketAddr,
        graceful: Option<&GracefulShutdown>,
        late: &mut JoinSet<()>,
    ) {
        let _ = stream.set_nodelay(true);
        let Ok(permit) = self.open.clone().try_acquire_owned() else {
            self.refuse(stream);
            return;
        };
        let io = TokioIo::new(WriteTimeout::new(stream, self.timeouts.write));
        let service = TowerToHyperService::new(self.router.clone());
        match graceful {
            Some(g) => {
                let conn = g.watch(self.builder.serve_connection(io, service));
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    drop(permit);
                });
            }
            None => {
                let conn = self.last_call.serve_connection(io, service);
                late.spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    drop(permit);
                });
            }
        }
    }

    /// A connection over the limit: answered `503 too_many_connections` (one request, then
    /// closed, within [`REJECT_DEADLINE`]), or closed at once when [`REJECTING`] are being
    /// answered already.
    fn refuse(&mut self, stream: TcpStream) {
        self.refusals.refused(self.timeouts.max_connections);
        let Ok(permit) = self.rejecting.clone().try_acquire_owned() else {
            return;
        };
        let mut b = http1::Builder::new();
        b.timer(TokioTimer::new())
            .header_read_timeout(self.timeouts.header.min(REJECT_DEADLINE))
            .keep_alive(false);
        let io = TokioIo::new(WriteTimeout::new(stream, self.timeouts.write));
        let service = hyper::service::service_fn(|_req| async {
            Ok::<_, std::convert::Infallible>(ApiError::too_many_connections().into_response())
        });
        let conn = b.serve_connection(io, service);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REJECT_DEADLINE, conn).await;
            drop(permit);
        });
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then drains (see the module
/// docs). `on_refuse` is called for each connection refused for the limit.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    timeouts: Timeouts,
    on_refuse: Arc<dyn Fn() + Send + Sync>,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .keep_alive(true);
    let mut last_call = builder.clone();
    last_call.keep_alive(false);
    let mut acceptor = Acceptor {
        router,
        timeouts,
        builder,
        last_call,
        open: Arc::new(Semaphore::new(timeouts.max_connections)),
        rejecting: Arc::new(Semaphore::new(REJECTING)),
        refusals: Refusals {
            since_warning: 0,
            last_warning: None,
            on_refuse,
        },
    };
    let mut late = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => acceptor.take(stream, peer, Some(&graceful), &mut late),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            () = &mut shutdown => break,
        }
    }
    let open = graceful.count();
    let drained = graceful.shutdown();
    tokio::pin!(drained);
    let deadline = tokio::time::sleep(timeouts.drain);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut drained => break,
            () = &mut deadline => {
                tracing::warn!(
                    open,
                    secs = timeouts.drain.as_secs_f32(),
                    "connections still open at the shutdown deadline: closing them"
                );
                break;
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => acceptor.take(stream, peer, None, &mut late),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = late.join_next(), if !late.is_empty() => {}
        }
    }
    drop(listener);
    // the connections that came during the drain have had their 503 or are about to
    let _ = tokio::time::timeout(LATE_GRACE, async {
        while late.join_next().await.is_some() {}
    })
    .await;
    late.abort_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_write_blocked_past_the_timeout_fails() {
        // a pipe whose reader never reads: the writer blocks once its buffer is full
        let (a, _b) = tokio::io::duplex(1024);
        let mut w = WriteTimeout::new(a, Duration::from_millis(100));
        let t0 = Instant::now();
        let chunk = vec![0u8; 4096];
        let e = loop {
            if let Err(e) = w.write(&chunk).await {
                break e;
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(100) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_reader_that_keeps_up_never_times_out() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut w = WriteTimeout::new(a, Duration::from_millis(200));
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0u8; 512];
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                match b.read(&mut buf).await {
                    Ok(0) | Err(_) => return got,
                    Ok(n) => got += n,
                }
            }
        });
        // about 0.8 s of writing at the reader's pace, each block well under the timeout
        for _ in 0..40 {
            w.write_all(&[1u8; 1024]).await.unwrap();
        }
        drop(w);
        assert_eq!(reader.await.unwrap(), 40 * 1024);
    }
}
