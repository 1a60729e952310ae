//! The triage desk's reads: questions compared by their normalised text
//! (`blocking_questions.norm`).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::{DatabaseTransaction, DbErr, EntityTrait, FromQueryResult};
use uuid::Uuid;

use crate::db::entities::question;
use crate::db::stmt;

const COLUMNS: &str = "q.id, q.fleet, q.unit_id, q.attempt_id, q.question, q.status::text AS status, q.answer, \
    q.assignee_group, q.asked_by, q.answered_by, q.created_at, q.answered_at, q.cancelled_at";

/// At most this many answered questions are shown beside one question.
pub const SIMILAR_ANSWERED: i64 = 5;

#[derive(FromQueryResult)]
struct Pair {
    for_id: Uuid,
    id: Uuid,
}

/// For each of `questions`: the answered questions of its fleet with the
/// same normalised text, newest answer first, at most [`SIMILAR_ANSWERED`].
pub async fn similar_answered(
    tx: &DatabaseTransaction,
    questions: &[Uuid],
) -> Result<Vec<(Uuid, question::Model)>, DbErr> {
    let sql = format!(
        "SELECT k.id AS for_id, s.id FROM blocking_questions k
           CROSS JOIN LATERAL (
               SELECT a.id, a.answered_at FROM blocking_questions a
                WHERE a.fleet = k.fleet AND a.norm = k.norm AND a.status = 'answered' AND a.id <> k.id
                ORDER BY a.answered_at DESC, a.id DESC LIMIT {SIMILAR_ANSWERED}) s
          WHERE k.id = ANY($1)
          ORDER BY k.id, s.answered_at DESC, s.id DESC"
    );
    let pairs = Pair::find_by_statement(stmt(&sql, [questions.to_vec().into()])).all(tx).await?;
    let ids: Vec<Uuid> = pairs.iter().map(|p| p.id).collect();
    let sql = format!("SELECT {COLUMNS} FROM blocking_questions q WHERE q.id = ANY($1)");
    let models = question::Entity::find().from_raw_sql(stmt(&sql, [ids.into()])).all(tx).await?;
    let by_id: HashMap<Uuid, question::Model> = models.into_iter().map(|q| (q.id, q)).collect();
    Ok(pairs.into_iter().filter_map(|p| by_id.get(&p.id).map(|q| (p.for_id, q.clone()))).collect())
}

/// Distinct open questions: one group per normalised text.
#[derive(Debug, Clone, FromQueryResult)]
pub struct OpenGroup {
    /// The text as the oldest asker wrote it.
    pub question: String,
    pub waiting: i64,
    pub oldest_asked_at: DateTime<Utc>,
    /// The group's questions, oldest first.
    pub question_ids: Vec<Uuid>,
    pub unit_ids: Vec<Uuid>,
    /// Answered questions with this text exist (the answer may serve them all).
    pub answered_before: bool,
}

/// The fleet's open questions grouped by normalised text, most-waited first
/// (then the oldest), at most `limit` groups.
pub async fn open_groups(
    tx: &DatabaseTransaction,
    assignee_group: Option<String>,
    limit: i64,
) -> Result<Vec<OpenGroup>, DbErr> {
    let sql = "SELECT (array_agg(q.question ORDER BY q.created_at, q.id))[1] AS question, count(*) AS waiting,
                      min(q.created_at) AS oldest_asked_at,
                      array_agg(q.id ORDER BY q.created_at, q.id) AS question_ids,
                      array_agg(q.unit_id ORDER BY q.created_at, q.id) AS unit_ids,
                      EXISTS (SELECT 1 FROM blocking_questions a
                               WHERE a.fleet = min(q.fleet) AND a.norm = q.norm AND a.status = 'answered') AS answered_before
                 FROM blocking_questions q
                WHERE q.status = 'open' AND ($1::text IS NULL OR q.assignee_group = $1)
                GROUP BY q.norm
                ORDER BY count(*) DESC, min(q.created_at), q.norm
                LIMIT $2";
    OpenGroup::find_by_statement(stmt(sql, [assignee_group.into(), limit.into()])).all(tx).await
}
