//! `BlockingQuestion`: what an agent asked, and its answer.

use async_graphql::{Context, Object};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{WorkUnit, seconds_between};
use crate::db::entities::{QuestionStatus, question};
use crate::graphql::loaders::{self as loader, SimilarAnsweredTo, UnitId};
use crate::graphql::{Result, loaders};

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
