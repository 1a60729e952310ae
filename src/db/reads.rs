//! SQL of the read path: keyset pages (never OFFSET; a `count(*)` only for a
//! `totalCount` the client asked for), the batched loads behind the
//! DataLoaders, and the view queries.
//! Every statement runs inside `in_fleet`, so RLS applies on top of the
//! explicit `fleet = $1` that lets the planner use the fleet-leading indexes.

use std::collections::HashMap;

use sea_orm::{ActiveEnum, DatabaseTransaction, DbErr, EntityTrait, FromQueryResult, Value};
use uuid::Uuid;

use chrono::{DateTime, Utc};

use super::entities::{Disposition, EventType, QuestionStatus, WorkState, attempt, event, question, work_unit};
use super::events::EVENT_COLUMNS;
use super::stmt;
use super::units::UNIT_COLUMNS;

/// A keyset position: the `(created_at, id)` of the last row of a page. Its
/// opaque text form for clients is `ledger::cursor`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor {
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
}

/// A statement under construction: SQL text plus its positional values.
#[derive(Clone)]
pub struct Query {
    sql: String,
    values: Vec<Value>,
}

impl Query {
    pub fn new(sql: &str) -> Self {
        Self { sql: sql.to_owned(), values: Vec::new() }
    }

    /// Binds a value and returns its placeholder.
    pub fn bind(&mut self, value: impl Into<Value>) -> String {
        self.values.push(value.into());
        format!("${}", self.values.len())
    }

    /// Appends ` AND <condition>` where `{}` in `condition` is the bound value.
    pub fn and(&mut self, condition: &str, value: impl Into<Value>) -> &mut Self {
        let p = self.bind(value);
        self.sql.push_str(" AND ");
        self.sql.push_str(&condition.replace("{}", &p));
        self
    }

    pub fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// Keyset condition and order: rows after `cursor` on `(alias.created_at, alias.id)`.
    pub fn page(&mut self, alias: &str, cursor: Option<Cursor>, newest_first: bool, limit: i32) -> &mut Self {
        self.page_on(alias, "id", cursor, newest_first, limit)
    }

    /// Like [`Query::page`], for a relation whose id column has another name.
    pub fn page_on(
        &mut self,
        alias: &str,
        id: &str,
        cursor: Option<Cursor>,
        newest_first: bool,
        limit: i32,
    ) -> &mut Self {
        let (cmp, dir) = if newest_first { ("<", "DESC") } else { (">", "ASC") };
        if let Some(c) = cursor {
            let t = self.bind(c.created_at);
            let i = self.bind(c.id);
            self.sql.push_str(&format!(" AND ({alias}.created_at, {alias}.{id}) {cmp} ({t}, {i})"));
        }
        let l = self.bind(i64::from(limit));
        self.sql.push_str(&format!(" ORDER BY {alias}.created_at {dir}, {alias}.{id} {dir} LIMIT {l}"));
        self
    }

    /// Rows in `[from, until)` of a timestamp column; open where a bound is None.
    pub fn range(&mut self, column: &str, range: &Range) -> &mut Self {
        if let Some(from) = range.from {
            self.and(&format!("{column} >= {{}}"), from);
        }
        if let Some(until) = range.until {
            self.and(&format!("{column} < {{}}"), until);
        }
        self
    }

    /// The number of rows the query (not yet paged) selects: the `totalCount`
    /// of its list, with the very same filter.
    pub fn count(&self) -> Query {
        Query { sql: format!("SELECT count(*) AS n FROM ({}) AS listed", self.sql), values: self.values.clone() }
    }

    /// The SQL text and its values, e.g. to EXPLAIN the very statement a read sends.
    pub fn parts(&self) -> (&str, &[Value]) {
        (&self.sql, &self.values)
    }

    pub async fn scalar(self, tx: &DatabaseTransaction) -> Result<i64, DbErr> {
        #[derive(FromQueryResult)]
        struct N {
            n: i64,
        }
        Ok(N::find_by_statement(stmt(&self.sql, self.values)).one(tx).await?.map_or(0, |r| r.n))
    }

    pub async fn units(self, tx: &DatabaseTransaction) -> Result<Vec<work_unit::Model>, DbErr> {
        work_unit::Entity::find().from_raw_sql(stmt(&self.sql, self.values)).all(tx).await
    }

    pub async fn rows<T: FromQueryResult>(self, tx: &DatabaseTransaction) -> Result<Vec<T>, DbErr> {
        T::find_by_statement(stmt(&self.sql, self.values)).all(tx).await
    }
}

/// A time range `[from, until)`; a missing bound is open.
#[derive(Debug, Clone, Copy, Default)]
pub struct Range {
    pub from: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

/// Which units `units` lists (every field optional, all must hold).
#[derive(Debug, Clone, Default)]
pub struct UnitFilter {
    pub state: Option<WorkState>,
    pub domain: Option<String>,
    pub disposition: Option<Disposition>,
    pub claimed_by: Option<String>,
    pub external_ref_prefix: Option<String>,
    /// CLAIMED or IN_PROGRESS with an expired lease (true), or not (false).
    pub stalled: Option<bool>,
    /// Registered in this range.
    pub created: Range,
}

/// Which events `events` lists.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub unit_id: Option<Uuid>,
    /// Any of these types; empty means every type.
    pub types: Vec<EventType>,
    pub agent_id: Option<String>,
    /// Written in this range.
    pub created: Range,
}

/// Which questions `questions` lists.
#[derive(Debug, Clone, Default)]
pub struct QuestionFilter {
    pub status: Option<QuestionStatus>,
    pub assignee_group: Option<String>,
    /// Asked in this range.
    pub created: Range,
}

/// The stall condition of `v_stall_list` and `v_queue_depth`, on `u`.
const STALLED: &str = "(u.state IN ('claimed', 'in_progress') AND u.lease_expires_at < now())";

/// `units`: oldest first, filtered.
pub fn units(fleet: &str, filter: &UnitFilter) -> Query {
    let mut q = Query::new(&format!("SELECT {UNIT_COLUMNS} FROM work_units u WHERE u.fleet = "));
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(state) = filter.state {
        q.and("u.state = {}::work_state", state.as_sql());
    }
    if let Some(domain) = &filter.domain {
        q.and("u.domain = {}", domain.clone());
    }
    if let Some(disposition) = filter.disposition {
        q.and("u.disposition = {}::disposition", disposition.as_sql());
    }
    if let Some(claimed_by) = &filter.claimed_by {
        q.and("u.claimed_by = {}", claimed_by.clone());
    }
    if let Some(prefix) = &filter.external_ref_prefix {
        // starts_with, not LIKE: a prefix is data, never a pattern.
        q.and("starts_with(u.external_ref, {})", prefix.clone());
    }
    match filter.stalled {
        Some(true) => q.push(&format!(" AND {STALLED}")),
        Some(false) => q.push(&format!(" AND NOT {STALLED}")),
        None => &mut q,
    };
    q.range("u.created_at", &filter.created);
    q
}

/// Units listed by one of the views (`v_stall_list`, `v_rework`,
/// `v_disposition_detail`), as whole units.
pub fn units_in_view(fleet: &str, view: &str) -> Query {
    let mut q = Query::new(&format!(
        "SELECT {UNIT_COLUMNS} FROM {view} v JOIN work_units u ON u.id = v.unit_id WHERE v.fleet = "
    ));
    let p = q.bind(fleet);
    q.push(&p);
    q
}

/// `events`: newest first, filtered.
pub fn events(fleet: &str, filter: &EventFilter) -> Query {
    let mut q = Query::new(&format!("SELECT {EVENT_COLUMNS} FROM work_unit_events e WHERE e.fleet = "));
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(unit) = filter.unit_id {
        q.and("e.unit_id = {}", unit);
    }
    if !filter.types.is_empty() {
        let names: Vec<String> = filter.types.iter().map(|t| t.to_value()).collect();
        q.and("e.event_type::text = ANY({}::text[])", names);
    }
    if let Some(agent) = &filter.agent_id {
        q.and("e.agent_id = {}", agent.clone());
    }
    q.range("e.created_at", &filter.created);
    q
}

pub async fn events_page(tx: &DatabaseTransaction, q: Query) -> Result<Vec<event::Model>, DbErr> {
    event::Entity::find().from_raw_sql(stmt(&q.sql, q.values)).all(tx).await
}

/// `questions`: oldest first.
pub fn questions(fleet: &str, filter: &QuestionFilter) -> Query {
    let mut q = Query::new(
        "SELECT q.id, q.fleet, q.unit_id, q.attempt_id, q.question, q.status::text AS status, q.answer, \
         q.assignee_group, q.asked_by, q.answered_by, q.created_at, q.answered_at, q.cancelled_at \
         FROM blocking_questions q WHERE q.fleet = ",
    );
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(status) = filter.status {
        q.and("q.status = {}::question_status", status.to_value());
    }
    if let Some(group) = &filter.assignee_group {
        q.and("q.assignee_group = {}", group.clone());
    }
    q.range("q.created_at", &filter.created);
    q
}

pub async fn questions_page(tx: &DatabaseTransaction, q: Query) -> Result<Vec<question::Model>, DbErr> {
    question::Entity::find().from_raw_sql(stmt(&q.sql, q.values)).all(tx).await
}

// --- Batched loads (DataLoaders) -------------------------------------------

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
    pub ended_by: Option<String>,
    pub end_reason: Option<String>,
}

pub async fn attempt_ends(tx: &DatabaseTransaction, attempts: &[Uuid]) -> Result<Vec<AttemptEndRow>, DbErr> {
    let sql = "SELECT x.attempt_id, x.ended_by, x.end_reason FROM v_attempt_end x WHERE x.attempt_id = ANY($1)";
    AttemptEndRow::find_by_statement(stmt(sql, [attempts.to_vec().into()])).all(tx).await
}

// --- Views -------------------------------------------------------------------

/// Open work of one domain (`v_queue_depth`).
#[derive(Debug, Clone, FromQueryResult)]
pub struct QueueDepthRow {
    pub domain: String,
    pub ready: i64,
    pub claimed: i64,
    pub in_progress: i64,
    pub blocked: i64,
    pub verified: i64,
    /// CLAIMED or IN_PROGRESS with an expired lease.
    pub stalled: i64,
}

pub async fn queue_depth(
    tx: &DatabaseTransaction,
    fleet: &str,
    domain: Option<&str>,
) -> Result<Vec<QueueDepthRow>, DbErr> {
    let mut q = Query::new(
        "SELECT domain, ready, claimed, in_progress, blocked, verified, stalled FROM v_queue_depth WHERE fleet = ",
    );
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(domain) = domain {
        q.and("domain = {}", domain.to_owned());
    }
    q.push(" ORDER BY domain");
    q.rows(tx).await
}

#[derive(Debug, Clone, FromQueryResult)]
pub struct DispositionRow {
    pub disposition: String,
    pub units: i64,
    pub cost_cents: i64,
}

/// Count and cost per disposition; every disposition present, zeros included.
pub async fn disposition_summary(
    tx: &DatabaseTransaction,
    fleet: &str,
    domain: Option<&str>,
) -> Result<Vec<DispositionRow>, DbErr> {
    let mut q = Query::new(
        "SELECT d.disposition::text AS disposition, coalesce(sum(s.units), 0)::bigint AS units, \
                coalesce(sum(s.cost_cents), 0)::bigint AS cost_cents \
           FROM unnest(enum_range(NULL::disposition)) AS d(disposition) \
           LEFT JOIN v_disposition_summary s ON s.disposition = d.disposition AND s.fleet = ",
    );
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(domain) = domain {
        q.and("s.domain = {}", domain.to_owned());
    }
    q.push(" GROUP BY d.disposition ORDER BY d.disposition");
    q.rows(tx).await
}

#[derive(Debug, Clone, FromQueryResult)]
pub struct CostRow {
    pub unit_id: Uuid,
    pub cost_cents: i64,
    pub attempt_count: i32,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

pub fn cost_per_unit(fleet: &str, domain: Option<&str>) -> Query {
    let mut q = Query::new(
        "SELECT v.unit_id, v.cost_cents, v.attempt_count, v.created_at FROM v_cost_per_unit v WHERE v.fleet = ",
    );
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(domain) = domain {
        q.and("v.domain = {}", domain.to_owned());
    }
    q
}

/// Groups rows by a key, keeping their order.
pub fn group_by<T, K: std::hash::Hash + Eq>(rows: Vec<T>, key: impl Fn(&T) -> K) -> HashMap<K, Vec<T>> {
    let mut map: HashMap<K, Vec<T>> = HashMap::new();
    for row in rows {
        map.entry(key(&row)).or_default().push(row);
    }
    map
}
