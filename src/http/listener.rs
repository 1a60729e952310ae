//! One connection policy for every port the process opens (the API and the
//! metrics listener alike, SPEC §10):
//!
//! - a client gets `header_read_timeout` to send a request's headers (also
//!   between requests on a kept-alive connection), then the connection is
//!   closed: trickled or withheld headers cannot hold a socket;
//! - a request's line and headers hold at most [`MAX_HEAD_BYTES`] (431 past
//!   it), and a connection buffers no more than that of what it has not
//!   parsed yet: a header that never ends is cut off at 64 KiB (hyper's
//!   default buffer grows to 400 KB);
//! - at most `max_connections` connections are open at once (WebSockets
//!   upgraded from this listener count too). At the cap a newcomer takes the
//!   place of a connection that waits for a request, one never served
//!   first, then the one idle longest between requests ([`places`]): a flood
//!   of idle sockets evicts itself, and clients that re-request on
//!   kept-alive connections cannot hold every place. Connections with a
//!   request in flight and WebSockets are never closed for it; when every
//!   place holds one, the newcomer is refused at the door with a 503;
//! - a connection the server closes while the client still sends is not
//!   reset, so the client reads its last answer ([`linger`]);
//! - memory the allocator kept for a flood's connections is handed back to
//!   the system once the flood is over ([`trim`]).
//!
//! Open, evicted and refused connections are counted per listener
//! ([`DoorCounts`]).

mod linger;
mod places;
mod trim;

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service;

use super::MAX_HEAD_BYTES;
use crate::metrics::DoorCounts;
use linger::{Closing, Lingering};
use places::{InFlight, Places};

/// One listener's limits.
#[derive(Debug, Clone)]
pub struct Door {
    /// What the listener is, for logs and the metrics' `listener` label (`api`, `metrics`).
    pub name: &'static str,
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// Connections upgraded from this listener (WebSockets), which count
    /// towards `max_connections` while they stay open.
    pub upgraded: Option<TaskTracker>,
    pub counts: DoorCounts,
}

/// The default cap on one listener's connections: half of the process's
/// open-files limit (the rest is for the other listener, the database pools
/// and files), at most 16,384 and at least 64.
pub fn default_max_connections() -> usize {
    (open_files_limit() / 2).clamp(64, 16_384)
}

/// The soft `RLIMIT_NOFILE`, first raised to the hard limit (at most
/// 1,048,576) as Go's runtime does: the soft default of 1,024 is a relic of
/// `select()`, which nothing here uses. 1,024 when it cannot be read.
pub fn open_files_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit and setrlimit read and write the struct they are given and nothing else.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return 1024;
            }
            let wanted = limit.rlim_max.min(1 << 20);
            if wanted > limit.rlim_cur {
                let raised = libc::rlimit { rlim_cur: wanted, rlim_max: limit.rlim_max };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit.rlim_cur = wanted;
                }
            }
        }
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    })
}

/// What a refused connection reads before it is closed.
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
Retry-After: 1\r\nConnection: close\r\nContent-Length: 49\r\n\r\ntoo many open connections to this port; retry soon";

/// Serves `router` over HTTP/1.1 on `listener` under `door`'s limits until
/// `shutdown`, then lets in-flight requests finish (upgraded WebSockets are
/// stopped by their owner).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    door: Door,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(door.header_read_timeout)
        .max_header_size(MAX_HEAD_BYTES)
        .max_buf_size(MAX_HEAD_BYTES);
    let stop = CancellationToken::new();
    let connections = TaskTracker::new();
    let places = Places::new(door.max_connections, door.counts.clone());
    let trimmer = tokio::spawn(trim::trim_after_floods(places.clone(), door.max_connections, stop.clone()));
    let closing = Closing::default();
    let (mut refused, mut accept_failures): (u64, u64) = (0, 0);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: back off rather than spin,
                    // and log the 1st, 2nd, 4th, 8th... failure, not every one.
                    accept_failures += 1;
                    if accept_failures.is_power_of_two() {
                        tracing::warn!(listener = door.name, error = %err, failures = accept_failures, "accept failed");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let upgraded = door.upgraded.as_ref().map_or(0, TaskTracker::len);
        if places.open() + upgraded >= door.max_connections && !places.evict_one() {
            door.counts.refused.inc();
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(
                    listener = door.name,
                    cap = door.max_connections,
                    refused,
                    "connection refused: every allowed connection has a request in flight or is a WebSocket"
                );
            }
            refuse(stream, &closing);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let place = places.take(&stop);
        // Handlers learn the client's address (`ConnectInfo`, as with
        // `axum::serve`); the connection serves (is not evicted) from a
        // request's headers until its response is sent.
        let (router, serving, of) = (router.clone(), place.clone(), places.clone());
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            let in_flight = InFlight::begin(&serving, &of);
            request.extensions_mut().insert(ConnectInfo(peer));
            // `Router` is always ready.
            let response = router.clone().call(request);
            async move {
                let Ok(response) = response.await;
                Ok::<_, Infallible>(if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                    in_flight.upgrade();
                    response
                } else {
                    in_flight.answer(response)
                })
            }
        });
        let io = TokioIo::new(Lingering::new(stream, closing.clone()));
        let conn = builder.serve_connection(io, service).with_upgrades();
        let places = places.clone();
        connections.spawn(async move {
            tokio::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                // Evicted, or the server stops: closed at once between
                // requests, after its response when a request is in flight.
                _ = place.close.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            places.release(&place);
            if let Err(err) = result {
                tracing::debug!(error = %err, "HTTP connection ended");
            }
        });
    }
    drop(listener);
    stop.cancel();
    let _ = trimmer.await;
    connections.close();
    connections.wait().await;
    Ok(())
}

/// A 503 written if the socket takes it at once (a fresh socket's buffer
/// does), then closed without a reset, so that the client reads it.
fn refuse(stream: TcpStream, closing: &Closing) {
    let _ = stream.try_write(REFUSED);
    closing.linger(stream);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_leaves_room_under_the_open_files_limit() {
        let limit = open_files_limit();
        let cap = default_max_connections();
        assert!((64..=16_384).contains(&cap), "{cap}");
        if limit >= 256 {
            // Room for the metrics listener's cap, the database pools and files.
            assert!(cap + 2 * crate::http::METRICS_MAX_CONNECTIONS <= limit, "cap {cap}, limit {limit}");
        }
    }
}
