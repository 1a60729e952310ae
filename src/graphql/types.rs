//! GraphQL object types over the entity models.

use async_graphql::{Context, Json, Object};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::loaders::{
    self as loader, AttemptEndOf, AttemptId, AttemptsOf, DisposalOf, EventsOf, QuestionsOf, SimilarAnsweredTo, UnitId,
};
use super::pagination::{Conn, SortOrder, TotalCount, counted_with};
use super::{Result, ledger, loaders, principal};
use crate::auth::Principal;
use crate::contract::{self, Surface};
use crate::db::entities::{
    AttemptOutcome, Disposition, EventType, QuestionStatus, WorkState, attempt, event, question, work_unit,
};
use crate::db::reads::AttemptEndRow;
use crate::ledger::cursor::{Cursor, EventCursor, List};
use crate::ledger::reads::PageArgs;
use crate::ledger::state_machine;

/// Whole seconds from `since` to `until` (never negative).
pub fn seconds_between(since: DateTime<Utc>, until: DateTime<Utc>) -> i64 {
    (until - since).num_seconds().max(0)
}

pub struct PrincipalObject(pub Principal);

/// The caller: what its token allows, in which fleet.
#[Object(name = "Principal")]
impl PrincipalObject {
    async fn fleet(&self) -> &str {
        &self.0.fleet
    }
    /// The token's name: the agent id recorded on claims and events.
    async fn name(&self) -> &str {
        &self.0.name
    }
    /// Explicit permissions, e.g. `units:claim`; `grants` says what each allows.
    async fn permissions(&self) -> Vec<&'static str> {
        self.0.permissions.iter().map(|p| p.as_str()).collect()
    }
    /// Each permission of the token with what it allows.
    async fn grants(&self) -> Vec<Grant> {
        self.0.permissions.iter().map(|p| Grant { permission: p.as_str(), allows: p.allows() }).collect()
    }
    /// The unit you hold: your live claim (CLAIMED, IN_PROGRESS or BLOCKED), at most one.
    /// Null when you hold none and may `claimNext`.
    async fn held_unit(&self, ctx: &Context<'_>) -> Result<Option<WorkUnit>> {
        Ok(WorkUnit::returned_if(ctx, ledger(ctx).held_unit(&self.0).await?).await)
    }
    /// VERIFIED units you verified and still have to `dispose` (MIGRATED). They do not
    /// count as held: you may claim other work meanwhile.
    async fn awaiting_disposition(&self, ctx: &Context<'_>) -> Result<Vec<WorkUnit>> {
        Ok(WorkUnit::returned_all(ctx, ledger(ctx).awaiting_disposition(&self.0).await?).await)
    }
}

/// A permission and what it allows.
#[derive(async_graphql::SimpleObject)]
pub struct Grant {
    /// Its name, e.g. `units:claim`.
    pub permission: &'static str,
    /// What it lets the token do.
    pub allows: &'static str,
}

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
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
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
        Ok(actions.into_iter().filter_map(|action| contract::render_action(action, surface)).collect())
    }
}

/// One claim of a unit by one agent.
pub struct Attempt(pub attempt::Model);

impl Attempt {
    /// How the attempt ended (the event that ended it); none while it runs.
    async fn end(&self, ctx: &Context<'_>) -> Result<Option<AttemptEndRow>> {
        if self.0.outcome.is_none() {
            return Ok(None);
        }
        loaders(ctx)?.load_one(AttemptEndOf(self.0.id)).await
    }
}

#[Object]
impl Attempt {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn unit_id(&self) -> Uuid {
        self.0.unit_id
    }
    /// 1-based, dense per unit.
    async fn attempt_no(&self) -> i32 {
        self.0.attempt_no
    }
    async fn agent_id(&self) -> &str {
        &self.0.agent_id
    }
    /// Null while the attempt runs.
    async fn outcome(&self) -> Option<AttemptOutcome> {
        self.0.outcome
    }
    async fn cost_cents(&self) -> i64 {
        self.0.cost_cents
    }
    async fn evidence_url(&self) -> Option<&str> {
        self.0.evidence_url.as_deref()
    }
    async fn started_at(&self) -> DateTime<Utc> {
        self.0.started_at
    }
    async fn ended_at(&self) -> Option<DateTime<Utc>> {
        self.0.ended_at
    }
    /// Why the attempt ended: the reason given by the write that ended it (a
    /// release or a dispose), or for a SUPERSEDED one that its lease expired
    /// and who reclaimed the unit; null while it runs, and when no reason was
    /// given (a verification, a release without a reason).
    async fn end_reason(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        let Some(end) = self.end(ctx).await? else { return Ok(None) };
        if let (None, true, Some(by)) = (&end.end_reason, end.reclaimed(), &end.ended_by) {
            return Ok(Some(format!("the lease expired and {by} reclaimed the unit")));
        }
        Ok(end.end_reason)
    }
    /// Whose write ended the attempt: its agent (verify, release), or whoever
    /// disposed of the unit; null while it runs and for a SUPERSEDED attempt,
    /// which its expired lease ended (`reclaimedBy` says who took the unit).
    async fn ended_by(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        Ok(self.end(ctx).await?.filter(|end| !end.reclaimed()).and_then(|end| end.ended_by))
    }
    /// For a SUPERSEDED attempt, the agent whose claim took the unit after
    /// the lease expired; null otherwise.
    async fn reclaimed_by(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        Ok(self.end(ctx).await?.filter(AttemptEndRow::reclaimed).and_then(|end| end.ended_by))
    }
    async fn unit(&self, ctx: &Context<'_>) -> Result<Option<WorkUnit>> {
        Ok(loaders(ctx)?.load_one(UnitId(self.0.unit_id)).await?.map(WorkUnit))
    }
}

/// A question an agent needs answered before it can go on.
pub struct BlockingQuestion(pub question::Model);

#[Object]
impl BlockingQuestion {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn unit_id(&self) -> Uuid {
        self.0.unit_id
    }
    async fn attempt_id(&self) -> Uuid {
        self.0.attempt_id
    }
    async fn question(&self) -> &str {
        &self.0.question
    }
    async fn status(&self) -> QuestionStatus {
        self.0.status
    }
    async fn answer(&self) -> Option<&str> {
        self.0.answer.as_deref()
    }
    async fn assignee_group(&self) -> &str {
        &self.0.assignee_group
    }
    async fn asked_by(&self) -> &str {
        &self.0.asked_by
    }
    async fn answered_by(&self) -> Option<&str> {
        self.0.answered_by.as_deref()
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    async fn answered_at(&self) -> Option<DateTime<Utc>> {
        self.0.answered_at
    }
    async fn cancelled_at(&self) -> Option<DateTime<Utc>> {
        self.0.cancelled_at
    }
    /// Whole seconds the question has been open (until `serverTime`), or was
    /// open (until answered or cancelled).
    async fn open_for_seconds(&self, ctx: &Context<'_>) -> i64 {
        let closed = self.0.answered_at.or(self.0.cancelled_at);
        seconds_between(self.0.created_at, closed.unwrap_or_else(|| loader::now(ctx)))
    }
    async fn unit(&self, ctx: &Context<'_>) -> Result<Option<WorkUnit>> {
        Ok(loaders(ctx)?.load_one(UnitId(self.0.unit_id)).await?.map(WorkUnit))
    }
    /// Answered questions of the fleet with the same normalised text (case, white space and trailing
    /// punctuation folded), newest answer first, at most 5: the answer may already be here. Read it before
    /// waiting; nothing is unblocked by it automatically.
    async fn similar_answered(&self, ctx: &Context<'_>) -> Result<Vec<BlockingQuestion>> {
        let found = loaders(ctx)?.load_one(SimilarAnsweredTo(self.0.id)).await?.unwrap_or_default();
        Ok(found.into_iter().map(BlockingQuestion).collect())
    }
}

/// An event (one row of the append-only ledger), and the floor of the list
/// it was read through (`None` when a stream delivered it); see [`EventCursor`].
pub struct WorkUnitEvent(pub event::Model, pub Option<i64>);

impl WorkUnitEvent {
    /// An event read through a list whose floor was `floor`.
    pub fn listed(floor: i64) -> impl Fn(event::Model) -> Self {
        move |e| Self(e, Some(floor))
    }

    pub fn streamed(e: event::Model) -> Self {
        Self(e, None)
    }

    /// The cursor of `e` in `list` (an event list, in its order).
    pub fn cursor_text(e: &event::Model, floor: Option<i64>, list: List) -> String {
        EventCursor { at: Cursor { created_at: e.created_at, id: e.id }, floor, list }.encode()
    }
}

/// The fields of [`WorkUnitEvent`] that read nothing but the event (no
/// context: no loader, no permission, no clock): a selection of these alone
/// resolves to the same payload for every subscriber, which `ledgerEvents`
/// resolves once per process. A field added to the type joins this list
/// only if that holds for it.
pub const EVENT_OWN_FIELDS: [&str; 13] = [
    "__typename",
    "id",
    "cursor",
    "unitId",
    "attemptId",
    "eventType",
    "fromState",
    "toState",
    "agentId",
    "costDeltaCents",
    "detail",
    "idempotencyKey",
    "createdAt",
];

#[Object]
impl WorkUnitEvent {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    /// Opaque position of this event, for `events(after:)` and `ledgerEvents(after:)`.
    /// A `ledgerEvents` stream resumed from the cursor of an event it delivered
    /// continues exactly after that event. One resumed from a cursor read through
    /// a list (`events`, `WorkUnit.events`) starts early enough that no event of
    /// a transaction still open when the list was read is skipped, and so may
    /// repeat events the list already showed; ids are stable for de-duplication.
    /// (An edge's `cursor` follows its list's order; this one pages newest first.)
    async fn cursor(&self) -> String {
        Self::cursor_text(&self.0, self.1, List::Events)
    }
    async fn unit_id(&self) -> Uuid {
        self.0.unit_id
    }
    async fn attempt_id(&self) -> Option<Uuid> {
        self.0.attempt_id
    }
    /// The number of that attempt (1-based per unit).
    async fn attempt_no(&self, ctx: &Context<'_>) -> Result<Option<i32>> {
        let Some(id) = self.0.attempt_id else { return Ok(None) };
        Ok(loaders(ctx)?.load_one(AttemptId(id)).await?.map(|a| a.attempt_no))
    }
    async fn event_type(&self) -> EventType {
        self.0.event_type
    }
    async fn from_state(&self) -> Option<WorkState> {
        self.0.from_state
    }
    async fn to_state(&self) -> Option<WorkState> {
        self.0.to_state
    }
    /// Who made the change (the token's name).
    async fn agent_id(&self) -> Option<&str> {
        self.0.agent_id.as_deref()
    }
    async fn cost_delta_cents(&self) -> i64 {
        self.0.cost_delta_cents
    }
    /// Details of the change, e.g. the evidence URL of a verification.
    async fn detail(&self) -> Json<serde_json::Value> {
        Json(self.0.detail.clone())
    }
    /// The idempotency key of the write that appended this event, if any.
    async fn idempotency_key(&self) -> Option<&str> {
        self.0.source_event_id.as_deref()
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    async fn unit(&self, ctx: &Context<'_>) -> Result<Option<WorkUnit>> {
        Ok(loaders(ctx)?.load_one(UnitId(self.0.unit_id)).await?.map(WorkUnit))
    }
}
