//! The places under one listener's connection cap, and which connection
//! gives its place up when a newcomer arrives at the cap.
//!
//! A connection waits (for its first request, or between requests on a
//! kept-alive connection) or serves (from a request's headers until its
//! response is sent; an upgraded WebSocket serves until it closes). Only a
//! waiting connection is evicted, and HTTP/1.1 lets a server close a
//! connection between requests at any time. The order: a connection never
//! served first, the oldest first (a flood of idle sockets evicts itself
//! and leaves agents' kept-alive connections alone), then the served one
//! idle longest (clients that re-request on kept-alive connections cannot
//! hold every place).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use hyper::body::{Frame, SizeHint};
use tokio_util::sync::CancellationToken;

use crate::metrics::DoorCounts;

const WAITING: u8 = 0;
const SERVING: u8 = 1;
const EVICTED: u8 = 2;
const CLOSED: u8 = 3;

/// One open connection's place.
pub(super) struct Place {
    state: AtomicU8,
    /// How many times the connection began to wait (1: since it was
    /// accepted). A queue's entry for it is current while this is its number.
    waits: AtomicU64,
    /// Cancelled to close the connection gracefully: at once when it waits,
    /// after its response when it serves (evicted in a race with a request).
    pub(super) close: CancellationToken,
}

impl Place {
    fn is_current(&self, waits: u64) -> bool {
        self.waits.load(Ordering::Acquire) == waits && self.state.load(Ordering::Acquire) == WAITING
    }
}

/// Waiting connections as `(place, its waits)`, in the order they began to
/// wait; entries that are no longer current are dropped lazily.
type Queue = VecDeque<(Arc<Place>, u64)>;

#[derive(Default)]
struct Waiting {
    /// Connections not served yet.
    fresh: Queue,
    /// Served connections between requests.
    idle: Queue,
}

/// The open connections of one listener.
pub(super) struct Places {
    cap: usize,
    counts: DoorCounts,
    /// The most connections open at once since the allocator was last
    /// trimmed (it keeps what they took until then).
    pub(super) peak: AtomicUsize,
    waiting: Mutex<Waiting>,
}

impl Places {
    pub(super) fn new(cap: usize, counts: DoorCounts) -> Arc<Self> {
        Arc::new(Self { cap, counts, peak: AtomicUsize::new(0), waiting: Mutex::default() })
    }

    /// Connections open now.
    pub(super) fn open(&self) -> usize {
        usize::try_from(self.counts.open.get()).unwrap_or(0)
    }

    /// A place for a new connection, waiting for its first request; closed
    /// when `stop` is.
    pub(super) fn take(&self, stop: &CancellationToken) -> Arc<Place> {
        let place =
            Arc::new(Place { state: AtomicU8::new(WAITING), waits: AtomicU64::new(1), close: stop.child_token() });
        let now = usize::try_from(self.counts.open.inc() + 1).unwrap_or(0);
        self.peak.fetch_max(now, Ordering::AcqRel);
        let mut waiting = self.lock();
        push(&mut waiting.fresh, place.clone(), 1, self.cap);
        place
    }

    /// The connection of `place` ended.
    pub(super) fn release(&self, place: &Place) {
        place.state.store(CLOSED, Ordering::Release);
        self.counts.open.dec();
    }

    /// Closes the connection that has waited longest (one never served
    /// first) to make room; false when every connection serves.
    pub(super) fn evict_one(&self) -> bool {
        let mut waiting = self.lock();
        let Waiting { fresh, idle } = &mut *waiting;
        for queue in [fresh, idle] {
            while let Some((place, waits)) = queue.pop_front() {
                let evicted = place.waits.load(Ordering::Acquire) == waits
                    && place.state.compare_exchange(WAITING, EVICTED, Ordering::AcqRel, Ordering::Acquire).is_ok();
                if evicted {
                    place.close.cancel();
                    self.counts.evicted.inc();
                    return true;
                }
            }
        }
        false
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Appends to `queue`, first dropping what is no longer current at its
/// front, and everywhere once it holds twice the cap (so it stays within a
/// few times the open connections, at a cost spread over the pushes).
fn push(queue: &mut Queue, place: Arc<Place>, waits: u64, cap: usize) {
    while queue.front().is_some_and(|(p, w)| !p.is_current(*w)) {
        queue.pop_front();
    }
    if queue.len() > 2 * cap {
        queue.retain(|(p, w)| p.is_current(*w));
    }
    queue.push_back((place, waits));
}

/// A request being served: from its headers until its response is sent,
/// its connection is not evicted.
pub(super) struct InFlight {
    place: Arc<Place>,
    places: Arc<Places>,
    /// Unset for an upgrade: the connection serves until it closes.
    waits_after: bool,
}

impl InFlight {
    /// A request's headers arrived on the connection of `place`. An evicted
    /// connection still serves it, and closes after its response.
    pub(super) fn begin(place: &Arc<Place>, places: &Arc<Places>) -> Self {
        let _ = place.state.compare_exchange(WAITING, SERVING, Ordering::AcqRel, Ordering::Acquire);
        Self { place: place.clone(), places: places.clone(), waits_after: true }
    }

    /// The response switches protocols (a WebSocket): the connection is
    /// never evicted, and counts as a WebSocket once the upgrade is done.
    pub(super) fn upgrade(mut self) {
        self.waits_after = false;
    }

    /// The response, which puts its connection back to waiting once sent.
    pub(super) fn answer(self, response: axum::response::Response) -> axum::response::Response {
        response.map(|body| Body::new(Answer { body, _in_flight: self }))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let (place, places) = (&self.place, &self.places);
        if !self.waits_after {
            return;
        }
        // Numbered before it waits: an older entry never evicts it.
        let waits = place.waits.fetch_add(1, Ordering::AcqRel) + 1;
        if place.state.compare_exchange(SERVING, WAITING, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        let mut waiting = places.lock();
        push(&mut waiting.idle, place.clone(), waits, places.cap);
    }
}

/// A response body; hyper drops it once it is sent (or the connection ends).
struct Answer {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
