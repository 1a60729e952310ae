//! `agents`: the fleet's roster (`v_agents`), who holds what and who has
//! gone silent, paged by name.

use async_graphql::{Context, Object};
use chrono::{DateTime, Utc};

use super::loaders::UnitId;
use super::pagination::{Conn, TotalCount, counted_with};
use super::types::WorkUnit;
use super::{Result, ledger, loaders, principal};
use crate::contract::{Operation, READER, Root, op};
use crate::db::reads::{AgentRow, AgentStatus};
use crate::ledger::LedgerError;
use crate::ledger::cursor::{List, encode_name};
use crate::ledger::reads::PageArgs;

/// One agent name of the fleet: a name of a token that may claim, or one
/// that made an attempt.
pub struct Agent(AgentRow);

#[Object]
impl Agent {
    /// The agent id: its tokens' name, recorded on its claims and events.
    async fn name(&self) -> &str {
        &self.0.name
    }
    /// ACTIVE, BLOCKED or SILENT by the unit it holds; IDLE or REVOKED when it holds none.
    async fn status(&self) -> Result<AgentStatus> {
        Ok(AgentStatus::from_sql(&self.0.status)
            .ok_or_else(|| LedgerError::internal(format!("unknown agent status {}", self.0.status)))?)
    }
    /// The unit it holds (CLAIMED, IN_PROGRESS or BLOCKED; at most one), or null.
    async fn held_unit(&self, ctx: &Context<'_>) -> Result<Option<WorkUnit>> {
        let Some(id) = self.0.held_unit_id else { return Ok(None) };
        Ok(loaders(ctx)?.load_one(UnitId(id)).await?.map(WorkUnit))
    }
    /// When it last claimed (started its latest attempt); null if it never has.
    async fn last_claim_at(&self) -> Option<DateTime<Utc>> {
        self.0.last_claim_at
    }
    /// When it last renewed a lease on its latest attempt: the claim or the
    /// latest heartbeat (for a held unit, the unit's own `lastHeartbeatAt`,
    /// as `stalls` shows it). Null if it never claimed.
    async fn last_heartbeat_at(&self) -> Option<DateTime<Utc>> {
        self.0.last_heartbeat_at
    }
    /// Claims (attempts) it started today, UTC.
    async fn claims_today(&self) -> i64 {
        self.0.claims_today
    }
    /// What the attempts it started today (UTC) cost, whenever the cost was
    /// recorded: the cost of `claimsToday`.
    async fn cost_cents_today(&self) -> i64 {
        self.0.cost_cents_today
    }
    /// When a token of that name was last used (the latest over its tokens);
    /// null when never, or not recorded.
    async fn token_last_used_at(&self) -> Option<DateTime<Utc>> {
        self.0.token_last_used_at
    }
}

#[derive(Default)]
pub struct RosterQuery;

#[Object]
impl RosterQuery {
    /// The fleet's agents (`v_agents`), one per name, ordered by name (keyset
    /// cursors); `status` lists one status only, e.g. SILENT for the agents
    /// that vanished with a unit. A page looks at its own names only; with
    /// `status` (or `totalCount`), every name of the fleet is looked at: a
    /// fleet-wide read.
    #[graphql(complexity = "super::pagination::page_cost(first, child_complexity)")]
    async fn agents(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        status: Option<AgentStatus>,
    ) -> Result<Conn<Agent>> {
        let page = ledger(ctx).agents_page(principal(ctx)?, PageArgs { first, after }, status).await?;
        let cursor = |row: &AgentRow| encode_name(List::Agents, &row.name);
        Ok(counted_with(page.items, page.has_next, TotalCount::List(page.total), cursor, Agent))
    }
}

/// `agents`' binding on MCP ([`crate::contract`]).
pub const BINDINGS: &[Operation] = &[Operation {
    tool: Some("fleet_roster"),
    selection: "{ totalCount pageInfo { hasNextPage endCursor } nodes { name status \
        heldUnit { id externalRef state leaseExpiresAt } lastClaimAt lastHeartbeatAt claimsToday costCentsToday \
        tokenLastUsedAt } }",
    result: "agents",
    note: "Who is alive: SILENT agents hold a unit whose lease ran out.",
    ..op("agents", Root::Query, READER)
}];
