//! `Attempt`: one claim of a unit, and how it ended.

use async_graphql::{Context, Object};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::WorkUnit;
use crate::db::entities::{AttemptOutcome, attempt};
use crate::db::reads::AttemptEndRow;
use crate::graphql::loaders::{AttemptEndOf, UnitId};
use crate::graphql::{Result, loaders};

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
