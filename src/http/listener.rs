//! One connection policy for every port the process opens (the API and the
//! metrics listener alike, SPEC §10):
//!
//! - a client gets `header_read_timeout` to send a request's headers (also
//!   between requests on a kept-alive connection), then the connection is
//!   closed: trickled or withheld headers cannot hold a socket;
//! - at most `max_connections` connections are open at once (WebSockets
//!   upgraded from this listener count too). At the cap, a new connection
//!   takes the place of the oldest one that has not sent a complete request
//!   yet (a flood of idle sockets evicts itself, while a health check or an
//!   agent's next request gets through); when every open connection has
//!   been served a request, the new one is refused at the door with a 503.
//!   Connections that have been served (an agent's kept-alive connection, a
//!   request in flight) are never evicted;
//! - memory the allocator kept for a flood's connections is handed back to
//!   the system once the flood is over (`malloc_trim` on glibc; its arenas
//!   otherwise keep the peak for good).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service;

/// One listener's limits.
#[derive(Debug, Clone)]
pub struct Door {
    /// What the listener is, for logs (`API`, `metrics`).
    pub name: &'static str,
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// Connections upgraded from this listener (WebSockets), which count
    /// towards `max_connections` while they stay open.
    pub upgraded: Option<TaskTracker>,
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

/// Where a connection stands, for eviction.
const FRESH: u8 = 0;
const SERVED: u8 = 1;
const EVICTED: u8 = 2;
const CLOSED: u8 = 3;

struct Slot {
    state: AtomicU8,
    evict: CancellationToken,
}

impl Slot {
    fn is_fresh(&self) -> bool {
        self.state.load(Ordering::Acquire) == FRESH
    }
}

/// The open connections of one listener, oldest first.
struct Open {
    count: AtomicUsize,
    /// The most connections open at once since the allocator was last
    /// trimmed (it keeps what they took until then).
    peak: AtomicUsize,
    /// Connections that may still be fresh, in the order they were accepted
    /// (served and closed ones are dropped lazily).
    fresh: Mutex<VecDeque<Arc<Slot>>>,
}

impl Open {
    /// Evicts the oldest connection that has not sent a request yet; false
    /// when there is none.
    fn evict_oldest_fresh(&self) -> bool {
        let mut fresh = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(slot) = fresh.pop_front() {
            if slot.state.compare_exchange(FRESH, EVICTED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                slot.evict.cancel();
                return true;
            }
        }
        false
    }

    fn push(&self, slot: Arc<Slot>, cap: usize) {
        let mut fresh = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        while fresh.front().is_some_and(|s| !s.is_fresh()) {
            fresh.pop_front();
        }
        if fresh.len() > 2 * cap {
            fresh.retain(|s| s.is_fresh());
        }
        fresh.push_back(slot);
    }
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
    builder.timer(TokioTimer::new()).header_read_timeout(door.header_read_timeout);
    let stop = CancellationToken::new();
    let connections = TaskTracker::new();
    let open = Arc::new(Open { count: AtomicUsize::new(0), peak: AtomicUsize::new(0), fresh: Mutex::default() });
    let trimmer = tokio::spawn(trim_after_floods(open.clone(), door.max_connections, stop.clone()));
    let (mut refused, mut accept_failures): (u64, u64) = (0, 0);
    let lingering = Arc::new(AtomicUsize::new(0));
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
        if open.count.load(Ordering::Acquire) + upgraded >= door.max_connections && !open.evict_oldest_fresh() {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(
                    listener = door.name,
                    cap = door.max_connections,
                    refused,
                    "connection refused: every allowed connection is open and in use"
                );
            }
            refuse(stream, &lingering);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let slot = Arc::new(Slot { state: AtomicU8::new(FRESH), evict: CancellationToken::new() });
        open.push(slot.clone(), door.max_connections);
        let now = open.count.fetch_add(1, Ordering::AcqRel) + 1;
        open.peak.fetch_max(now, Ordering::AcqRel);
        // Handlers learn the client's address (`ConnectInfo`, as with
        // `axum::serve`); the connection is served (no longer evictable)
        // once a request's headers have arrived.
        let (router, served) = (router.clone(), slot.clone());
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            let _ = served.state.compare_exchange(FRESH, SERVED, Ordering::AcqRel, Ordering::Acquire);
            request.extensions_mut().insert(ConnectInfo(peer));
            // `Router` is always ready.
            router.clone().call(request)
        });
        let conn = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
        let (stopping, open) = (stop.clone(), open.clone());
        connections.spawn(async move {
            tokio::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                // Not a request in flight: nothing to finish.
                _ = slot.evict.cancelled() => Ok(()),
                _ = stopping.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            slot.state.store(CLOSED, Ordering::Release);
            open.count.fetch_sub(1, Ordering::AcqRel);
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

/// Refused connections being closed at once, at most.
const LINGERING: usize = 64;

/// A 503 written if the socket takes it at once (a fresh socket's buffer
/// does), then closed. What the client already sent is read and dropped
/// first (for at most a second, and for at most [`LINGERING`] connections
/// at a time): closing a socket with unread data resets it, and the client
/// would lose the 503.
fn refuse(stream: TcpStream, lingering: &Arc<AtomicUsize>) {
    let _ = stream.try_write(REFUSED);
    if lingering.fetch_add(1, Ordering::AcqRel) >= LINGERING {
        lingering.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let lingering = lingering.clone();
    tokio::spawn(async move {
        let mut stream = stream;
        let drain = async {
            stream.shutdown().await?;
            let mut sink = [0u8; 1024];
            while stream.read(&mut sink).await? > 0 {}
            std::io::Result::Ok(())
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
        lingering.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Hands the allocator's free memory back to the system a few seconds
/// after the open connections fell well below their peak (glibc keeps it
/// otherwise: after a flood of 20,000 idle sockets the process stayed at
/// 600 MB).
///
/// The peak is the most connections open since the last trim, not since the
/// last tick: a flood whose clients go away slowly ebbs over several ticks,
/// and no single tick would see it fall far.
async fn trim_after_floods(open: Arc<Open>, cap: usize, stop: CancellationToken) {
    const TICK: Duration = Duration::from_secs(5);
    // Below this many connections of difference, what there is to give back
    // is not worth a trim: 35-60 KB each once a flood is over, so at most a
    // few MB are kept.
    let worth = (cap / 8).clamp(16, 64);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(TICK) => {}
        }
        let now = open.count.load(Ordering::Acquire);
        let fell =
            open.peak.fetch_update(Ordering::AcqRel, Ordering::Acquire, |peak| (peak >= now + worth).then_some(now));
        if fell.is_ok() {
            let _ = tokio::task::spawn_blocking(release_free_memory).await;
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    let released = unsafe { libc::malloc_trim(0) };
    tracing::debug!(released, "returned free memory to the system after a connection flood");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}

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
