//! A followed workflow: a task of its own that reads each of its open runs'
//! history as Temporal writes it (a long poll per run, no re-reading) and
//! projects it, run after run, until the last run closes. What followers
//! share: the ledger, the read-only client, the fleets' tokens, the metrics
//! and a bound on the writes they make at once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, Semaphore};

use super::client::TemporalReads;
use super::metrics::TemporalMetrics;
use super::run;
use crate::auth::{self, Permission, Principal};
use crate::db;
use crate::ledger::Ledger;

/// Projection writes in flight at once across every followed workflow, so
/// that a thousand workflows moving together queue here and not on the
/// pool the service's requests use.
const WRITES_AT_ONCE: usize = 4;

/// What every follower shares.
pub struct Context {
    pub ledger: Ledger,
    pub reads: TemporalReads,
    pub tokens: Tokens,
    pub metrics: TemporalMetrics,
    pub writers: Semaphore,
    /// The largest lag (seconds, as `f64` bits) of a batch projected since
    /// the pass last took it.
    lag: Arc<AtomicU64>,
}

impl Context {
    pub fn new(ledger: Ledger, reads: TemporalReads, tokens: Tokens, metrics: TemporalMetrics) -> Self {
        let lag = Arc::new(AtomicU64::new(0));
        Self { ledger, reads, tokens, metrics, writers: Semaphore::new(WRITES_AT_ONCE), lag }
    }

    /// The projection's token for `fleet`.
    pub async fn who(&self, fleet: &str) -> Result<Principal, String> {
        self.tokens.get(&self.ledger, fleet).await
    }

    /// A batch of events was `seconds` behind Temporal when it was read.
    pub fn saw_lag(&self, seconds: f64) {
        self.lag.fetch_max(seconds.to_bits(), Ordering::Relaxed);
    }

    /// The largest lag seen since the last call (0: nothing projected).
    pub fn take_lag(&self) -> f64 {
        f64::from_bits(self.lag.swap(0, Ordering::Relaxed))
    }
}

/// A workflow of a fleet, as the pass hands it to its follower.
pub struct Workflow {
    pub fleet: String,
    pub namespace: String,
    pub workflow_id: String,
    /// Its runs not closed yet, in the order they started, each with the
    /// last event projected before.
    pub open: Vec<(String, i64)>,
    /// Every run listed, closed ones too (a run that a closing event hands
    /// the workflow to is followed unless it is one of these).
    pub known: HashSet<String>,
}

/// Follows `w`'s open runs one after another, then the runs their closing
/// events hand the workflow to, until one closes without a successor.
pub async fn follow(ctx: Arc<Context>, mut w: Workflow) -> Result<(), String> {
    let mut queue: VecDeque<(String, i64)> = w.open.drain(..).collect();
    while let Some((run_id, after)) = queue.pop_front() {
        let target = run::Target {
            fleet: &w.fleet,
            namespace: &w.namespace,
            workflow_id: &w.workflow_id,
            run_id: &run_id,
            after,
        };
        if let Some(next) = run::follow(&ctx, &target).await?
            && w.known.insert(next.clone())
        {
            queue.push_back((next, 0));
        }
    }
    Ok(())
}

/// The projection's tokens, one per fleet (`units:project`), minted for a
/// day on first use and again after half of that; every one this process
/// minted is revoked when it stops (not before: a follower may be writing
/// with the one replaced).
#[derive(Clone, Default)]
pub struct Tokens {
    current: Arc<Mutex<HashMap<String, (Principal, Instant)>>>,
    minted: Arc<Mutex<Vec<Principal>>>,
}

/// The name of the projection's tokens.
const TOKEN_NAME: &str = "temporal";
const TOKEN_LIFETIME: Duration = Duration::from_secs(86_400);
const TOKEN_RENEW_AFTER: Duration = Duration::from_secs(43_200);

impl Tokens {
    /// The projection's token for `fleet`.
    pub async fn get(&self, ledger: &Ledger, fleet: &str) -> Result<Principal, String> {
        let mut current = self.current.lock().await;
        if let Some((who, minted)) = current.get(fleet)
            && minted.elapsed() < TOKEN_RENEW_AFTER
        {
            return Ok(who.clone());
        }
        let permissions = vec![Permission::UnitsRegister, Permission::UnitsClaim, Permission::UnitsProject];
        let who = auth::mint(ledger.db(), fleet, TOKEN_NAME, permissions, TOKEN_LIFETIME)
            .await
            .map_err(|e| format!("cannot mint the projection's token for fleet {fleet}: {e}"))?;
        current.insert(fleet.to_owned(), (who.clone(), Instant::now()));
        self.minted.lock().await.push(who.clone());
        Ok(who)
    }

    /// Revokes every token this process minted.
    pub async fn revoke_all(&self, ledger: &Ledger) {
        for who in self.minted.lock().await.drain(..) {
            let _ = db::tokens::revoke(ledger.db(), who.token_id).await;
        }
        self.current.lock().await.clear();
    }
}
