use async_graphql::{Context, Object};

use super::types::PrincipalObject;
use super::{Result, principal};

#[derive(Default)]
pub struct MetaQuery;

#[Object]
impl MetaQuery {
    /// Who the token belongs to: its fleet, its name (the agent id) and its permissions.
    async fn me(&self, ctx: &Context<'_>) -> Result<PrincipalObject> {
        Ok(PrincipalObject(principal(ctx)?.clone()))
    }
}
