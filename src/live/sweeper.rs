//! The stall sweeper (SPEC §6): every `interval`, one `stalled` event per
//! CLAIMED/IN_PROGRESS attempt whose lease expired. The unit stays as it is,
//! reclaimable by `claimNext`; the event is what `unitStalled` delivers.
//!
//! It runs as the pool's own role over every fleet rather than once per
//! fleet under row-level security: the sweep is system work with no
//! principal, a statement over every fleet is cheaper than one per fleet
//! (and needs no list of fleets), each event takes its fleet from its unit
//! row (the (fleet, unit_id) foreign key refuses any other), and it writes
//! only: subscribers still read every event through `db::in_fleet`, so what
//! each of them sees stays within its fleet.
//!
//! Every server process runs one; the database reports each attempt once
//! (see `db::writes::report_stalls`), so replicas need no coordination.
//!
//! A pass reads what is due once (`ledger_stalls_due`: the walk over every
//! expired lease, reported ones too, is the costly part), then reports it by
//! unit (`ledger_report_stalls`). A background pass spreads the reports over
//! `spread`: statements of about `due / (spread / STEP)` units (at least
//! [`SPREAD_MIN_BATCH`], at most `batch_size`), evenly apart; a backlog over
//! [`DUE_PER_READ`] is read and spread one such read at a time. Every stall
//! goes to its fleet's subscribers: 250 in one transaction became about
//! 8,500 WebSocket frames per process at once, and every delivery queued
//! behind them (docs/BENCHMARKS.md, round 3 sessions 24 and 25: the steady
//! p99 at the goal size halved). A few due go out at once.

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
    /// Units reported per statement at most.
    pub batch_size: u32,
    /// How long a background pass may take to report what it found
    /// (`WORK_LEDGER_SWEEP_SPREAD`); at most 80% of `interval`. Up to
    /// [`STEP`] (or zero) reports everything at once.
    pub spread: Duration,
}

impl Default for SweeperConfig {
    fn default() -> Self {
        Self { interval: Duration::from_secs(5), batch_size: 500, spread: Duration::from_secs(4) }
    }
}

/// Units a pass reads as due at a time (it reads again while one is full).
const DUE_PER_READ: u32 = 20_000;
/// Statements of a spread pass are at least this far apart.
const STEP: Duration = Duration::from_millis(50);
/// A spread pass reports at least this many units per statement: so many
/// go to subscribers at once without a burst.
const SPREAD_MIN_BATCH: u64 = 8;

impl SweeperConfig {
    /// The spread, within 80% of the interval.
    fn spread(&self) -> Duration {
        match self.spread.min(self.interval.mul_f64(0.8)) {
            short if short <= STEP => Duration::ZERO,
            spread => spread,
        }
    }
}

/// How a pass with `due` units to report takes them: units per statement
/// and the pause between two statements.
fn pace(due: u64, batch_size: u32, spread: Duration) -> (u64, Duration) {
    let most = u64::from(batch_size).max(1);
    let slots = (spread.as_millis() / STEP.as_millis()).max(1) as u64;
    let batch = due.div_ceil(slots).max(SPREAD_MIN_BATCH).min(most);
    let statements = due.div_ceil(batch).max(1);
    let pause = if statements > 1 { spread / u32::try_from(statements).unwrap_or(u32::MAX) } else { Duration::ZERO };
    (batch, pause)
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

    /// One pass at once: reports every expired attempt not reported yet;
    /// returns how many stall events this pass appended.
    pub async fn run_once(&self) -> Result<u64, DbErr> {
        self.pass(Duration::ZERO, &CancellationToken::new()).await
    }

    /// A pass whose reports are spread over `spread` (see the module), cut
    /// short between two statements by `stop`. It reads what is due once
    /// ([`DUE_PER_READ`] at a time), then reports it by unit.
    async fn pass(&self, spread: Duration, stop: &CancellationToken) -> Result<u64, DbErr> {
        let mut reported = 0;
        loop {
            let due = writes::stalls_due(&self.db, DUE_PER_READ).await?;
            let (batch, pause) = if spread.is_zero() {
                (u64::from(self.config.batch_size).max(1), Duration::ZERO)
            } else {
                pace(due.len() as u64, self.config.batch_size, spread)
            };
            let before = reported;
            for (i, units) in due.chunks(usize::try_from(batch).unwrap_or(usize::MAX)).enumerate() {
                if i > 0 {
                    tokio::select! {
                        _ = stop.cancelled() => return Ok(reported),
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
                let now = writes::report_stalls(&self.db, units).await?;
                reported += now;
                self.stalls.inc_by(now);
            }
            // A full read is followed by another, unless nothing of it
            // could be reported (writes hold those units right now).
            if due.len() < DUE_PER_READ as usize || reported == before {
                return Ok(reported);
            }
        }
    }

    /// Passes every `interval`, each spread, until `stop`. A failed pass is logged and
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
            match self.pass(self.config.spread(), &stop).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_takes_its_due_in_even_statements_over_the_spread() {
        let spread = Duration::from_secs(4);
        // A few go out at once.
        assert_eq!(pace(5, 500, spread), (8, Duration::ZERO));
        assert_eq!(pace(8, 500, spread), (8, Duration::ZERO));
        // 250 (the bench's sweep at 250 events/s): 8 a statement, 32 of them 125 ms apart.
        assert_eq!(pace(250, 500, spread), (8, Duration::from_millis(125)));
        // 5,000 (a mass expiry): one statement per 50 ms step.
        assert_eq!(pace(5000, 500, spread), (63, Duration::from_millis(50)));
        // A full read: 250 a statement, one per 50 ms step.
        assert_eq!(pace(u64::from(DUE_PER_READ), 500, spread), (250, Duration::from_millis(50)));
        // More than the batch allows per step: full batches, closer together.
        assert_eq!(pace(u64::from(DUE_PER_READ), 100, spread), (100, Duration::from_millis(20)));
        // A batch under the minimum is the batch.
        assert_eq!(pace(40, 4, spread), (4, Duration::from_millis(400)));
    }

    #[test]
    fn the_spread_stays_within_the_interval_and_a_short_one_is_none() {
        let config = |interval: u64, spread: u64| SweeperConfig {
            interval: Duration::from_millis(interval),
            spread: Duration::from_millis(spread),
            ..SweeperConfig::default()
        };
        assert_eq!(config(5000, 4000).spread(), Duration::from_secs(4));
        assert_eq!(config(1000, 4000).spread(), Duration::from_millis(800));
        assert_eq!(config(50, 4000).spread(), Duration::ZERO);
        assert_eq!(config(5000, 20).spread(), Duration::ZERO);
    }
}
