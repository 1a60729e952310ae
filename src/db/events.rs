//! The event log (`work_unit_events`): the columns every write appends with
//! and who appends them ([`Actor`]), the log read in delivery order, the start
//! position of a new subscription, and the sweeper's stall report.
//!
//! Delivery order is `(tx_id, seq)` (migration 0003 explains why): an event
//! is delivered only once every transaction that could still write an event
//! before it has ended, i.e. when its `tx_id` is below the reading snapshot's
//! xmin. The delivered part of the log then only ever grows at its end, so a
//! position in it is exact: no gap and no duplicate, whatever the commit order.

use std::collections::HashSet;

use sea_orm::{ConnectionTrait, DbErr, FromQueryResult, Value};
use uuid::Uuid;

use super::entities::event;
use super::stmt;

/// The columns of an event as the entity decodes them (enums as text).
pub const EVENT_COLUMNS: &str = "e.id, e.seq, e.fleet, e.unit_id, e.attempt_id, e.event_type::text AS event_type, \
    e.from_state::text AS from_state, e.to_state::text AS to_state, e.agent_id, e.cost_delta_cents, e.detail, \
    e.source_event_id, e.request_hash, e.created_at";

/// The column list every write appends its events with; `$3`/`$4` fill the
/// last two (NULL unless the write carries an idempotency key).
pub const INSERT_EVENT: &str = "INSERT INTO work_unit_events
                    (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail, source_event_id, request_hash)";

/// Who writes (the fleet and agent of the caller) and the idempotency key
/// the write's primary event carries.
pub struct Actor<'a> {
    pub fleet: &'a str,
    pub agent: &'a str,
    pub key: Option<IdempotencyKey<'a>>,
}

/// An idempotency key and the fingerprint of the request that used it.
#[derive(Clone, Copy)]
pub struct IdempotencyKey<'a> {
    pub id: &'a str,
    pub hash: &'a str,
}

impl Actor<'_> {
    /// `$1` fleet, `$2` agent, `$3` key, `$4` request hash; operation values follow.
    pub fn values(&self, rest: impl IntoIterator<Item = Value>) -> Vec<Value> {
        let (key, hash) = match self.key {
            Some(k) => (Some(k.id.to_owned()), Some(k.hash.to_owned())),
            None => (None, None),
        };
        let mut values: Vec<Value> = vec![self.fleet.into(), self.agent.into(), key.into(), hash.into()];
        values.extend(rest);
        values
    }
}

/// A place in delivery order. Every event at or before it has been handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub tx: i64,
    pub seq: i64,
}

impl Position {
    /// Just before every event of transaction `tx` and after every event of
    /// the transactions below it (seq starts at 1).
    pub fn before_tx(tx: i64) -> Self {
        Self { tx, seq: 0 }
    }
}

/// One event with its place in delivery order.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    pub position: Position,
    pub event: event::Model,
}

/// What one read of the log found.
pub struct Batch {
    pub events: Vec<LiveEvent>,
    /// Every event of a transaction below this id is final and was in reach
    /// of this read.
    pub watermark: i64,
    /// Committed events exist that wait for an older transaction to end:
    /// read again soon even if no notification comes (the older one may
    /// write no event, or live in another database of the cluster).
    pub held: bool,
}

impl Batch {
    /// Where the next read starts: after the last event returned, or when the
    /// read was not cut short by `limit`, past everything below the watermark.
    pub fn next_after(&self, after: Position, limit: usize) -> Position {
        match self.events.last() {
            Some(last) if self.events.len() >= limit => last.position,
            Some(last) => last.position.max(Position::before_tx(self.watermark)),
            None => after.max(Position::before_tx(self.watermark)),
        }
    }
}

/// Up to `limit` events of `fleet` after `after`, in delivery order, that no
/// running transaction can precede. The watermark and the rows come from one
/// statement, so from one snapshot.
pub async fn events_after(
    db: &impl ConnectionTrait,
    fleet: &str,
    after: Position,
    limit: usize,
) -> Result<Batch, DbErr> {
    let sql = format!(
        "WITH w AS (
             SELECT x.xmin, EXISTS (SELECT 1 FROM work_unit_events h WHERE h.fleet = $1 AND h.tx_id >= x.xmin) AS held
               FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin) x
         )
         SELECT w.xmin AS watermark, w.held, e.tx_id, {EVENT_COLUMNS}
           FROM w LEFT JOIN LATERAL (
                SELECT * FROM work_unit_events e
                 WHERE e.fleet = $1 AND (e.tx_id, e.seq) > ($2, $3) AND e.tx_id < w.xmin
                 ORDER BY e.tx_id, e.seq
                 LIMIT $4
           ) e ON true
          ORDER BY e.tx_id, e.seq"
    );
    let rows =
        db.query_all_raw(stmt(&sql, [fleet.into(), after.tx.into(), after.seq.into(), (limit as i64).into()])).await?;
    let mut batch = Batch { events: Vec::with_capacity(rows.len()), watermark: 0, held: false };
    for row in rows {
        batch.watermark = row.try_get("", "watermark")?;
        batch.held = row.try_get("", "held")?;
        // The LEFT JOIN yields one row of NULLs when there is no event.
        let Some(tx) = row.try_get::<Option<i64>>("", "tx_id")? else { continue };
        let event = event::Model::from_query_result(&row, "")?;
        batch.events.push(LiveEvent { position: Position { tx, seq: event.seq }, event });
    }
    Ok(batch)
}

/// The place in delivery order of one event, when the caller's fleet has it
/// (row-level security hides the others).
pub async fn position_of(db: &impl ConnectionTrait, id: Uuid) -> Result<Option<Position>, DbErr> {
    let row = db.query_one_raw(stmt("SELECT tx_id, seq FROM work_unit_events WHERE id = $1", [id.into()])).await?;
    row.map(|r| Ok(Position { tx: r.try_get("", "tx_id")?, seq: r.try_get("", "seq")? })).transpose()
}

/// The moment a subscription begins, as a snapshot: what had committed then
/// is "before", everything else "after".
#[derive(Debug, Clone)]
pub struct Start {
    /// Every transaction below it had ended.
    pub xmin: i64,
    /// Every transaction from it on had not started.
    pub xmax: i64,
    /// The transactions in between that were still running.
    pub running: HashSet<i64>,
}

impl Start {
    /// The position that skips every transaction below `xmin`.
    pub fn position(&self) -> Position {
        Position::before_tx(self.xmin)
    }

    /// True for an event of a transaction that had committed at the start
    /// although it is not below `xmin` (it ended while an older one ran).
    pub fn committed_before(&self, position: Position) -> bool {
        position.tx >= self.xmin && position.tx < self.xmax && !self.running.contains(&position.tx)
    }

    /// Parses `pg_current_snapshot()::text`: `xmin:xmax:xip,xip,...`.
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split(':');
        let xmin = parts.next()?.parse().ok()?;
        let xmax = parts.next()?.parse().ok()?;
        let running = match parts.next()? {
            "" => HashSet::new(),
            list => list.split(',').map(|x| x.parse().ok()).collect::<Option<HashSet<i64>>>()?,
        };
        Some(Self { xmin, xmax, running })
    }
}

pub async fn start(db: &impl ConnectionTrait) -> Result<Start, DbErr> {
    let row = db
        .query_one_raw(stmt("SELECT pg_current_snapshot()::text AS snapshot", []))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("pg_current_snapshot".into()))?;
    let text: String = row.try_get("", "snapshot")?;
    Start::parse(&text).ok_or_else(|| DbErr::Type(format!("unexpected snapshot text {text:?}")))
}

/// What one sweep statement did.
pub struct Sweep {
    /// Expired attempts without a stall report, at most the batch size.
    pub found: u64,
    /// Stall events this statement appended (another replica may have taken
    /// the rest).
    pub reported: u64,
}

/// Appends one `stalled` event per expired CLAIMED/IN_PROGRESS attempt that
/// has none yet, for every fleet. The partial unique index
/// `work_unit_events_one_stall_per_attempt` de-duplicates across replicas:
/// a concurrent sweeper's row makes this one's `ON CONFLICT DO NOTHING`.
/// Each event copies its fleet from the unit row, and the (fleet, unit_id)
/// foreign key would refuse any other. The unit is not locked: a reclaim
/// running at the same moment is never delayed or skipped by a sweep.
pub async fn report_stalls(db: &impl ConnectionTrait, batch_size: u32) -> Result<Sweep, DbErr> {
    let row = db
        .query_one_raw(stmt(
            "WITH expired AS (
                 SELECT u.id, u.fleet, u.domain, u.state, u.claimed_by, u.current_attempt_id,
                        u.lease_expires_at, u.last_heartbeat_at
                   FROM work_units u
                  WHERE u.state IN ('claimed', 'in_progress') AND u.lease_expires_at < now()
                    AND NOT EXISTS (SELECT 1 FROM work_unit_events e
                                     WHERE e.attempt_id = u.current_attempt_id AND e.event_type = 'stalled')
                  ORDER BY u.lease_expires_at
                  LIMIT $1
             ), reported AS (
                 INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
                 SELECT fleet, id, current_attempt_id, 'stalled', state, state, claimed_by,
                        jsonb_build_object('domain', domain, 'lease_expired_at', lease_expires_at,
                                           'last_heartbeat_at', last_heartbeat_at)
                   FROM expired
                 ON CONFLICT (attempt_id) WHERE event_type = 'stalled' DO NOTHING
                 RETURNING 1
             )
             SELECT (SELECT count(*) FROM expired) AS found, (SELECT count(*) FROM reported) AS reported",
            [i64::from(batch_size).into()],
        ))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("sweep".into()))?;
    let found: i64 = row.try_get("", "found")?;
    let reported: i64 = row.try_get("", "reported")?;
    Ok(Sweep { found: found.max(0) as u64, reported: reported.max(0) as u64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_snapshots() {
        let s = Start::parse("100:105:101,103").expect("snapshot");
        assert_eq!((s.xmin, s.xmax), (100, 105));
        assert!(!s.committed_before(Position { tx: 99, seq: 1 }), "below xmin: covered by the position");
        assert!(!s.committed_before(Position { tx: 101, seq: 1 }), "running at the start");
        assert!(s.committed_before(Position { tx: 102, seq: 1 }), "ended before the start");
        assert!(!s.committed_before(Position { tx: 105, seq: 1 }), "started after");
        let empty = Start::parse("7:7:").expect("snapshot");
        assert!(empty.running.is_empty());
        assert!(Start::parse("7:x:").is_none());
    }

    #[test]
    fn a_read_cut_short_resumes_after_its_last_event() {
        let event = |tx, seq| LiveEvent {
            position: Position { tx, seq },
            event: event::Model {
                id: Uuid::nil(),
                seq,
                fleet: String::new(),
                unit_id: Uuid::nil(),
                attempt_id: None,
                event_type: crate::db::entities::EventType::Registered,
                from_state: None,
                to_state: None,
                agent_id: None,
                cost_delta_cents: 0,
                detail: serde_json::Value::Null,
                source_event_id: None,
                request_hash: None,
                created_at: chrono::Utc::now(),
            },
        };
        let start = Position { tx: 1, seq: 1 };
        let full = Batch { events: vec![event(5, 9), event(6, 10)], watermark: 50, held: false };
        assert_eq!(full.next_after(start, 2), Position { tx: 6, seq: 10 });
        assert_eq!(full.next_after(start, 3), Position::before_tx(50));
        let empty = Batch { events: vec![], watermark: 40, held: true };
        assert_eq!(empty.next_after(start, 3), Position::before_tx(40));
        assert_eq!(empty.next_after(Position::before_tx(60), 3), Position::before_tx(60), "never moves back");
    }
}
