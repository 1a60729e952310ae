//! The reader warden (SPEC §8): every `interval`, ends the sessions of
//! reader logins (`work-ledger reader create`), in any database of the
//! cluster, that hold what every write needs:
//!
//! - a transaction open longer than `max_transaction`: their role settings
//!   say 60 s too, but a login can change its own settings (`SET
//!   statement_timeout = 0`). A reader that LISTENs and then sits in a
//!   transaction would otherwise pin PostgreSQL's notification queue, which
//!   is cluster-wide: once it is full, every NOTIFY fails, i.e. every write;
//! - more than `max_locks` locks: the lock table is the cluster's, and once
//!   it is full every write fails;
//! - idle sessions of one login beyond its `max_idle` most recently active:
//!   connection slots are the cluster's too (each login also has a
//!   connection limit, `ledger_admit_reader`).
//!
//! The SQL is `ledger_warden_pass` (`sql/repeatable/warden.sql`), which runs
//! as the NOLOGIN role `work_ledger_warden`: a member of every reader login,
//! so it may see and end their sessions and nobody else's. Every replica
//! runs one; ending a session twice is harmless.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::db::{reader_logins, stmt};

#[derive(Debug, Clone)]
pub struct WardenConfig {
    /// Time between passes (`WORK_LEDGER_READER_CHECK_INTERVAL`).
    pub interval: Duration,
    /// The longest transaction a reader login may hold (what `reader create`
    /// promises: [`reader_logins::MAX_TRANSACTION`]).
    pub max_transaction: Duration,
    /// The most locks one reader session may hold or await: a dashboard's
    /// query of the widest view takes about 40 (tests/api/shared_pools.rs),
    /// and a login's four sessions can then take a few hundred of the
    /// cluster's lock table (64 per connection slot by default).
    pub max_locks: u32,
    /// The idle sessions one reader login keeps (its most recently active).
    pub max_idle: u32,
}

impl Default for WardenConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
            max_transaction: reader_logins::MAX_TRANSACTION,
            max_locks: 128,
            max_idle: 2,
        }
    }
}

pub struct Warden {
    db: DatabaseConnection,
    config: WardenConfig,
    /// Completed passes, so tests can wait for one instead of sleeping.
    passes: watch::Sender<u64>,
}

impl Warden {
    pub fn new(db: DatabaseConnection, config: WardenConfig) -> Self {
        Self { db, config, passes: watch::channel(0).0 }
    }

    /// One pass: ends every reader session past a limit; returns how many.
    pub async fn run_once(&self) -> Result<u64, DbErr> {
        let limits = &self.config;
        let rows = self
            .db
            .query_all_raw(stmt(
                "SELECT pid, role_name, why, detail FROM ledger_warden_pass(make_interval(secs => $1), $2, $3)",
                [
                    limits.max_transaction.as_secs_f64().into(),
                    i32::try_from(limits.max_locks).unwrap_or(i32::MAX).into(),
                    i32::try_from(limits.max_idle).unwrap_or(i32::MAX).into(),
                ],
            ))
            .await?;
        for row in &rows {
            let (pid, role, why, detail): (i32, String, String, String) = (
                row.try_get("", "pid")?,
                row.try_get("", "role_name")?,
                row.try_get("", "why")?,
                row.try_get("", "detail")?,
            );
            // Idle sessions beyond the few a login keeps are routine; the rest is a login misbehaving.
            if why == "idle" {
                tracing::info!(pid, role, detail, "ended an idle reader session beyond its login's few");
            } else {
                tracing::warn!(pid, role, why, detail, "ended a reader session past the warden's limit");
            }
        }
        Ok(rows.len() as u64)
    }

    /// Passes every `interval` until `stop`. A failed pass is logged and
    /// retried at the next tick: the database may be restarting.
    pub async fn run(&self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(err) = self.run_once().await {
                tracing::warn!(error = %err, "reader warden pass failed; retrying at the next interval");
            }
            self.passes.send_modify(|n| *n += 1);
        }
    }

    /// Completed passes of the background task.
    pub fn passes(&self) -> watch::Receiver<u64> {
        self.passes.subscribe()
    }
}
