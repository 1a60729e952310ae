//! The reads an agent makes between claims: where the work stands when
//! `claimNext` found nothing, and a wait for the answer to its question.

use async_graphql::{Context, Object};
use uuid::Uuid;

use super::types::WorkUnit;
use super::{Result, ledger, principal};
use crate::contract::{AGENT, Operation, Root, op};
use crate::ledger::{ClaimSituation, LedgerError};
use crate::live::Live;
use crate::live::wait::DEFAULT_WAIT_SECONDS;

/// The live subsystem as schema data, for `waitForAnswer` on every surface.
/// A type of its own: the `Live` a WebSocket connection carries is what
/// tells a subscription that it runs over WebSocket.
#[derive(Clone)]
pub struct LiveFeeds(pub Live);

#[derive(Default)]
pub struct AgentQuery;

#[Object]
impl AgentQuery {
    /// Where claimable work stands in `domain` (the whole fleet without one).
    /// For an agent whose `claimNext` returned null: `drained: true` means the
    /// domain is finished, stop; otherwise it is busy, and the counts say
    /// why (units leased to other agents or blocked on questions) and
    /// `earliestLeaseEnd` when a lease may run out, so wait and claim again.
    /// `ready` or `stale` above zero: claim again now. An unknown domain
    /// reads as drained. Reads what the claim path reads (READY units and live
    /// claims, through their indexes), never the finished units.
    async fn claim_situation(&self, ctx: &Context<'_>, domain: Option<String>) -> Result<ClaimSituation> {
        Ok(ledger(ctx).claim_situation(principal(ctx)?, domain).await?)
    }

    /// Holds until the unit is no longer BLOCKED (its question answered, or
    /// the unit disposed) or `timeoutSeconds` (1 to 60) pass, then returns the
    /// unit as it is: IN_PROGRESS with the answer in `questions { answer }`
    /// when the holder still holds it, READY when the holder had released it,
    /// still BLOCKED after a timeout (ask again). For an agent blocked on a
    /// question, instead of polling `unit` or holding a subscription open.
    async fn wait_for_answer(
        &self,
        ctx: &Context<'_>,
        unit_id: Uuid,
        #[graphql(default_with = "Some(DEFAULT_WAIT_SECONDS)")] timeout_seconds: Option<i32>,
    ) -> Result<WorkUnit> {
        let who = principal(ctx)?;
        let LiveFeeds(live) =
            ctx.data_opt::<LiveFeeds>().ok_or_else(|| LedgerError::internal("schema without live feeds"))?;
        let timeout = timeout_seconds.unwrap_or(DEFAULT_WAIT_SECONDS);
        let unit = live.wait_for_answer(ledger(ctx), who, unit_id, timeout).await?;
        Ok(WorkUnit::returned(ctx, unit).await)
    }
}

/// `waitForAnswer`'s binding on MCP and the agent CLI ([`crate::contract`]).
pub const BINDINGS: &[Operation] = &[Operation {
    tool: Some("wait_for_answer"),
    verb: Some("wait"),
    note: "Use it instead of polling while your unit is BLOCKED.",
    ..op("waitForAnswer", Root::Query, AGENT)
}];
