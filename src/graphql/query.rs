use async_graphql::{Context, Object};

use super::types::PrincipalObject;
use super::{Result, ledger, principal};
use crate::contract::{AGENT, Operation, Root, op};

#[derive(Default)]
pub struct MetaQuery;

/// The fields of `me` that read the ledger, each in a transaction whose
/// first statement authenticates the token again.
const ME_READS: [&str; 2] = ["heldUnit", "awaitingDisposition"];

#[Object]
impl MetaQuery {
    /// Who the token belongs to: its fleet, its name (the agent id) and its permissions.
    async fn me(&self, ctx: &Context<'_>) -> Result<PrincipalObject> {
        let who = principal(ctx)?;
        // The token's own facts are known without a read, but a revoked or
        // expired token gets none of them: unless a read of the selection
        // asks the database anyway, one statement does.
        let look = ctx.look_ahead();
        if !ME_READS.iter().any(|field| look.field(field).exists()) {
            ledger(ctx).still_live(who).await?;
        }
        Ok(PrincipalObject(who.clone()))
    }
}

/// The selection `my_work` returns (`$UNIT`: a unit as the reads give it).
const MY_WORK: &str = "{ fleet name grants { permission allows } heldUnit $UNIT awaitingDisposition $UNIT }";

/// `me`'s binding on MCP and the agent CLI ([`crate::contract`]).
pub const BINDINGS: &[Operation] = &[Operation {
    tool: Some("my_work"),
    verb: Some("status"),
    selection: MY_WORK,
    result: "me",
    note: "`heldUnit` is what you hold; `awaitingDisposition` what you verified and still have to dispose of.",
    ..op("me", Root::Query, AGENT)
}];
