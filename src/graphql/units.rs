use async_graphql::{Context, InputObject, Object};
use uuid::Uuid;

use super::types::WorkUnit;
use super::{Result, ledger, principal};
use crate::contract::{Operation, READER, Root, UNIT_ID, op};
use crate::ledger::RegisterUnit;

#[derive(Default)]
pub struct UnitQuery;

#[Object]
impl UnitQuery {
    /// A unit of the caller's fleet by id; null when there is none.
    async fn unit(&self, ctx: &Context<'_>, id: Uuid) -> Result<Option<WorkUnit>> {
        let unit = ledger(ctx).unit(principal(ctx)?, id).await?;
        Ok(WorkUnit::returned_if(ctx, unit).await)
    }

    /// A unit of the caller's fleet by its external reference; null when there is none.
    async fn unit_by_ref(&self, ctx: &Context<'_>, external_ref: String) -> Result<Option<WorkUnit>> {
        let unit = ledger(ctx).unit_by_ref(principal(ctx)?, external_ref).await?;
        Ok(WorkUnit::returned_if(ctx, unit).await)
    }
}

/// A unit to import. Re-registering an existing `externalRef` returns the
/// existing unit untouched.
#[derive(InputObject)]
pub struct RegisterUnitInput {
    /// 1..256 printable characters, unique in the fleet.
    pub external_ref: String,
    /// Grouping for `claimNext(domain:)` and the views; `default` when omitted.
    pub domain: Option<String>,
    /// The Temporal workflow that runs the unit: the ledger projects its
    /// runs (attempts, cost, evidence, disposition) and no agent claims it
    /// (`WORKFLOW_OWNED`).
    pub workflow_id: Option<String>,
}

#[derive(Default)]
pub struct UnitMutation;

#[Object]
impl UnitMutation {
    /// Imports up to 1000 units, idempotent by `externalRef`; returns them in input order.
    async fn register_units(&self, ctx: &Context<'_>, units: Vec<RegisterUnitInput>) -> Result<Vec<WorkUnit>> {
        let input = units
            .into_iter()
            .map(|u| RegisterUnit { external_ref: u.external_ref, domain: u.domain, workflow_id: u.workflow_id })
            .collect();
        let units = ledger(ctx).register_units(principal(ctx)?, input).await?;
        Ok(WorkUnit::returned_all(ctx, units).await)
    }
}

/// The unit reads' bindings on MCP ([`crate::contract`]).
pub const BINDINGS: &[Operation] = &[
    Operation { tool: Some("get_unit"), renamed: UNIT_ID, ..op("unit", Root::Query, READER) },
    Operation { tool: Some("get_unit_by_ref"), ..op("unitByRef", Root::Query, READER) },
];
