//! The read queries of SPEC §4: keyset connections and the view fields.

use async_graphql::{Context, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::loaders::{self as unit_cache, UnitId};
use super::pagination::{Conn, SortOrder, TotalCount, connection, counted_with, unit_cursor};
use super::stalls::{StallConnection, stall_connection};
use super::types::{BlockingQuestion, WorkUnit, WorkUnitEvent};
use super::{Result, ledger, loaders, principal};
use crate::contract::{Operation, READER, Root, SCALARS, TRIAGE, op};
use crate::db::entities::{Disposition, EventType, QuestionStatus, WorkState, question, work_unit};
use crate::db::reads::{self as db_reads, CostRow, DispositionRow, QueueDepthRow};
use crate::ledger::cursor::{Cursor, List};
use crate::ledger::reads::{Page, PageArgs, QuestionFilter, Range};

/// A page of units as a connection, its nested relations prefetched.
async fn unit_connection(ctx: &Context<'_>, page: Page<work_unit::Model>, list: List) -> Result<Conn<WorkUnit>> {
    unit_cache::prefetch(ctx, &page.items).await;
    Ok(connection(page, list, unit_cursor, WorkUnit))
}

#[derive(InputObject, Default)]
pub struct UnitFilter {
    pub state: Option<WorkState>,
    pub domain: Option<String>,
    pub disposition: Option<Disposition>,
    pub claimed_by: Option<String>,
    /// Units whose externalRef starts with this text (a prefix, not a pattern).
    pub external_ref_prefix: Option<String>,
    /// CLAIMED or IN_PROGRESS with an expired lease (true), or every other unit (false).
    pub stalled: Option<bool>,
    /// Registered at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Registered before this time.
    pub until: Option<DateTime<Utc>>,
}

impl From<UnitFilter> for db_reads::UnitFilter {
    fn from(f: UnitFilter) -> Self {
        Self {
            state: f.state,
            domain: f.domain,
            disposition: f.disposition,
            claimed_by: f.claimed_by,
            external_ref_prefix: f.external_ref_prefix,
            stalled: f.stalled,
            created: Range { from: f.from, until: f.until },
        }
    }
}

#[derive(InputObject, Default)]
pub struct EventFilter {
    pub unit_id: Option<Uuid>,
    pub types: Option<Vec<EventType>>,
    pub agent_id: Option<String>,
    /// Written at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Written before this time.
    pub until: Option<DateTime<Utc>>,
}

impl From<EventFilter> for db_reads::EventFilter {
    fn from(f: EventFilter) -> Self {
        Self {
            unit_id: f.unit_id,
            types: f.types.unwrap_or_default(),
            agent_id: f.agent_id,
            created: Range { from: f.from, until: f.until },
        }
    }
}

/// A time range `[from, until)`; a missing bound is open.
#[derive(InputObject, Default)]
pub struct TimeRange {
    /// At or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Before this time.
    pub until: Option<DateTime<Utc>>,
}

impl From<Option<TimeRange>> for Range {
    fn from(r: Option<TimeRange>) -> Self {
        let r = r.unwrap_or_default();
        Self { from: r.from, until: r.until }
    }
}

/// Units and their cost per disposition (`v_disposition_summary`).
#[derive(SimpleObject)]
pub struct DispositionCount {
    pub disposition: Disposition,
    pub count: i64,
    pub cost_cents: i64,
}

/// A unit's cost and attempts (`v_cost_per_unit`).
pub struct CostPerUnit(CostRow);

#[Object]
impl CostPerUnit {
    async fn unit(&self, ctx: &Context<'_>) -> Result<Option<WorkUnit>> {
        Ok(loaders(ctx)?.load_one(UnitId(self.0.unit_id)).await?.map(WorkUnit))
    }
    async fn cost_cents(&self) -> i64 {
        self.0.cost_cents
    }
    async fn attempt_count(&self) -> i32 {
        self.0.attempt_count
    }
}

pub fn disposition_of(name: &str) -> Disposition {
    match name {
        "MIGRATED" => Disposition::Migrated,
        "DROPPED" => Disposition::Dropped,
        "DEFERRED" => Disposition::Deferred,
        _ => Disposition::Dead,
    }
}

#[derive(Default)]
pub struct ReadQuery;

#[Object]
impl ReadQuery {
    /// The server's clock: every age in a response (`stalledForSeconds`,
    /// `openForSeconds`) is measured up to this instant.
    async fn server_time(&self, ctx: &Context<'_>) -> DateTime<Utc> {
        unit_cache::now(ctx)
    }

    /// Units of the fleet, oldest first unless `order: DESC`.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn units(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        filter: Option<UnitFilter>,
        order: Option<SortOrder>,
    ) -> Result<Conn<WorkUnit>> {
        let filter = filter.unwrap_or_default().into();
        let newest_first = SortOrder::newest_first(order, SortOrder::Asc);
        let page = ledger(ctx).units_page(principal(ctx)?, PageArgs { first, after }, filter, newest_first).await?;
        unit_connection(ctx, page, List::units(newest_first)).await
    }

    /// The ledger's events, newest first unless `order: ASC`.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn events(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        filter: Option<EventFilter>,
        order: Option<SortOrder>,
    ) -> Result<Conn<WorkUnitEvent>> {
        let filter = filter.unwrap_or_default().into();
        let newest_first = SortOrder::newest_first(order, SortOrder::Desc);
        let (page, floor) =
            ledger(ctx).events_page(principal(ctx)?, PageArgs { first, after }, filter, newest_first).await?;
        let list = List::events(newest_first);
        let cursor = |e: &_| WorkUnitEvent::cursor_text(e, Some(floor), list);
        Ok(counted_with(page.items, page.has_next, TotalCount::List(page.total), cursor, WorkUnitEvent::listed(floor)))
    }

    /// Blocking questions, oldest first; `asked` bounds when they were asked.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn questions(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        status: Option<QuestionStatus>,
        assignee_group: Option<String>,
        asked: Option<TimeRange>,
    ) -> Result<Conn<BlockingQuestion>> {
        let filter = QuestionFilter { status, assignee_group, created: asked.into() };
        let page = ledger(ctx).questions_page(principal(ctx)?, PageArgs { first, after }, filter).await?;
        let key = |q: &question::Model| Cursor { created_at: q.created_at, id: q.id };
        Ok(connection(page, List::Questions, key, BlockingQuestion))
    }

    /// The work of each domain (`v_queue_depth`): its open units by state and its
    /// finished ones (`done`, `disposed`), for every domain with units, finished
    /// ones too; an empty fleet gives an empty list, an unknown `domain` no row.
    async fn queue_depth(&self, ctx: &Context<'_>, domain: Option<String>) -> Result<Vec<QueueDepthRow>> {
        Ok(ledger(ctx).queue_depth(principal(ctx)?, domain).await?)
    }

    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    /// CLAIMED or IN_PROGRESS units whose lease expired (`v_stall_list`), oldest
    /// first; each edge says who held the unit, since when, and for how long.
    async fn stalls(&self, ctx: &Context<'_>, first: Option<i32>, after: Option<String>) -> Result<StallConnection> {
        let page = ledger(ctx).stalls_page(principal(ctx)?, PageArgs { first, after }).await?;
        unit_cache::prefetch(ctx, &page.items).await;
        Ok(stall_connection(ctx, page))
    }

    /// Cost and attempts of every unit (`v_cost_per_unit`), oldest first.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn cost_per_unit(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        domain: Option<String>,
    ) -> Result<Conn<CostPerUnit>> {
        let page = ledger(ctx).cost_page(principal(ctx)?, PageArgs { first, after }, domain).await?;
        let key = |r: &CostRow| Cursor { created_at: r.created_at, id: r.unit_id };
        Ok(connection(page, List::CostPerUnit, key, CostPerUnit))
    }

    /// Units that needed more than one attempt (`v_rework`), oldest first.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn rework(&self, ctx: &Context<'_>, first: Option<i32>, after: Option<String>) -> Result<Conn<WorkUnit>> {
        let page = ledger(ctx).rework_page(principal(ctx)?, PageArgs { first, after }).await?;
        unit_connection(ctx, page, List::Rework).await
    }

    /// Count and cost per disposition (`v_disposition_summary`); every disposition
    /// is listed, with zeros when none.
    async fn disposition_summary(&self, ctx: &Context<'_>, domain: Option<String>) -> Result<Vec<DispositionCount>> {
        let rows = ledger(ctx).disposition_summary(principal(ctx)?, domain).await?;
        Ok(rows
            .into_iter()
            .map(|r: DispositionRow| DispositionCount {
                disposition: disposition_of(&r.disposition),
                count: r.units,
                cost_cents: r.cost_cents,
            })
            .collect())
    }

    /// Disposed units with evidence and cost (`v_disposition_detail`), oldest
    /// first; `disposed` bounds when they were disposed.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn dispositions(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        disposition: Option<Disposition>,
        domain: Option<String>,
        disposed: Option<TimeRange>,
    ) -> Result<Conn<WorkUnit>> {
        let args = PageArgs { first, after };
        let page = ledger(ctx).dispositions_page(principal(ctx)?, args, disposition, domain, disposed.into()).await?;
        unit_connection(ctx, page, List::Dispositions).await
    }
}

const QUESTIONS: &str = "{ totalCount pageInfo { hasNextPage endCursor } nodes { id unitId question status \
    assigneeGroup askedBy createdAt openForSeconds similarAnswered { id question answer answeredBy answeredAt } } }";

/// These reads' bindings on MCP ([`crate::contract`]).
pub const BINDINGS: &[Operation] = &[
    Operation {
        tool: Some("open_questions"),
        preset: &[("status", "OPEN")],
        selection: QUESTIONS,
        result: "questions",
        note: "Here: OPEN questions only, oldest first.",
        ..op("questions", Root::Query, TRIAGE)
    },
    Operation {
        tool: Some("queue_depth"),
        selection: SCALARS,
        result: "queueDepth",
        ..op("queueDepth", Root::Query, READER)
    },
];
