//! The triage desk's reads (SPEC §7): one answer for the same question.
//! Questions compare by their normalised text (case, white space and
//! trailing punctuation folded, in SQL: `ledger_question_norm`).

use uuid::Uuid;

use super::{Ledger, LedgerError, validate};
use crate::auth::Principal;
use crate::db::entities::question;
use crate::db::questions::{self, OpenGroup};

impl Ledger {
    /// For each of `questions`: answered questions with the same text, newest first, at most 5.
    pub async fn similar_answered(
        &self,
        who: &Principal,
        questions: Vec<Uuid>,
    ) -> Result<Vec<(Uuid, question::Model)>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(questions::similar_answered(tx, &questions).await?) })).await
    }

    /// The open questions grouped by text, most-waited first; a fleet-wide scan.
    pub async fn open_question_groups(
        &self,
        who: &Principal,
        assignee_group: Option<String>,
        first: Option<i32>,
    ) -> Result<Vec<OpenGroup>, LedgerError> {
        validate::filter("assigneeGroup", assignee_group.as_deref())?;
        let limit = i64::from(validate::first(first)?);
        self.scan(who, move |tx| Box::pin(async move { Ok(questions::open_groups(tx, assignee_group, limit).await?) }))
            .await
    }
}
