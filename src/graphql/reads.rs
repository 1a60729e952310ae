//! The read queries of SPEC §4: keyset connections and the view fields.

use async_graphql::connection::Connection;
use async_graphql::{Context, InputObject, Object, SimpleObject};
use uuid::Uuid;

use super::events::WorkUnitEvent;
use super::loaders::{self as unit_cache, UnitId};
use super::pagination::connection;
use super::types::{BlockingQuestion, WorkUnit};
use super::{Result, ledger, loaders, principal};
use crate::db::entities::{Disposition, EventType, QuestionStatus, WorkState, question, work_unit};
use crate::db::reads::{self as db_reads, CostRow, DispositionRow, QueueDepthRow};
use crate::ledger::cursor::{Cursor, List};
use crate::ledger::reads::{Page, PageArgs};

fn unit_cursor(u: &work_unit::Model) -> Cursor {
    Cursor { created_at: u.created_at, id: u.id }
}

/// A page of units as a connection, its nested relations prefetched.
async fn unit_connection(
    ctx: &Context<'_>,
    page: Page<work_unit::Model>,
    list: List,
) -> Result<Connection<String, WorkUnit>> {
    unit_cache::prefetch(ctx, loaders(ctx)?, &page.items).await?;
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
}

impl From<UnitFilter> for db_reads::UnitFilter {
    fn from(f: UnitFilter) -> Self {
        Self {
            state: f.state,
            domain: f.domain,
            disposition: f.disposition,
            claimed_by: f.claimed_by,
            external_ref_prefix: f.external_ref_prefix,
        }
    }
}

#[derive(InputObject, Default)]
pub struct EventFilter {
    pub unit_id: Option<Uuid>,
    pub types: Option<Vec<EventType>>,
    pub agent_id: Option<String>,
}

impl From<EventFilter> for db_reads::EventFilter {
    fn from(f: EventFilter) -> Self {
        Self { unit_id: f.unit_id, types: f.types.unwrap_or_default(), agent_id: f.agent_id }
    }
}

/// Open work of one domain (`v_queue_depth`).
#[derive(SimpleObject)]
pub struct QueueDepth {
    pub domain: String,
    pub ready: i64,
    pub claimed: i64,
    pub in_progress: i64,
    pub blocked: i64,
    pub verified: i64,
    /// CLAIMED or IN_PROGRESS with an expired lease.
    pub stalled: i64,
}

impl From<QueueDepthRow> for QueueDepth {
    fn from(r: QueueDepthRow) -> Self {
        let QueueDepthRow { domain, ready, claimed, in_progress, blocked, verified, stalled } = r;
        Self { domain, ready, claimed, in_progress, blocked, verified, stalled }
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

fn disposition_of(name: &str) -> Disposition {
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
    /// Units of the fleet, oldest first.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn units(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        filter: Option<UnitFilter>,
    ) -> Result<Connection<String, WorkUnit>> {
        let filter = filter.unwrap_or_default().into();
        let page = ledger(ctx).units_page(principal(ctx)?, PageArgs { first, after }, filter).await?;
        unit_connection(ctx, page, List::Units).await
    }

    /// The ledger's events, newest first.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn events(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        filter: Option<EventFilter>,
    ) -> Result<Connection<String, WorkUnitEvent>> {
        let filter = filter.unwrap_or_default().into();
        let page = ledger(ctx).events_page(principal(ctx)?, PageArgs { first, after }, filter).await?;
        Ok(connection(page, List::Events, WorkUnitEvent::cursor_of, WorkUnitEvent))
    }

    /// Blocking questions, oldest first.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn questions(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        status: Option<QuestionStatus>,
        assignee_group: Option<String>,
    ) -> Result<Connection<String, BlockingQuestion>> {
        let page =
            ledger(ctx).questions_page(principal(ctx)?, PageArgs { first, after }, status, assignee_group).await?;
        let key = |q: &question::Model| Cursor { created_at: q.created_at, id: q.id };
        Ok(connection(page, List::Questions, key, BlockingQuestion))
    }

    /// Open work per domain (`v_queue_depth`); an empty fleet gives an empty list.
    async fn queue_depth(&self, ctx: &Context<'_>, domain: Option<String>) -> Result<Vec<QueueDepth>> {
        Ok(ledger(ctx).queue_depth(principal(ctx)?, domain).await?.into_iter().map(QueueDepth::from).collect())
    }

    /// CLAIMED or IN_PROGRESS units whose lease expired (`v_stall_list`), oldest first.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn stalls(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, WorkUnit>> {
        let page = ledger(ctx).stalls_page(principal(ctx)?, PageArgs { first, after }).await?;
        unit_connection(ctx, page, List::Stalls).await
    }

    /// Cost and attempts of every unit (`v_cost_per_unit`), oldest first.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn cost_per_unit(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        domain: Option<String>,
    ) -> Result<Connection<String, CostPerUnit>> {
        let page = ledger(ctx).cost_page(principal(ctx)?, PageArgs { first, after }, domain).await?;
        let key = |r: &CostRow| Cursor { created_at: r.created_at, id: r.unit_id };
        Ok(connection(page, List::CostPerUnit, key, CostPerUnit))
    }

    /// Units that needed more than one attempt (`v_rework`), oldest first.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn rework(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, WorkUnit>> {
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

    /// Disposed units with evidence and cost (`v_disposition_detail`), oldest first.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn dispositions(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        disposition: Option<Disposition>,
        domain: Option<String>,
    ) -> Result<Connection<String, WorkUnit>> {
        let page =
            ledger(ctx).dispositions_page(principal(ctx)?, PageArgs { first, after }, disposition, domain).await?;
        unit_connection(ctx, page, List::Dispositions).await
    }
}
