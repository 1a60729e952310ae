//! The check against the event log in the database, not against counters:
//! for every subscriber, the items its subscription must deliver are read
//! from `work_unit_events` in delivery order (its fleet's events; its
//! fleet's `blocked` events by question; its fleet's `stalled` events by
//! attempt), from the first one it received to the end of the run, and
//! compared with what arrived, by id.

use std::collections::HashMap;
use std::time::Instant;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use uuid::Uuid;
use work_ledger::db::stmt;

use super::client::{Kind, Receipt};
use super::support::AnyError;
use super::writer::Commits;

/// Times as seconds since the bench's start, from an `Instant` or from the
/// database's clock (one machine, one clock).
pub struct Clock {
    start: Instant,
    start_utc: DateTime<Utc>,
}

impl Clock {
    pub fn new() -> Self {
        Self { start: Instant::now(), start_utc: Utc::now() }
    }

    pub fn at(&self, t: Instant) -> f64 {
        match t.checked_duration_since(self.start) {
            Some(d) => d.as_secs_f64(),
            None => -(self.start - t).as_secs_f64(),
        }
    }

    fn at_utc(&self, t: DateTime<Utc>) -> f64 {
        (t - self.start_utc).num_microseconds().unwrap_or(0) as f64 / 1e6
    }
}

/// One item a subscription must deliver, and when it committed: as the
/// writer saw its commit return, or for a sweeper's `stalled` event its
/// `created_at` (the sweeper's transaction start: never later than its
/// commit, so its latency is if anything overstated).
pub struct Item {
    pub key: Uuid,
    pub committed: f64,
}

/// The fleets' items in delivery order, per subscription kind.
pub type Log = HashMap<(String, Kind), Vec<Item>>;

pub async fn read_log(db: &DatabaseConnection, clock: &Clock, commits: &Commits) -> Result<Log, AnyError> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT fleet, id, unit_id, event_type::text AS event_type, attempt_id,
                    detail->>'question_id' AS question_id, created_at
               FROM work_unit_events WHERE fleet LIKE 'fleet%' ORDER BY batch, tx_id, seq",
            [],
        ))
        .await?;
    let mut log = Log::new();
    for row in rows {
        let fleet: String = row.try_get("", "fleet")?;
        let unit: Uuid = row.try_get("", "unit_id")?;
        let event_type: String = row.try_get("", "event_type")?;
        let created_at: DateTime<Utc> = row.try_get("", "created_at")?;
        let committed = match commits.get(&(unit, event_type.clone())) {
            Some(at) => clock.at(*at),
            None => clock.at_utc(created_at),
        };
        let mut push = |kind, key| log.entry((fleet.clone(), kind)).or_default().push(Item { key, committed });
        push(Kind::Events, row.try_get("", "id")?);
        match event_type.as_str() {
            "blocked" => {
                let question: Option<String> = row.try_get("", "question_id")?;
                let question = question.and_then(|q| q.parse().ok()).ok_or("a blocked event without its question")?;
                push(Kind::Questions, question);
            }
            "stalled" => {
                let attempt: Option<Uuid> = row.try_get("", "attempt_id")?;
                push(Kind::Stalls, attempt.ok_or("a stalled event without its attempt")?);
            }
            _ => {}
        }
    }
    Ok(log)
}

/// The run's landmarks, in seconds on the [`Clock`].
pub struct Phases {
    pub steady: (f64, f64),
    /// The steady latencies are of items committed before this.
    pub measured_until: f64,
    pub cut: f64,
    /// A subscriber has caught up once every item it received later than
    /// this after its commit has arrived (the lag is back under it).
    pub lag: f64,
}

#[derive(Default)]
pub struct Verdict {
    pub expected: usize,
    pub missing: usize,
    /// An item received twice (for `ledgerEvents` at all, across reconnects
    /// too; for the other two within one connection).
    pub duplicated: usize,
    /// Items sent again after a reconnect by the snapshot of what is open
    /// (stalled) now: `blockingQuestionOpened` and `unitStalled` have no
    /// cursor and are at-least-once by contract (de-duplicate by id).
    pub resent: usize,
    /// Received, but not an item of the subscriber's fleet and kind.
    pub unknown: usize,
    /// Commit to client (ms) of the items committed in the steady phase up
    /// to `Phases::measured_until`.
    pub latencies: Vec<f64>,
    /// The same for every item committed in the steady phase.
    pub latencies_to_the_cut: Vec<f64>,
    /// Seconds from the cut until the subscriber caught up; None when it
    /// never did (an item is missing).
    pub catch_up: Option<f64>,
}

pub fn judge(kind: Kind, items: &[Item], receipts: &[Receipt], clock: &Clock, phases: &Phases) -> Verdict {
    let index: HashMap<Uuid, usize> = items.iter().enumerate().map(|(i, item)| (item.key, i)).collect();
    let mut first: HashMap<Uuid, f64> = HashMap::new();
    let mut counts: HashMap<(Uuid, u8), usize> = HashMap::new();
    let mut verdict = Verdict::default();
    for r in receipts {
        first.entry(r.key).or_insert_with(|| clock.at(r.at));
        *counts.entry((r.key, r.session)).or_default() += 1;
        if !index.contains_key(&r.key) {
            verdict.unknown += 1;
        }
    }
    let mut sessions: HashMap<Uuid, usize> = HashMap::new();
    for ((key, _), n) in &counts {
        *sessions.entry(*key).or_default() += 1;
        if kind != Kind::Events {
            verdict.duplicated += n - 1;
        }
    }
    for (_, n) in sessions {
        match kind {
            Kind::Events => {}
            _ => verdict.resent += n - 1,
        }
    }
    if kind == Kind::Events {
        let mut total: HashMap<Uuid, usize> = HashMap::new();
        for r in receipts {
            *total.entry(r.key).or_default() += 1;
        }
        verdict.duplicated = total.values().map(|n| n - 1).sum();
    }
    // Expected: from the first item received on (the subscription began
    // somewhere in the log); with nothing received, everything committed
    // since the steady phase began.
    let start = first
        .keys()
        .filter_map(|k| index.get(k))
        .min()
        .copied()
        .unwrap_or_else(|| items.iter().position(|i| i.committed >= phases.steady.0).unwrap_or(items.len()));
    let mut late_until = phases.cut;
    for item in &items[start..] {
        verdict.expected += 1;
        let Some(&at) = first.get(&item.key) else {
            verdict.missing += 1;
            continue;
        };
        let latency = (at - item.committed).max(0.0);
        if (phases.steady.0..phases.steady.1).contains(&item.committed) {
            verdict.latencies_to_the_cut.push(latency * 1000.0);
            if item.committed < phases.measured_until {
                verdict.latencies.push(latency * 1000.0);
            }
        }
        if at >= phases.cut && latency > phases.lag {
            late_until = late_until.max(at);
        }
    }
    verdict.catch_up = (verdict.missing == 0).then_some(late_until - phases.cut);
    verdict
}

pub fn dump_header(out: &mut impl std::io::Write) -> std::io::Result<()> {
    writeln!(out, "subscriber,fleet,kind,replica,item,committed_s,arrived_s")
}

/// One subscriber's items that arrived, each with its commit and its first
/// arrival on the [`Clock`] (`--dump`).
pub fn dump(
    out: &mut impl std::io::Write,
    (subscriber, fleet, kind, replica): (usize, usize, Kind, usize),
    items: &[Item],
    receipts: &[Receipt],
    clock: &Clock,
) -> std::io::Result<()> {
    let mut first: HashMap<Uuid, f64> = HashMap::new();
    for r in receipts {
        first.entry(r.key).or_insert_with(|| clock.at(r.at));
    }
    for item in items {
        if let Some(at) = first.get(&item.key) {
            writeln!(out, "{subscriber},{fleet},{kind:?},{replica},{},{:.4},{at:.4}", item.key, item.committed)?;
        }
    }
    Ok(())
}
