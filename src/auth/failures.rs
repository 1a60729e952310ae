//! Refused tokens, counted and logged at a bounded rate.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use super::AuthError;

/// Failed authentications since the process started.
static FAILURES: AtomicU64 = AtomicU64::new(0);
static FAILURE_LOG: LazyLock<Mutex<RateLimit>> = LazyLock::new(|| Mutex::new(RateLimit::new(Instant::now())));

/// Counts a refused token and logs it with the client's address (`via`: the
/// transport), at most [`RateLimit::BURST`] lines a minute: a client trying
/// tokens cannot flood the log. The lines left out are counted in the next.
pub fn log_failure(client: Option<SocketAddr>, via: &'static str, err: &AuthError) {
    let AuthError::Unauthenticated(reason) = err else { return };
    let total = FAILURES.fetch_add(1, Ordering::Relaxed) + 1;
    let admitted = FAILURE_LOG.lock().unwrap_or_else(|e| e.into_inner()).admit(Instant::now());
    if let Some(left_out) = admitted {
        let client = client.map_or_else(|| "unknown".to_owned(), |a| a.to_string());
        tracing::warn!(%client, via, %reason, total, left_out, "authentication failed");
    }
}

/// Failed authentications counted by [`log_failure`] so far.
pub fn failed_authentications() -> u64 {
    FAILURES.load(Ordering::Relaxed)
}

/// At most `BURST` admissions per `WINDOW`.
#[derive(Debug)]
struct RateLimit {
    window_start: Instant,
    admitted: u32,
    left_out: u64,
}

impl RateLimit {
    const BURST: u32 = 10;
    const WINDOW: Duration = Duration::from_secs(60);

    fn new(now: Instant) -> Self {
        Self { window_start: now, admitted: 0, left_out: 0 }
    }

    /// `Some(events left out before this one)` when this one may be logged.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if now.duration_since(self.window_start) >= Self::WINDOW {
            self.window_start = now;
            self.admitted = 0;
        }
        if self.admitted < Self::BURST {
            self.admitted += 1;
            Some(std::mem::take(&mut self.left_out))
        } else {
            self.left_out += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_logging_is_bounded_and_counts_what_it_leaves_out() {
        let start = Instant::now();
        let mut limit = RateLimit::new(start);
        let logged = (0..1000).filter(|_| limit.admit(start + Duration::from_secs(1)).is_some()).count();
        assert_eq!(logged, RateLimit::BURST as usize);
        // The next window's first line says how many were left out.
        assert_eq!(limit.admit(start + RateLimit::WINDOW + Duration::from_secs(1)), Some(990));
        assert_eq!(limit.admit(start + RateLimit::WINDOW + Duration::from_secs(2)), Some(0));
    }
}
