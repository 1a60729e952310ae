//! `WorkUnitEvent`: one row of the append-only ledger.

use async_graphql::{Context, Json, Object};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::loaders::{AttemptId, UnitId};
use super::types::WorkUnit;
use super::{Result, loaders};
use crate::db::entities::{EventType, WorkState, event};
use crate::ledger::cursor::{Cursor, CursorText, List};

pub struct WorkUnitEvent(pub event::Model);

impl WorkUnitEvent {
    pub fn cursor_of(e: &event::Model) -> Cursor {
        Cursor { created_at: e.created_at, id: e.id }
    }
}

#[Object]
impl WorkUnitEvent {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    /// Opaque position of this event, for `events(after:)` newest first and
    /// `ledgerEvents(after:)` (an edge's `cursor` follows the list's order).
    async fn cursor(&self) -> String {
        Self::cursor_of(&self.0).encode(List::Events)
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
