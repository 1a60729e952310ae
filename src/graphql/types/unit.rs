//! `WorkUnit`: a unit of work, its relations and what its caller may do next.

use async_graphql::{Context, Object};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Attempt, BlockingQuestion, WorkUnitEvent};
use crate::contract::Surface;
use crate::db::entities::{Disposition, QuestionStatus, WorkState, work_unit};
use crate::graphql::bindings;
use crate::graphql::loaders::{self as loader, AttemptId, AttemptsOf, DisposalOf, EventsOf, QuestionsOf};
use crate::graphql::pagination::{Conn, SortOrder, TotalCount, counted_with};
use crate::graphql::{Result, ledger, loaders, principal};
use crate::ledger::cursor::List;
use crate::ledger::reads::PageArgs;
use crate::ledger::state_machine;

/// A unit of work: one claimant, one state, one permanent disposition, one cost.
pub struct WorkUnit(pub work_unit::Model);

impl WorkUnit {
    /// The unit a field returns, its selected relations loaded with it
    /// ([`loader::prefetch_returned`]).
    pub async fn returned(ctx: &Context<'_>, unit: work_unit::Model) -> WorkUnit {
        loader::prefetch_returned(ctx, std::slice::from_ref(&unit)).await;
        WorkUnit(unit)
    }

    /// [`WorkUnit::returned`] of a unit that may not be there.
    pub async fn returned_if(ctx: &Context<'_>, unit: Option<work_unit::Model>) -> Option<WorkUnit> {
        match unit {
            Some(unit) => Some(Self::returned(ctx, unit).await),
            None => None,
        }
    }

    /// [`WorkUnit::returned`] of a list a field returns.
    pub async fn returned_all(ctx: &Context<'_>, units: Vec<work_unit::Model>) -> Vec<WorkUnit> {
        loader::prefetch_returned(ctx, &units).await;
        units.into_iter().map(WorkUnit).collect()
    }
}

#[Object]
impl WorkUnit {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn fleet(&self) -> &str {
        &self.0.fleet
    }
    /// The caller's own reference (unique per fleet), e.g. a path in the legacy estate.
    async fn external_ref(&self) -> &str {
        &self.0.external_ref
    }
    async fn domain(&self) -> &str {
        &self.0.domain
    }
    async fn state(&self) -> WorkState {
        self.0.state
    }
    /// Set once, with the terminal state: DONE iff MIGRATED, ABANDONED otherwise.
    async fn disposition(&self) -> Option<Disposition> {
        self.0.disposition
    }
    async fn disposed_at(&self) -> Option<DateTime<Utc>> {
        self.0.disposed_at
    }
    /// The reason given with the dispose, if any (null until disposed).
    async fn disposition_reason(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        if self.0.disposition.is_none() {
            return Ok(None);
        }
        Ok(loaders(ctx)?.load_one(DisposalOf(self.0.id)).await?.and_then(|d| d.disposition_reason))
    }
    /// Who disposed of the unit: the holder, or the operator (null until disposed).
    async fn disposed_by(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        if self.0.disposition.is_none() {
            return Ok(None);
        }
        Ok(loaders(ctx)?.load_one(DisposalOf(self.0.id)).await?.and_then(|d| d.disposed_by))
    }
    async fn workflow_id(&self) -> Option<&str> {
        self.0.workflow_id.as_deref()
    }
    /// The agent holding the unit (kept after VERIFIED until dispose).
    async fn claimed_by(&self) -> Option<&str> {
        self.0.claimed_by.as_deref()
    }
    async fn current_attempt_id(&self) -> Option<Uuid> {
        self.0.current_attempt_id
    }
    async fn lease_expires_at(&self) -> Option<DateTime<Utc>> {
        self.0.lease_expires_at
    }
    async fn last_heartbeat_at(&self) -> Option<DateTime<Utc>> {
        self.0.last_heartbeat_at
    }
    async fn attempt_count(&self) -> i32 {
        self.0.attempt_count
    }
    /// Sum of the costs of all attempts (the database keeps it exact).
    async fn cost_cents(&self) -> i64 {
        self.0.cost_cents
    }
    async fn evidence_urls(&self) -> &[String] {
        &self.0.evidence_urls
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }
    /// CLAIMED or IN_PROGRESS with an expired lease: anyone may reclaim it.
    async fn stalled(&self, ctx: &Context<'_>) -> bool {
        state_machine::is_stale(&self.0, loader::now(ctx))
    }
    /// The attempt of the current (or last) claim.
    async fn current_attempt(&self, ctx: &Context<'_>) -> Result<Option<Attempt>> {
        let Some(id) = self.0.current_attempt_id else { return Ok(None) };
        Ok(loaders(ctx)?.load_one(AttemptId(id)).await?.map(Attempt))
    }
    /// Every claim of this unit, oldest first.
    async fn attempts(&self, ctx: &Context<'_>) -> Result<Vec<Attempt>> {
        let found = loaders(ctx)?.load_one(AttemptsOf(self.0.id)).await?.unwrap_or_default();
        Ok(found.into_iter().map(Attempt).collect())
    }
    /// Every blocking question of this unit, newest first; answers stay for whoever works it next.
    async fn questions(&self, ctx: &Context<'_>) -> Result<Vec<BlockingQuestion>> {
        let found = loaders(ctx)?.load_one(QuestionsOf(self.0.id)).await?.unwrap_or_default();
        Ok(found.into_iter().map(BlockingQuestion).collect())
    }
    /// This unit's events, newest first unless `order: ASC` (its history in order).
    #[graphql(complexity = "crate::graphql::pagination::page_cost(first, child_complexity)")]
    async fn events(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        order: Option<SortOrder>,
    ) -> Result<Conn<WorkUnitEvent>> {
        let newest_first = SortOrder::newest_first(order, SortOrder::Desc);
        let (first, after) = ledger(ctx).unit_events_args(&PageArgs { first, after }, newest_first)?;
        let key = EventsOf { unit: self.0.id, first, after, newest_first };
        let (mut rows, floor) = loaders(ctx)?.load_one(key).await?.unwrap_or_default();
        let has_next = rows.len() > first as usize;
        rows.truncate(first as usize);
        let total = TotalCount::EventsOf(self.0.id);
        let list = List::events(newest_first);
        let cursor = |e: &_| WorkUnitEvent::cursor_text(e, Some(floor), list);
        Ok(counted_with(rows, has_next, total, cursor, WorkUnitEvent::listed(floor)))
    }
    /// The question the unit is blocked on, if any.
    async fn open_question(&self, ctx: &Context<'_>) -> Result<Option<BlockingQuestion>> {
        let found = loaders(ctx)?.load_one(QuestionsOf(self.0.id)).await?.unwrap_or_default();
        Ok(found.into_iter().find(|q| q.status == QuestionStatus::Open).map(BlockingQuestion))
    }
    /// What the caller may do next: as mutation call shapes (`transition(to: VERIFIED, evidenceUrl)`), or
    /// in the language of another door to the same operations (`surface: MCP` gives tool names,
    /// `surface: CLI` the `work-ledger agent` verbs). Only what the caller's token may do.
    async fn legal_actions(&self, ctx: &Context<'_>, surface: Option<Surface>) -> Result<Vec<String>> {
        let surface = surface.unwrap_or_default();
        let actions = state_machine::next_actions(&self.0, principal(ctx)?, Utc::now());
        Ok(actions.into_iter().filter_map(|action| bindings::render_action(action, surface)).collect())
    }
}
