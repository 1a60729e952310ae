//! `WorkUnitEvent`: one row of the append-only ledger, and its cursor.

use async_graphql::{Context, Json, Object};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::WorkUnit;
use crate::db::entities::{EventType, WorkState, event};
use crate::graphql::loaders::{AttemptId, UnitId};
use crate::graphql::{Result, loaders};
use crate::ledger::cursor::{Cursor, EventCursor, List};

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
