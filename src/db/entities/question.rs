use sea_orm::entity::prelude::*;

use super::QuestionStatus;

/// A question an agent must have answered before it can go on.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "blocking_questions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub fleet: String,
    pub unit_id: Uuid,
    pub attempt_id: Uuid,
    pub question: String,
    pub status: QuestionStatus,
    pub answer: Option<String>,
    pub assignee_group: String,
    pub asked_by: String,
    pub answered_by: Option<String>,
    pub created_at: DateTimeUtc,
    pub answered_at: Option<DateTimeUtc>,
    pub cancelled_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
