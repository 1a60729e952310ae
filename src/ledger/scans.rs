//! Fleet-wide reads per token (issue 23): each scans the caller's whole
//! fleet, so one token runs at most [`MAX_PER_TOKEN`] of them at once and
//! the others wait their turn, without a connection. A reader that sends
//! its worst request many times over then queues behind itself instead of
//! taking the pool and the cores from every fleet's claims. One: a scan of
//! a 200,000-unit fleet keeps a core busy for 0.1 to 0.3 s, and the
//! machines this runs on have few (docs/BENCHMARKS.md, issue 23).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use uuid::Uuid;

use super::LedgerError;

/// Fleet-wide reads one token runs at once.
pub const MAX_PER_TOKEN: usize = 1;
/// How long a read waits for its turn before it is refused (UNAVAILABLE).
pub const WAIT: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct ScanGate {
    tokens: Mutex<HashMap<Uuid, Arc<Semaphore>>>,
}

/// A turn: the read runs while it is held. Its permit is given back by
/// hand, so that a request dropped while waiting holds nothing.
pub struct Turn<'g> {
    gate: &'g ScanGate,
    token: Uuid,
    semaphore: Arc<Semaphore>,
    acquired: bool,
}

impl ScanGate {
    /// Whether `token` has a turn free now.
    pub fn is_free(&self, token: Uuid) -> bool {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.get(&token).is_none_or(|semaphore| semaphore.available_permits() > 0)
    }

    /// Waits (at most [`WAIT`]) for one of the token's turns.
    pub async fn enter(&self, token: Uuid) -> Result<Turn<'_>, LedgerError> {
        let semaphore = {
            let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
            tokens.entry(token).or_insert_with(|| Arc::new(Semaphore::new(MAX_PER_TOKEN))).clone()
        };
        let mut turn = Turn { gate: self, token, semaphore, acquired: false };
        match tokio::time::timeout(WAIT, turn.semaphore.acquire()).await {
            Ok(Ok(permit)) => permit.forget(),
            _ => return Err(LedgerError::ReadsBusy { limit: MAX_PER_TOKEN }),
        }
        turn.acquired = true;
        Ok(turn)
    }
}

impl Drop for Turn<'_> {
    /// Gives the turn back, and forgets the token once nobody holds or
    /// waits for one of its turns (counted under the map's lock, which every
    /// new waiter takes to get the semaphore).
    fn drop(&mut self) {
        if self.acquired {
            self.semaphore.add_permits(1);
        }
        let mut tokens = self.gate.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::strong_count(&self.semaphore) == 2 {
            tokens.remove(&self.token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_token_runs_a_bounded_number_at_once_and_is_forgotten_after() {
        let gate = ScanGate::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let turns: Vec<_> = futures::future::join_all((0..MAX_PER_TOKEN).map(|_| gate.enter(a))).await;
        assert!(turns.iter().all(Result::is_ok));
        // Another token is not held back.
        assert!(gate.enter(b).await.is_ok());
        let third = tokio::time::timeout(Duration::from_millis(50), gate.enter(a)).await;
        assert!(third.is_err(), "one read more than the limit did not wait");
        drop(turns);
        assert!(gate.enter(a).await.is_ok());
        assert!(gate.tokens.lock().unwrap_or_else(|e| e.into_inner()).is_empty());
    }
}
