//! `Principal`: the caller, and its token's grants.

use async_graphql::{Context, Object};

use super::WorkUnit;
use crate::auth::Principal;
use crate::graphql::{Result, ledger};

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
    /// Explicit permissions, e.g. `units:claim`; `grants` says what each allows.
    async fn permissions(&self) -> Vec<&'static str> {
        self.0.permissions.iter().map(|p| p.as_str()).collect()
    }
    /// Each permission of the token with what it allows.
    async fn grants(&self) -> Vec<Grant> {
        self.0.permissions.iter().map(|p| Grant { permission: p.as_str(), allows: p.allows() }).collect()
    }
    /// The unit you hold: your live claim (CLAIMED, IN_PROGRESS or BLOCKED), at most one.
    /// Null when you hold none and may `claimNext`.
    async fn held_unit(&self, ctx: &Context<'_>) -> Result<Option<WorkUnit>> {
        Ok(WorkUnit::returned_if(ctx, ledger(ctx).held_unit(&self.0).await?).await)
    }
    /// VERIFIED units you verified and still have to `dispose` (MIGRATED). They do not
    /// count as held: you may claim other work meanwhile.
    async fn awaiting_disposition(&self, ctx: &Context<'_>) -> Result<Vec<WorkUnit>> {
        Ok(WorkUnit::returned_all(ctx, ledger(ctx).awaiting_disposition(&self.0).await?).await)
    }
}

/// A permission and what it allows.
#[derive(async_graphql::SimpleObject)]
pub struct Grant {
    /// Its name, e.g. `units:claim`.
    pub permission: &'static str,
    /// What it lets the token do.
    pub allows: &'static str,
}
