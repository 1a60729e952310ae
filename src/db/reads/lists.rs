//! The filtered lists of the read API (`units`, `events`, `questions`, and
//! units listed by a view), as queries the caller pages.

use sea_orm::{ActiveEnum, DatabaseTransaction, DbErr, EntityTrait};
use uuid::Uuid;

use super::query::{Cursor, Query, Range};
use crate::db::entities::{Disposition, EventType, QuestionStatus, WorkState, event, question};
use crate::db::events::EVENT_COLUMNS;
use crate::db::units::UNIT_COLUMNS;

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
const STALLED: &str = "(u.state = ANY (ledger_working_states()) AND u.lease_expires_at < now())";

/// `units`: oldest first, filtered.
pub fn units(fleet: &str, filter: &UnitFilter) -> Query {
    let mut q = Query::new(&format!("SELECT {UNIT_COLUMNS} FROM work_units u WHERE u.fleet = "));
    let p = q.bind(fleet);
    q.push(&p);
    by_group(&mut q, "u", filter);
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

/// The number of a fleet's units as the unit totals count them (migration
/// 0018): the `totalCount` of a list whose every condition is on a column of
/// `v_unit_totals`, exact and read from a few hundred rows at any size.
/// Conditions on the columns of `t` narrow it.
pub fn counted_by_totals(fleet: &str) -> Query {
    let mut q = Query::new("SELECT coalesce(sum(t.units), 0)::bigint AS n FROM v_unit_totals t WHERE t.fleet = ");
    let p = q.bind(fleet);
    q.push(&p);
    q
}

/// The `totalCount` of `units(filter)` from the unit totals, when the filter
/// names only state, domain and disposition (else the rows are counted).
pub fn units_counted_by_totals(fleet: &str, filter: &UnitFilter) -> Option<Query> {
    let by_rows = filter.claimed_by.is_some()
        || filter.external_ref_prefix.is_some()
        || filter.stalled.is_some()
        || filter.created.from.is_some()
        || filter.created.until.is_some();
    if by_rows {
        return None;
    }
    let mut q = counted_by_totals(fleet);
    by_group(&mut q, "t", filter);
    Some(q)
}

/// The filter's conditions on the columns a unit and its group share
/// (state, domain, disposition), on `alias`.
fn by_group(q: &mut Query, alias: &str, filter: &UnitFilter) {
    if let Some(state) = filter.state {
        q.and(&format!("{alias}.state = {{}}::work_state"), state.as_sql());
    }
    if let Some(domain) = &filter.domain {
        q.and(&format!("{alias}.domain = {{}}"), domain.clone());
    }
    if let Some(disposition) = filter.disposition {
        q.and(&format!("{alias}.disposition = {{}}::disposition"), disposition.as_sql());
    }
}

/// Units listed by one of the views (`v_stall_list`, `v_rework`,
/// `v_disposition_detail`): their ids and creation times, to be paged by
/// [`view_page`] (and counted as they are).
pub fn units_in_view(fleet: &str, view: &str) -> Query {
    let mut q = Query::new(&format!("SELECT v.unit_id, v.created_at FROM {view} v WHERE v.fleet = "));
    let p = q.bind(fleet);
    q.push(&p);
    q
}

/// `dispositions`, to be paged by [`view_page`]: the units of
/// `v_disposition_detail`, filtered. Over a range of `disposed_at`, the
/// range's disposals are read first (from `work_units_disposed_at_idx`
/// alone) and only then sorted: the fence (`OFFSET 0`) keeps the planner
/// from walking the fleet's whole disposed history in creation order to
/// filter it by date, which it believes cheap because it takes disposal and
/// creation times for independent. That costs what the range holds.
pub fn dispositions(fleet: &str, disposed: &Range, disposition: Option<&str>, domain: Option<&str>) -> Query {
    let mut q = units_in_view(fleet, "v_disposition_detail");
    q.range("v.disposed_at", disposed);
    if let Some(disposition) = disposition {
        q.and("v.disposition = {}::disposition", disposition.to_owned());
    }
    if let Some(domain) = domain {
        q.and("v.domain = {}", domain.to_owned());
    }
    if disposed.from.is_some() || disposed.until.is_some() {
        q = q.around("SELECT v.unit_id, v.created_at FROM (", " OFFSET 0) AS v WHERE true");
    }
    q
}

/// One page of a view's units ([`units_in_view`], [`dispositions`]) after
/// `cursor`, whole. The page is cut from the view alone, in the units' order
/// (its own index), and only its units are read from the table: joined to the
/// table before paging, the planner hashed the view against every unit of
/// the fleet (250 ms for `rework`, 4.7 s for 30 days of `dispositions` at
/// 500,000 units, issue 27).
pub fn view_page(mut q: Query, cursor: Option<Cursor>, limit: i32) -> Query {
    q.page_on("v", "unit_id", cursor, false, limit);
    q.around(
        &format!("SELECT {UNIT_COLUMNS} FROM ("),
        ") AS p JOIN work_units u ON u.id = p.unit_id ORDER BY u.created_at, u.id",
    )
}

/// `events`: newest first, filtered.
pub fn events(fleet: &str, filter: &EventFilter) -> Query {
    let mut q = Query::new(&format!("SELECT {EVENT_COLUMNS} FROM work_unit_events e WHERE e.fleet = "));
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(unit) = filter.unit_id {
        q.and("e.unit_id = {}", unit);
    }
    of_types(&mut q, "e", &filter.types);
    if let Some(agent) = &filter.agent_id {
        q.and("e.agent_id = {}", agent.clone());
    }
    q.range("e.created_at", &filter.created);
    q
}

/// The `totalCount` of `events(filter)` from the event totals, when the
/// filter names no unit: per type and agent
/// without a time range; per UTC day and type with one and no agent
/// (`events_counted_in`, 0031: the whole days from the totals, the part of a
/// day cut at each end from the rows). Else the rows are counted.
pub fn events_counted_by_totals(fleet: &str, filter: &EventFilter) -> Option<Query> {
    let ranged = filter.created.from.is_some() || filter.created.until.is_some();
    if filter.unit_id.is_some() || (ranged && filter.agent_id.is_some()) {
        return None;
    }
    if ranged {
        let mut q = Query::new("SELECT events_counted_in(");
        let types: Vec<String> = filter.types.iter().map(|t| t.to_value()).collect();
        let args = [fleet.into(), types.into(), filter.created.from.into(), filter.created.until.into()]
            .map(|v: sea_orm::Value| q.bind(v))
            .join(", ");
        q.push(&format!("{args}) AS n"));
        return Some(q);
    }
    // The projection's rows and its tail (`event_totals_tail`, projections.sql).
    let mut q = Query::new(
        "SELECT coalesce(sum(t.events), 0)::bigint AS n FROM (SELECT e.fleet, e.event_type, e.agent_id, e.events FROM event_totals e WHERE e.fleet = ",
    );
    let p = q.bind(fleet);
    q.push(&format!("{p} UNION ALL SELECT e.fleet, e.event_type, e.agent_id, e.events FROM event_totals_tail({p}) e) t WHERE t.fleet = {p}"));
    of_types(&mut q, "t", &filter.types);
    if let Some(agent) = &filter.agent_id {
        q.and("t.agent_id = {}", agent.clone());
    }
    Some(q)
}

/// Events of any of `types` (none: every type), on `alias`.
fn of_types(q: &mut Query, alias: &str, types: &[EventType]) {
    if !types.is_empty() {
        let names: Vec<String> = types.iter().map(|t| t.to_value()).collect();
        q.and(&format!("{alias}.event_type::text = ANY({{}}::text[])"), names);
    }
}

pub async fn events_page(tx: &DatabaseTransaction, q: Query) -> Result<Vec<event::Model>, DbErr> {
    event::Entity::find().from_raw_sql(q.statement()).all(tx).await
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
    question::Entity::find().from_raw_sql(q.statement()).all(tx).await
}
