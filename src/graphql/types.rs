//! GraphQL object types over the entity models.

use async_graphql::{Context, Object};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Result, principal};
use crate::auth::Principal;
use crate::db::entities::{Disposition, WorkState, work_unit};
use crate::ledger::state_machine;

pub struct PrincipalObject(pub Principal);

/// The caller: what its token allows, in which fleet.
#[Object(name = "Principal")]
impl PrincipalObject {
    async fn fleet(&self) -> &str {
        &self.0.fleet
    }
    /// The token's name: the agent id recorded on claims and events.
    async fn name(&self) -> &str {
        &self.0.name
    }
    /// Explicit permissions, e.g. `units:claim`.
    async fn permissions(&self) -> Vec<&'static str> {
        self.0.permissions.iter().map(|p| p.as_str()).collect()
    }
}

/// A unit of work: one claimant, one state, one permanent disposition, one cost.
pub struct WorkUnit(pub work_unit::Model);

#[Object]
impl WorkUnit {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn fleet(&self) -> &str {
        &self.0.fleet
    }
    /// The caller's own reference (unique per fleet), e.g. a path in the legacy estate.
    async fn external_ref(&self) -> &str {
        &self.0.external_ref
    }
    async fn domain(&self) -> &str {
        &self.0.domain
    }
    async fn state(&self) -> WorkState {
        self.0.state
    }
    /// Set once, with the terminal state: DONE iff MIGRATED, ABANDONED otherwise.
    async fn disposition(&self) -> Option<Disposition> {
        self.0.disposition
    }
    async fn disposed_at(&self) -> Option<DateTime<Utc>> {
        self.0.disposed_at
    }
    async fn workflow_id(&self) -> Option<&str> {
        self.0.workflow_id.as_deref()
    }
    /// The agent holding the unit (kept after VERIFIED until dispose).
    async fn claimed_by(&self) -> Option<&str> {
        self.0.claimed_by.as_deref()
    }
    async fn current_attempt_id(&self) -> Option<Uuid> {
        self.0.current_attempt_id
    }
    async fn lease_expires_at(&self) -> Option<DateTime<Utc>> {
        self.0.lease_expires_at
    }
    async fn last_heartbeat_at(&self) -> Option<DateTime<Utc>> {
        self.0.last_heartbeat_at
    }
    async fn attempt_count(&self) -> i32 {
        self.0.attempt_count
    }
    /// Sum of the costs of all attempts (the database keeps it exact).
    async fn cost_cents(&self) -> i64 {
        self.0.cost_cents
    }
    async fn evidence_urls(&self) -> &[String] {
        &self.0.evidence_urls
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }
    /// CLAIMED or IN_PROGRESS with an expired lease: anyone may reclaim it.
    async fn stalled(&self) -> bool {
        state_machine::is_stale(&self.0, Utc::now())
    }
    /// What the caller may do next, as mutation call shapes.
    async fn legal_actions(&self, ctx: &Context<'_>) -> Result<Vec<String>> {
        Ok(state_machine::legal_actions(&self.0, principal(ctx)?, Utc::now()))
    }
}
