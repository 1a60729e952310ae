use sea_orm::entity::prelude::*;

use super::{Disposition, WorkState};

/// One row per unit of work, forever.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "work_units")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub fleet: String,
    pub external_ref: String,
    pub domain: String,
    pub state: WorkState,
    pub disposition: Option<Disposition>,
    pub disposed_at: Option<DateTimeUtc>,
    pub workflow_id: Option<String>,
    pub claimed_by: Option<String>,
    pub current_attempt_id: Option<Uuid>,
    pub lease_expires_at: Option<DateTimeUtc>,
    pub last_heartbeat_at: Option<DateTimeUtc>,
    pub attempt_count: i32,
    pub cost_cents: i64,
    pub evidence_urls: Vec<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
