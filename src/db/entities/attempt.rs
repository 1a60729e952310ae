use sea_orm::entity::prelude::*;

use super::AttemptOutcome;

/// One row per claim of a unit.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "work_unit_attempts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub fleet: String,
    pub unit_id: Uuid,
    pub attempt_no: i32,
    pub agent_id: String,
    pub outcome: Option<AttemptOutcome>,
    pub cost_cents: i64,
    pub evidence_url: Option<String>,
    pub started_at: DateTimeUtc,
    pub ended_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
