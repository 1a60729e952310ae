//! The stall sweeper (SPEC §6): every `interval`, one `stalled` event per
//! CLAIMED/IN_PROGRESS attempt whose lease expired. The unit stays as it is,
//! reclaimable by `claimNext`; the event is what `unitStalled` delivers.
//! Each pass also folds the unit totals' deltas (`ledger_compact_totals`).
//!
//! It runs as the pool's own role over every fleet in one statement rather
//! than once per fleet under row-level security: the sweep is system work
//! with no principal, one statement per pass is cheaper than one per fleet
//! (and needs no list of fleets), each event takes its fleet from its unit
//! row (the (fleet, unit_id) foreign key refuses any other), and it writes
//! only: subscribers still read every event through `db::in_fleet`, so what
//! each of them sees stays within its fleet.
//!
//! Every server process runs one; the database reports each attempt once
//! (see `db::writes::report_stalls`), so replicas need no coordination.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use sea_orm::{DatabaseConnection, DbErr};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::db::writes;

#[derive(Debug, Clone)]
pub struct SweeperConfig {
    /// Time between passes (`WORK_LEDGER_SWEEP_INTERVAL`).
    pub interval: Duration,
    /// Attempts reported per statement; a pass repeats until one is not full.
    pub batch_size: u32,
}

impl Default for SweeperConfig {
    fn default() -> Self {
        Self { interval: Duration::from_secs(5), batch_size: 500 }
    }
}

pub struct Sweeper {
    db: DatabaseConnection,
    config: SweeperConfig,
    /// Completed passes, so tests can wait for one instead of sleeping.
    passes: watch::Sender<u64>,
    /// The `stalls` metric.
    stalls: Counter,
}

impl Sweeper {
    pub fn new(db: DatabaseConnection, config: SweeperConfig, stalls: Counter) -> Self {
        Self { db, config, passes: watch::channel(0).0, stalls }
    }

    /// One pass: reports every expired attempt not reported yet, then folds
    /// the deltas of the unit totals (migration 0018) so that the reads of
    /// them stay as cheap as the number of groups; returns how many stall
    /// events this pass appended.
    pub async fn run_once(&self) -> Result<u64, DbErr> {
        let mut reported = 0;
        loop {
            let (found, reported_now) = writes::report_stalls(&self.db, self.config.batch_size).await?;
            reported += reported_now;
            self.stalls.inc_by(reported_now);
            if found < u64::from(self.config.batch_size) {
                break;
            }
        }
        writes::compact_totals(&self.db).await?;
        Ok(reported)
    }

    /// Passes every `interval` until `stop`. A failed pass is logged and
    /// retried at the next tick: the database may be restarting.
    pub async fn run(&self, stop: CancellationToken) {
        let start = tokio::time::Instant::now() + self.config.interval;
        let mut tick = tokio::time::interval_at(start, self.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.run_once().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(stalled = n, "sweeper reported expired leases"),
                Err(err) => {
                    if crate::db::is_unavailable(&err) {
                        crate::db::primary::suspect();
                    }
                    tracing::warn!(error = %err, "sweep failed; retrying at the next interval")
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
