//! The projector (SPEC §7): folds the event log into the read models after
//! commit, so that a write pays only for the write. Every `interval` it
//! folds, for each projection of `sql/repeatable/projections.sql`, the
//! events below the live-delivery watermark past the projection's mark, in
//! steps of about `step_events` (`ledger_project`: one transaction each,
//! the fold and the mark together), until it has caught up; then it
//! compacts the totals' delta rows (`ledger_compact`). The projections
//! catch up side by side, their steps taking turns on a pool of
//! [`FOLDERS`] connections of its own: folded one after another, the
//! first one chasing the head of a busy log held the others back for its
//! whole pass (lag p99 8 s while claim-and-finish ran at its full rate). Any number of
//! replicas run one: a replica skips a projection another is folding (its
//! mark's row lock), and each event is folded once.
//!
//! Reads do not wait for it: each adds the events past the mark itself
//! (`<table>_tail`), so a read is exact the moment a write commits; the
//! projector only keeps that tail short. Its lag and the events it folded
//! are in `/metrics` ([`status`]).

pub mod status;

use std::time::Duration;

use futures::future::try_join_all;
use prometheus_client::metrics::counter::Counter;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::db::stmt;

#[derive(Debug, Clone)]
pub struct ProjectorConfig {
    /// Time between passes (`WORK_LEDGER_PROJECT_INTERVAL`).
    pub interval: Duration,
    /// Events folded per step (per transaction), about: whole batches.
    pub step_events: u32,
    /// Time between compactions of the totals' delta rows.
    pub compact_every: Duration,
}

impl Default for ProjectorConfig {
    fn default() -> Self {
        Self { interval: Duration::from_millis(250), step_events: 2000, compact_every: Duration::from_secs(5) }
    }
}

/// Steps one pass takes per projection at most, so that a replica that
/// starts far behind still reports its passes (and stops promptly).
const MAX_STEPS_PER_PASS: usize = 100;

/// The connections of the projector's pool: steps of that many projections run at once.
pub const FOLDERS: u32 = 3;

pub struct Projector {
    db: DatabaseConnection,
    config: ProjectorConfig,
    folded: Counter,
    /// Completed passes, so tests can wait for one instead of sleeping.
    passes: watch::Sender<u64>,
}

impl Projector {
    pub fn new(db: DatabaseConnection, config: ProjectorConfig, folded: Counter) -> Self {
        Self { db, config, folded, passes: watch::channel(0).0 }
    }

    /// One pass: every projection folded up to the watermark (in steps);
    /// returns the events folded.
    pub async fn run_once(&self) -> Result<u64, DbErr> {
        // Every projection catches up at once, each step taking one of the
        // pool's FOLDERS connections in turn: a projection chasing the head
        // of a busy log holds none of the others back.
        let names = status::names(&self.db).await?;
        Ok(try_join_all(names.iter().map(|name| self.catch_up(name))).await?.into_iter().sum())
    }

    /// Projection `name` folded up to the watermark, in steps; returns the
    /// events folded.
    async fn catch_up(&self, name: &str) -> Result<u64, DbErr> {
        let mut folded = 0;
        for _ in 0..MAX_STEPS_PER_PASS {
            let step = self
                .db
                .query_one_raw(stmt(
                    "SELECT ledger_project($1, $2) AS folded",
                    [name.into(), i32::try_from(self.config.step_events).unwrap_or(i32::MAX).into()],
                ))
                .await?
                .map(|row| row.try_get::<Option<i64>>("", "folded"))
                .transpose()?
                .flatten();
            // None: another replica holds it; 0: caught up.
            let Some(n) = step.filter(|n| *n > 0) else { break };
            folded += n as u64;
            self.folded.inc_by(n as u64);
        }
        Ok(folded)
    }

    /// Compacts the totals' delta rows (`ledger_compact`): one row per
    /// group again. Returns the rows rewritten.
    pub async fn compact(&self) -> Result<u64, DbErr> {
        crate::db::writes::compact_totals(&self.db).await
    }

    /// Passes every `interval` until `stop`, compacting every
    /// `compact_every`. A failed pass is logged and retried at the next
    /// tick: the database may be restarting.
    pub async fn run(&self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut compacted = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(err) = self.run_once().await {
                tracing::warn!(error = %err, "projector pass failed; retrying at the next interval");
            } else if compacted.elapsed() >= self.config.compact_every {
                compacted = tokio::time::Instant::now();
                if let Err(err) = self.compact().await {
                    tracing::warn!(error = %err, "compacting the totals failed; retrying later");
                }
            }
            self.passes.send_modify(|n| *n += 1);
        }
    }

    /// Completed passes of the background task.
    pub fn passes(&self) -> watch::Receiver<u64> {
        self.passes.subscribe()
    }
}
