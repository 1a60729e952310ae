//! The event log (`work_unit_events`): the log read in delivery order, the
//! start position of a new subscription, and the notifications of new events
//! (the writes that append events are SQL functions: [`super::writes`]).
//!
//! Delivery order is `(batch, tx_id, seq)` (live.sql explains
//! why): an event is delivered only once every transaction that could still
//! append an event before it has ended, i.e. when its batch is below the
//! delivery watermark, which only in-flight event writers of this database
//! hold back. The delivered part of the log then only ever grows at its end,
//! so a position in it is exact: no gap and no duplicate, whatever the commit
//! order.

use std::collections::HashSet;
use std::sync::Arc;

use sea_orm::{ConnectionTrait, DbErr, FromQueryResult, QueryResult};
use uuid::Uuid;

use super::entities::event;
use super::stmt;

/// The columns of an event as the entity decodes them (enums as text).
pub const EVENT_COLUMNS: &str = "e.id, e.seq, e.fleet, e.unit_id, e.attempt_id, e.event_type::text AS event_type, \
    e.from_state::text AS from_state, e.to_state::text AS to_state, e.agent_id, e.cost_delta_cents, e.detail, \
    e.source_event_id, e.request_hash, e.created_at";

/// A place in delivery order: `(batch, tx_id, seq)`. Every
/// event at or before it has been handled. A batch is drawn from a sequence
/// of this database by each transaction when it appends its first event, so
/// positions survive a dump and restore into another cluster; events written
/// before batches existed have batch 0 and keep their `(tx_id, seq)` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub batch: i64,
    pub tx: i64,
    pub seq: i64,
}

impl Position {
    /// Just before every event of batch `batch` and after every event of the
    /// batches below it (tx_id and seq are never negative).
    pub fn before_batch(batch: i64) -> Self {
        Self { batch, tx: -1, seq: -1 }
    }
}

/// One event with its place in delivery order.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    pub position: Position,
    pub event: event::Model,
}

/// What one read of the log found.
#[derive(Debug, Default)]
pub struct Batch {
    pub events: Vec<Arc<LiveEvent>>,
    /// Every event of a batch below it is final and was in reach of this
    /// read (see [`watermark`]).
    pub watermark: i64,
    /// Committed events exist that wait for an older in-flight event writer
    /// to end: read again soon even if no notification comes.
    pub held: bool,
}

impl Batch {
    /// Where the next read starts: after the last event returned, or when the
    /// read was not cut short by `limit`, past everything below the watermark.
    pub fn next_after(&self, after: Position, limit: usize) -> Position {
        match self.events.last() {
            Some(last) if self.events.len() >= limit => last.position,
            Some(last) => last.position.max(Position::before_batch(self.watermark)),
            None => after.max(Position::before_batch(self.watermark)),
        }
    }
}

/// The delivery watermark W : every event
/// of a batch below W is final, i.e. committed and visible to any statement
/// that starts after this one, or never to be. Only in-flight transactions
/// that appended events in this database hold it back. Read the log in a
/// LATER statement: in the same one, a writer that commits between the
/// statement's snapshot and the marker read would be missed.
pub async fn watermark(db: &impl ConnectionTrait) -> Result<i64, DbErr> {
    let row = db
        .query_one_raw(stmt("SELECT live_delivery_watermark() AS w", []))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("live_delivery_watermark".into()))?;
    row.try_get("", "w")
}

/// Up to `limit` events of `fleet` after `after`, in delivery order, of
/// batches below `below` (a watermark an earlier read returned) or, when it
/// is `None`, below a watermark the database takes first: one call of
/// `live_events_below`, which takes the app role and the
/// fleet (row-level security) and reads the rows in later statements than
/// the watermark's. Called in autocommit (feeds' reads, tails' catch-up):
/// one round trip, no transaction around it; inside a transaction, that
/// transaction must be READ COMMITTED and stays in the fleet afterwards.
///
/// A watermark is final for good once taken, so `below` may be any that a
/// read of this database returned before this call; the database lowers
/// one that reaches past the batches drawn so far.
pub async fn events_after(
    db: &impl ConnectionTrait,
    fleet: &str,
    after: Position,
    below: Option<i64>,
    limit: usize,
) -> Result<Batch, DbErr> {
    let sql = format!(
        "SELECT r.watermark, r.held, e.batch, e.tx_id, {EVENT_COLUMNS}
           FROM live_events_below($1, $2, $3, $4, $5, $6) WITH ORDINALITY AS r
           LEFT JOIN LATERAL (SELECT (r.event).*) AS e ON true
          ORDER BY r.ordinality"
    );
    let values =
        [fleet.into(), after.batch.into(), after.tx.into(), after.seq.into(), below.into(), (limit as i32).into()];
    let rows = db.query_all_raw(stmt(&sql, values)).await?;
    if rows.is_empty() {
        return Err(DbErr::RecordNotFound("a read of the event log".into()));
    }
    let mut batch = Batch::default();
    for row in &rows {
        batch.push_row(row)?;
    }
    Ok(batch)
}

/// Where a resumed subscription starts and its first page, in one call of
/// `live_events_resumed` (autocommit, and `below`, as for
/// [`events_after`]): right after the event `id` of `fleet`, or just before
/// batch `floor` when that is earlier, and up to `limit` events from there.
/// `None` when `fleet` has no such event (row-level security hides the
/// others).
pub async fn events_resumed(
    db: &impl ConnectionTrait,
    fleet: &str,
    id: Uuid,
    floor: Option<i64>,
    below: Option<i64>,
    limit: usize,
) -> Result<Option<(Position, Batch)>, DbErr> {
    let sql = format!(
        "SELECT r.from_batch, r.from_tx, r.from_seq, r.watermark, r.held, e.batch, e.tx_id, {EVENT_COLUMNS}
           FROM live_events_resumed($1, $2, $3, $4, $5) WITH ORDINALITY AS r
           LEFT JOIN LATERAL (SELECT (r.event).*) AS e ON true
          ORDER BY r.ordinality"
    );
    let values = [fleet.into(), id.into(), floor.into(), below.into(), (limit as i32).into()];
    let rows = db.query_all_raw(stmt(&sql, values)).await?;
    let Some(first) = rows.first() else { return Ok(None) };
    let from = Position {
        batch: first.try_get("", "from_batch")?,
        tx: first.try_get("", "from_tx")?,
        seq: first.try_get("", "from_seq")?,
    };
    let mut batch = Batch::default();
    for row in &rows {
        batch.push_row(row)?;
    }
    Ok(Some((from, batch)))
}

impl Batch {
    /// One row of `live_events_below`'s columns: the watermark and `held`
    /// come on every row, and a row with a NULL event stands for none.
    fn push_row(&mut self, row: &QueryResult) -> Result<(), DbErr> {
        self.watermark = row.try_get("", "watermark")?;
        self.held = row.try_get("", "held")?;
        let Some(batch) = row.try_get::<Option<i64>>("", "batch")? else { return Ok(()) };
        let tx: i64 = row.try_get("", "tx_id")?;
        let event = event::Model::from_query_result(row, "")?;
        self.events.push(Arc::new(LiveEvent { position: Position { batch, tx, seq: event.seq }, event }));
        Ok(())
    }
}

/// The opaque tag of `fleet` that event notifications carry.
pub async fn fleet_tag(db: &impl ConnectionTrait, fleet: &str) -> Result<String, DbErr> {
    let row = db
        .query_one_raw(stmt("SELECT live_fleet_tag($1) AS tag", [fleet.into()]))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("live_fleet_tag".into()))?;
    row.try_get("", "tag")
}

/// The oldest in-flight transaction that appended events (it holds live
/// delivery back until it ends).
#[derive(Debug, Clone)]
pub struct EventWriter {
    /// Its backend's process id (`pg_stat_activity.pid`).
    pub pid: i32,
    /// How long its transaction has been open, when this role may see it in
    /// `pg_stat_activity` (its own sessions, or with `pg_read_all_stats`).
    pub age: Option<std::time::Duration>,
}

pub async fn oldest_event_writer(db: &impl ConnectionTrait) -> Result<Option<EventWriter>, DbErr> {
    let row = db
        .query_one_raw(stmt(
            "SELECT w.pid, extract(epoch FROM clock_timestamp() - a.xact_start)::float8 AS age
               FROM live_event_writers w LEFT JOIN pg_stat_activity a ON a.pid = w.pid
              ORDER BY w.batch_floor, a.xact_start NULLS LAST
              LIMIT 1",
            [],
        ))
        .await?;
    let Some(row) = row else { return Ok(None) };
    let age: Option<f64> = row.try_get("", "age")?;
    Ok(Some(EventWriter {
        pid: row.try_get("", "pid")?,
        age: age.map(|a| std::time::Duration::from_secs_f64(a.max(0.0))),
    }))
}

/// The moment a subscription begins: what had committed then is "before",
/// everything else "after". The watermark is taken first and the snapshot in
/// a later statement, so every batch below the watermark had committed (or
/// never will) by the time of the snapshot.
#[derive(Debug, Clone)]
pub struct Start {
    /// Every batch below it is "before".
    pub watermark: i64,
    /// Every transaction below it had ended.
    pub xmin: i64,
    /// Every transaction from it on had not started.
    pub xmax: i64,
    /// The transactions in between that were still running.
    pub running: HashSet<i64>,
}

impl Start {
    /// The position that skips every batch below the watermark.
    pub fn position(&self) -> Position {
        Position::before_batch(self.watermark)
    }

    /// True for an event at or past the watermark whose transaction had
    /// committed at the start (it ended while an older event writer ran).
    /// Transaction ids are compared only for such events, which were all
    /// written in this cluster since the subscription's server started.
    pub fn committed_before(&self, position: Position) -> bool {
        let tx = position.tx;
        position.batch >= self.watermark && (tx < self.xmin || (tx < self.xmax && !self.running.contains(&tx)))
    }

    /// Parses `pg_current_snapshot()::text`: `xmin:xmax:xip,xip,...`.
    fn parse(watermark: i64, text: &str) -> Option<Self> {
        let mut parts = text.split(':');
        let xmin = parts.next()?.parse().ok()?;
        let xmax = parts.next()?.parse().ok()?;
        let running = match parts.next()? {
            "" => HashSet::new(),
            list => list.split(',').map(|x| x.parse().ok()).collect::<Option<HashSet<i64>>>()?,
        };
        Some(Self { watermark, xmin, xmax, running })
    }
}

pub async fn start(db: &impl ConnectionTrait) -> Result<Start, DbErr> {
    let watermark = watermark(db).await?;
    let row = db
        .query_one_raw(stmt("SELECT pg_current_snapshot()::text AS snapshot", []))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("pg_current_snapshot".into()))?;
    let text: String = row.try_get("", "snapshot")?;
    Start::parse(watermark, &text).ok_or_else(|| DbErr::Type(format!("unexpected snapshot text {text:?}")))
}

/// Announces that `fleets` have new events: one `pg_notify` per fleet on the
/// events channel, with a fresh signal of the fleet as payload (a nonce and
/// its MAC under the fleet's tag: [`signal_matches`]),
/// in one autocommit statement. Its commit carries nothing worth a WAL flush,
/// so it does not wait for one (`synchronous_commit` off for it alone): a
/// notification lost to a crash is made up for by the listeners' periodic
/// re-read of the table.
pub async fn notify_fleets(db: &impl ConnectionTrait, fleets: Vec<String>) -> Result<(), DbErr> {
    db.execute_raw(stmt(
        "SELECT pg_notify('work_ledger_events', live_fleet_signal(f)), set_config('synchronous_commit', 'off', true)
           FROM unnest($1::text[]) AS f",
        [fleets.into()],
    ))
    .await
    .map(|_| ())
}

/// True when `payload` (an event notification: 32 hex digits of nonce, then
/// 32 of MAC) was signalled for the fleet whose tag is `tag`: the MAC is the
/// first 16 bytes of SHA-256(tag || nonce), as `live_fleet_signal` computes
/// it. Payloads of other fleets, forgeries and garbage do not match.
pub fn signal_matches(tag: &str, payload: &str) -> bool {
    use sha2::{Digest, Sha256};
    let (Some(nonce), Some(mac)) = (payload.get(..32), payload.get(32..)) else { return false };
    if mac.len() != 32 {
        return false;
    }
    let mut hasher = Sha256::new();
    hasher.update(tag.as_bytes());
    hasher.update(nonce.as_bytes());
    hex::encode(&hasher.finalize()[..16]) == mac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_matches_only_its_fleets_tag() {
        let tag = "0123456789abcdef0123456789abcdef";
        let nonce = "fedcba9876543210fedcba9876543210";
        let mac = hex::encode(&<sha2::Sha256 as sha2::Digest>::digest(format!("{tag}{nonce}").as_bytes())[..16]);
        assert!(signal_matches(tag, &format!("{nonce}{mac}")));
        assert!(!signal_matches("ffffffffffffffffffffffffffffffff", &format!("{nonce}{mac}")));
        assert!(!signal_matches(tag, &format!("{nonce}{}", &mac[..31])));
        assert!(!signal_matches(tag, tag));
        assert!(!signal_matches(tag, ""));
        assert!(!signal_matches(tag, &format!("{nonce}{mac}é")));
    }

    #[test]
    fn parses_snapshots() {
        let s = Start::parse(20, "100:105:101,103").expect("snapshot");
        assert_eq!((s.xmin, s.xmax), (100, 105));
        let at = |batch, tx| Position { batch, tx, seq: 1 };
        assert!(!s.committed_before(at(19, 99)), "below the watermark: covered by the position");
        assert!(s.committed_before(at(20, 99)), "ended before the start, held back then");
        assert!(!s.committed_before(at(20, 101)), "running at the start");
        assert!(s.committed_before(at(21, 102)), "ended before the start");
        assert!(!s.committed_before(at(22, 105)), "started after");
        let empty = Start::parse(1, "7:7:").expect("snapshot");
        assert!(empty.running.is_empty());
        assert!(Start::parse(1, "7:x:").is_none());
    }

    #[test]
    fn a_read_cut_short_resumes_after_its_last_event() {
        let event = |batch, seq| {
            Arc::new(LiveEvent {
                position: Position { batch, tx: 7, seq },
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
            })
        };
        let start = Position { batch: 1, tx: 7, seq: 1 };
        let full = Batch { events: vec![event(5, 9), event(6, 10)], watermark: 50, held: false };
        assert_eq!(full.next_after(start, 2), Position { batch: 6, tx: 7, seq: 10 });
        assert_eq!(full.next_after(start, 3), Position::before_batch(50));
        let empty = Batch { events: vec![], watermark: 40, held: true };
        assert_eq!(empty.next_after(start, 3), Position::before_batch(40));
        assert_eq!(empty.next_after(Position::before_batch(60), 3), Position::before_batch(60), "never moves back");
        assert!(Position::before_batch(3) < Position { batch: 3, tx: 0, seq: 1 }, "before a batch's first event");
        assert!(Position { batch: 2, tx: i64::MAX, seq: i64::MAX } < Position::before_batch(3));
    }
}
