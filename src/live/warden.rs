//! The reader warden (SPEC §8): every `interval`, ends the sessions of
//! reader logins (`work-ledger reader create`) whose transaction has been
//! open longer than `max_transaction`. Their role settings say 60 s too, but
//! a login can change its own settings (`SET statement_timeout = 0`); this
//! task is what keeps the promise. A reader that LISTENs and then sits in a
//! transaction would otherwise pin PostgreSQL's notification queue, which
//! is cluster-wide: once it is full, every NOTIFY fails, i.e. every write.
//!
//! The SQL is `end_overlong_reader_sessions` (migration 0013), which runs as
//! the NOLOGIN role `work_ledger_warden`: a member of every reader login,
//! so it may see and end their sessions (in any database of the cluster)
//! and nobody else's. Every replica runs one; ending a session twice is
//! harmless.

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
}

impl Default for WardenConfig {
    fn default() -> Self {
        Self { interval: Duration::from_secs(5), max_transaction: reader_logins::MAX_TRANSACTION }
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

    /// One pass: ends every overlong reader transaction; returns how many.
    pub async fn run_once(&self) -> Result<u64, DbErr> {
        let rows = self
            .db
            .query_all_raw(stmt(
                "SELECT pid, role_name, extract(epoch FROM open_for)::float8 AS open_for
                   FROM end_overlong_reader_sessions(make_interval(secs => $1))",
                [self.config.max_transaction.as_secs_f64().into()],
            ))
            .await?;
        for row in &rows {
            let (pid, role, open_for): (i32, String, f64) =
                (row.try_get("", "pid")?, row.try_get("", "role_name")?, row.try_get("", "open_for")?);
            tracing::warn!(
                pid,
                role,
                open_for_seconds = open_for,
                limit_seconds = self.config.max_transaction.as_secs(),
                "ended a reader session whose transaction outlived the limit"
            );
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
