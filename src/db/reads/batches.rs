//! The batched loads behind the DataLoaders: one statement for the
//! relations of many units or attempts at once.

use std::collections::HashMap;

use sea_orm::{DatabaseTransaction, DbErr, EntityTrait, FromQueryResult};
use uuid::Uuid;

use super::query::Cursor;
use crate::db::entities::{attempt, event, question, work_unit};
use crate::db::events::EVENT_COLUMNS;
use crate::db::stmt;
use crate::db::units::UNIT_COLUMNS;

pub async fn units_by_ids(tx: &DatabaseTransaction, ids: &[Uuid]) -> Result<Vec<work_unit::Model>, DbErr> {
    let sql = format!("SELECT {UNIT_COLUMNS} FROM work_units u WHERE u.id = ANY($1)");
    work_unit::Entity::find().from_raw_sql(stmt(&sql, [ids.to_vec().into()])).all(tx).await
}

pub async fn attempts_by_ids(tx: &DatabaseTransaction, ids: &[Uuid]) -> Result<Vec<attempt::Model>, DbErr> {
    let sql = "SELECT a.id, a.fleet, a.unit_id, a.attempt_no, a.agent_id, a.outcome::text AS outcome, a.cost_cents, \
               a.evidence_url, a.started_at, a.ended_at FROM work_unit_attempts a WHERE a.id = ANY($1)";
    attempt::Entity::find().from_raw_sql(stmt(sql, [ids.to_vec().into()])).all(tx).await
}

pub async fn attempts_of_units(tx: &DatabaseTransaction, units: &[Uuid]) -> Result<Vec<attempt::Model>, DbErr> {
    let sql = "SELECT a.id, a.fleet, a.unit_id, a.attempt_no, a.agent_id, a.outcome::text AS outcome, a.cost_cents, \
               a.evidence_url, a.started_at, a.ended_at FROM work_unit_attempts a WHERE a.unit_id = ANY($1) \
               ORDER BY a.unit_id, a.attempt_no";
    attempt::Entity::find().from_raw_sql(stmt(sql, [units.to_vec().into()])).all(tx).await
}

pub async fn questions_of_units(tx: &DatabaseTransaction, units: &[Uuid]) -> Result<Vec<question::Model>, DbErr> {
    let sql = "SELECT q.id, q.fleet, q.unit_id, q.attempt_id, q.question, q.status::text AS status, q.answer, \
               q.assignee_group, q.asked_by, q.answered_by, q.created_at, q.answered_at, q.cancelled_at \
               FROM blocking_questions q WHERE q.unit_id = ANY($1) ORDER BY q.created_at DESC, q.id DESC";
    question::Entity::find().from_raw_sql(stmt(sql, [units.to_vec().into()])).all(tx).await
}

/// The first `limit` events (in the given order, after `cursor`) of each unit, in one statement.
pub async fn events_of_units(
    tx: &DatabaseTransaction,
    units: &[Uuid],
    cursor: Option<Cursor>,
    limit: i32,
    newest_first: bool,
) -> Result<Vec<event::Model>, DbErr> {
    let (t, i) = cursor.map(|c| (Some(c.created_at), Some(c.id))).unwrap_or((None, None));
    let (cmp, dir) = if newest_first { ("<", "DESC") } else { (">", "ASC") };
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM unnest($1::uuid[]) AS k(unit_id)
           CROSS JOIN LATERAL (
               SELECT * FROM work_unit_events x
                WHERE x.unit_id = k.unit_id AND ($2::timestamptz IS NULL OR (x.created_at, x.id) {cmp} ($2, $3::uuid))
                ORDER BY x.created_at {dir}, x.id {dir} LIMIT $4
           ) e
          ORDER BY e.unit_id, e.created_at {dir}, e.id {dir}"
    );
    event::Entity::find()
        .from_raw_sql(stmt(&sql, [units.to_vec().into(), t.into(), i.into(), i64::from(limit).into()]))
        .all(tx)
        .await
}

/// How many events each unit has (units without events are left out).
pub async fn event_counts_of_units(tx: &DatabaseTransaction, units: &[Uuid]) -> Result<Vec<UnitCount>, DbErr> {
    let sql = "SELECT e.unit_id, count(*) AS n FROM work_unit_events e WHERE e.unit_id = ANY($1) GROUP BY e.unit_id";
    UnitCount::find_by_statement(stmt(sql, [units.to_vec().into()])).all(tx).await
}

#[derive(Debug, Clone, FromQueryResult)]
pub struct UnitCount {
    pub unit_id: Uuid,
    pub n: i64,
}

/// Who disposed of a unit and why (`v_disposals`, derived from its `disposed` event).
#[derive(Debug, Clone, FromQueryResult)]
pub struct DisposalRow {
    pub unit_id: Uuid,
    pub disposed_by: Option<String>,
    pub disposition_reason: Option<String>,
}

pub async fn disposals_of_units(tx: &DatabaseTransaction, units: &[Uuid]) -> Result<Vec<DisposalRow>, DbErr> {
    let sql = "SELECT d.unit_id, d.disposed_by, d.disposition_reason FROM v_disposals d WHERE d.unit_id = ANY($1)";
    DisposalRow::find_by_statement(stmt(sql, [units.to_vec().into()])).all(tx).await
}

/// Who ended an attempt and why (`v_attempt_end`, derived from the event that ended it).
#[derive(Debug, Clone, FromQueryResult)]
pub struct AttemptEndRow {
    pub attempt_id: Uuid,
    /// The agent of the ending event (for a reclaim, the reclaiming agent).
    pub ended_by: Option<String>,
    pub end_reason: Option<String>,
    /// The type of the ending event (`stale_reclaimed` for a reclaim).
    pub end_event: Option<String>,
}

impl AttemptEndRow {
    /// True when a reclaim ended the attempt: its lease ran out and another
    /// claim superseded it, nobody's write ended it.
    pub fn reclaimed(&self) -> bool {
        self.end_event.as_deref() == Some("stale_reclaimed")
    }
}

pub async fn attempt_ends(tx: &DatabaseTransaction, attempts: &[Uuid]) -> Result<Vec<AttemptEndRow>, DbErr> {
    let sql = "SELECT x.attempt_id, x.ended_by, x.end_reason, x.end_event::text AS end_event \
                 FROM v_attempt_end x WHERE x.attempt_id = ANY($1)";
    AttemptEndRow::find_by_statement(stmt(sql, [attempts.to_vec().into()])).all(tx).await
}

/// Groups rows by a key, keeping their order.
pub fn group_by<T, K: std::hash::Hash + Eq>(rows: Vec<T>, key: impl Fn(&T) -> K) -> HashMap<K, Vec<T>> {
    let mut map: HashMap<K, Vec<T>> = HashMap::new();
    for row in rows {
        map.entry(key(&row)).or_default().push(row);
    }
    map
}
