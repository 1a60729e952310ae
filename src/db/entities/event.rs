use sea_orm::entity::prelude::*;

use super::{EventType, WorkState};

/// The append-only log of every change (the database refuses UPDATE and DELETE).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "work_unit_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub seq: i64,
    pub fleet: String,
    pub unit_id: Uuid,
    pub attempt_id: Option<Uuid>,
    pub event_type: EventType,
    pub from_state: Option<WorkState>,
    pub to_state: Option<WorkState>,
    pub agent_id: Option<String>,
    pub cost_delta_cents: i64,
    pub detail: Json,
    pub source_event_id: Option<String>,
    pub request_hash: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
