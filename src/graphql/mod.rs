//! The GraphQL surface: one module per area, merged here into the schema.

mod agent_reads;
mod aggregates;
pub mod bindings;
mod documents;
pub mod envelope;
pub mod error;
mod executor;
mod guidance;
pub mod loaders;
mod notes;
mod operation_metrics;
mod pagination;
mod query;
mod read_budget;
mod reads;
pub mod request_errors;
mod roster;
mod rows;
mod selection_order;
pub mod shape;
mod shared_reads;
mod stalls;
mod subscription;
mod triage;
mod types;
mod units;
mod work;

use async_graphql::{Context, MergedObject, Schema};

use crate::auth::Principal;
use crate::ledger::{Ledger, LedgerError};
use crate::live::Live;

pub use error::{Result, error_body, error_object};
pub use subscription::Subscription;

#[derive(MergedObject, Default)]
pub struct Query(
    query::MetaQuery,
    units::UnitQuery,
    reads::ReadQuery,
    aggregates::MetricsQuery,
    agent_reads::AgentQuery,
    triage::TriageQuery,
    roster::RosterQuery,
);

#[derive(MergedObject, Default)]
pub struct Mutation(units::UnitMutation, work::WorkMutation);

pub use executor::LedgerSchema;

/// SPEC §9: query depth 12 and a complexity budget. A paged field costs
/// `first` times what one item costs ([`pagination::page_cost`]), so the
/// budget counts rows, not just fields: the largest legitimate page (500
/// units with every field, their attempts, open question and current
/// attempt: about 29,000) passes, while a fan-out (500 units x 100 events
/// each: about 200,000) or ten such pages under aliases are refused before
/// anything runs. Fleet-wide reads and aliases are counted besides
/// ([`read_budget`]).
pub const MAX_DEPTH: usize = 12;
pub const MAX_COMPLEXITY: usize = 50_000;

/// `metrics`: count and time every operation (the service exports metrics).
/// `live` feeds `waitForAnswer`.
pub fn build_schema(ledger: Ledger, live: Live, metrics: bool) -> LedgerSchema {
    let raw = Schema::build(Query::default(), Mutation::default(), Subscription)
        .data(ledger.clone())
        .data(agent_reads::LiveFeeds(live))
        .limit_depth(MAX_DEPTH)
        .limit_complexity(MAX_COMPLEXITY)
        .finish();
    LedgerSchema::new(raw, ledger, metrics)
}

/// The schema's SDL.
pub fn sdl() -> String {
    Schema::build(Query::default(), Mutation::default(), Subscription).finish().sdl()
}

/// What `schema.graphql` must equal: the SDL, then the bindings of its
/// fields on MCP and the CLI ([`bindings::reference`]) as comments.
pub fn schema_file() -> String {
    format!("{}\n{}", sdl(), bindings::reference())
}

/// The request's principal, put there by the HTTP layer after authentication.
fn principal<'a>(ctx: &Context<'a>) -> std::result::Result<&'a Principal, LedgerError> {
    ctx.data_opt::<Principal>()
        .ok_or(LedgerError::Unauthenticated("missing token: send `Authorization: Bearer <token>`".into()))
}

fn ledger<'a>(ctx: &Context<'a>) -> &'a Ledger {
    ctx.data_unchecked::<Ledger>()
}

/// The request's DataLoader (see [`loaders::RequestLoaders`]).
fn loaders<'a>(ctx: &Context<'a>) -> std::result::Result<&'a loaders::Loaders, LedgerError> {
    ctx.data_opt::<loaders::RequestLoaders>()
        .map(loaders::RequestLoaders::get)
        .ok_or_else(|| LedgerError::internal("request without DataLoader"))
}
