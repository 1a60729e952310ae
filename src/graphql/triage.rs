//! The triage desk's read: distinct open questions, most-waited first, so
//! that one answer (`unblock(alsoAnswerSimilar: true)`) can serve a group.

use async_graphql::{Context, Object, SimpleObject};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Result, ledger, principal};
use crate::contract::{Operation, Root, TRIAGE, op};
use crate::db::questions::OpenGroup;

#[derive(Default)]
pub struct TriageQuery;

/// Open questions with the same normalised text (case, white space and
/// trailing punctuation folded): one answer serves them all.
#[derive(SimpleObject)]
pub struct QuestionGroup {
    /// The text as its first asker wrote it.
    question: String,
    /// How many units wait on it.
    waiting: i64,
    oldest_asked_at: DateTime<Utc>,
    /// The group's open questions, oldest first: answer the first with `alsoAnswerSimilar: true`.
    question_ids: Vec<Uuid>,
    /// The blocked units, in the same order.
    unit_ids: Vec<Uuid>,
    /// Questions with this text were answered before (`BlockingQuestion.similarAnswered` shows them).
    answered_before: bool,
}

impl From<OpenGroup> for QuestionGroup {
    fn from(g: OpenGroup) -> Self {
        Self {
            question: g.question,
            waiting: g.waiting,
            oldest_asked_at: g.oldest_asked_at,
            question_ids: g.question_ids,
            unit_ids: g.unit_ids,
            answered_before: g.answered_before,
        }
    }
}

#[Object]
impl TriageQuery {
    /// The fleet's OPEN questions grouped by normalised text, most-waited first (then the oldest), at most
    /// `first` groups (default 100, at most 500); `assigneeGroup` keeps one triage group's questions.
    async fn open_question_groups(
        &self,
        ctx: &Context<'_>,
        assignee_group: Option<String>,
        first: Option<i32>,
    ) -> Result<Vec<QuestionGroup>> {
        let groups = ledger(ctx).open_question_groups(principal(ctx)?, assignee_group, first).await?;
        Ok(groups.into_iter().map(QuestionGroup::from).collect())
    }
}

/// `openQuestionGroups`' binding on MCP ([`crate::contract`]).
pub const BINDINGS: &[Operation] = &[Operation {
    tool: Some("open_question_groups"),
    selection: "{ question waiting oldestAskedAt questionIds unitIds answeredBefore }",
    result: "groups",
    note: "Answer a group at once: answer_question with its first questionId and `alsoAnswerSimilar: true`.",
    ..op("openQuestionGroups", Root::Query, TRIAGE)
}];
