//! `stalls`: a connection of units whose edges say who held each unit, when
//! it last heard from them, when the lease ran out and for how long the unit
//! has been stalled (the shape of `StallEvent`, as a list).

use async_graphql::connection::{Connection, ConnectionNameType, Edge, EdgeNameType};
use async_graphql::{Context, Object, OutputType};
use chrono::{DateTime, Utc};

use super::loaders::{self as loader, AttemptId};
use super::pagination::{TotalCount, unit_cursor};
use super::types::{Attempt, WorkUnit, seconds_between};
use super::{Result, loaders};
use crate::db::entities::work_unit;
use crate::ledger::cursor::{CursorText, List};
use crate::ledger::reads::Page;

pub struct StallConnectionName;

impl ConnectionNameType for StallConnectionName {
    fn type_name<T: OutputType>() -> String {
        "StallConnection".to_owned()
    }
}

pub struct StallEdgeName;

impl EdgeNameType for StallEdgeName {
    fn type_name<T: OutputType>() -> String {
        "StallEdge".to_owned()
    }
}

pub type StallConnection = Connection<String, WorkUnit, TotalCount, Stall, StallConnectionName, StallEdgeName>;

pub fn stall_connection(ctx: &Context<'_>, page: Page<work_unit::Model>) -> StallConnection {
    let now = loader::now(ctx);
    let mut connection = Connection::with_additional_fields(false, page.has_next, TotalCount::List(page.total));
    connection.edges.extend(page.items.into_iter().map(|unit| {
        let stall = Stall::of(&unit, now);
        Edge::with_additional_fields(unit_cursor(&unit).encode(List::Stalls), WorkUnit(unit), stall)
    }));
    connection
}

/// Who held a stalled unit and since when (the edge fields of `stalls`).
pub struct Stall {
    holder: Option<String>,
    attempt_id: Option<uuid::Uuid>,
    last_heartbeat_at: Option<DateTime<Utc>>,
    lease_expired_at: Option<DateTime<Utc>>,
    stalled_for_seconds: i64,
}

impl Stall {
    fn of(unit: &work_unit::Model, now: DateTime<Utc>) -> Self {
        Self {
            holder: unit.claimed_by.clone(),
            attempt_id: unit.current_attempt_id,
            last_heartbeat_at: unit.last_heartbeat_at,
            lease_expired_at: unit.lease_expires_at,
            stalled_for_seconds: unit.lease_expires_at.map_or(0, |expired| seconds_between(expired, now)),
        }
    }
}

#[Object]
impl Stall {
    /// The agent that held the unit when its lease ran out.
    async fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }
    /// The holder's attempt, which a reclaim will supersede.
    async fn attempt(&self, ctx: &Context<'_>) -> Result<Option<Attempt>> {
        let Some(id) = self.attempt_id else { return Ok(None) };
        Ok(loaders(ctx)?.load_one(AttemptId(id)).await?.map(Attempt))
    }
    /// The claim or the last heartbeat of the holder.
    async fn last_heartbeat_at(&self) -> Option<DateTime<Utc>> {
        self.last_heartbeat_at
    }
    async fn lease_expired_at(&self) -> Option<DateTime<Utc>> {
        self.lease_expired_at
    }
    /// Whole seconds from `leaseExpiredAt` to `serverTime`.
    async fn stalled_for_seconds(&self) -> i64 {
        self.stalled_for_seconds
    }
}
