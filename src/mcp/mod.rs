//! `/mcp`: the ledger for agents that speak the Model Context Protocol
//! (streamable HTTP transport, stateless, JSON responses), authenticated by
//! the same bearer token as `/graphql` (the server's layers in front of it:
//! `http::mcp`).
//!
//! One tool per operation of the contract ([`crate::contract`]): its name,
//! description and input schema are derived from the GraphQL field it is
//! bound to, and a call runs that field through the schema (the same
//! resolver, checks, metrics and spans as `/graphql`). The result is the
//! field's value as structured content (a write's unit as it is now, a
//! read's with its history; `legalActions` as tool names); a refusal is a tool error carrying the
//! envelope every surface shares ([`crate::graphql::envelope`]). `tools/list`
//! shows only the tools the token's permissions allow. What the transport
//! refuses is a JSON-RPC error ([`rpc_errors`]).

pub(crate) mod rpc_errors;

use std::sync::Arc;

use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig as McpServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::auth::Principal;
use crate::contract::{self, Surface};
use crate::graphql::{LedgerSchema, error_object};
use crate::graphql::{bindings, envelope};
use crate::ledger::LedgerError;

/// The server's instructions: how the loop goes, with the holder's loop of
/// the state machine ([`bindings::holder_loop`]) in tool names.
fn instructions() -> String {
    format!(
        "work-ledger: the system of record for a fleet of coding agents. \
Loop: `claim_next` gives you one unit (you hold at most one live claim: CLAIMED, IN_PROGRESS or BLOCKED) and \
says its `outcome`; with no unit, `drained` means the domain is finished (stop) and `busy` says how many units \
are blocked or leased elsewhere and when the earliest lease ends; `done` and `disposed` count the domain's \
finished units (zero: nothing was ever registered there).\n\
What you may do with your unit, by its state (every result's `legalActions` names the same tools):\n{}\n\
Writes answer with the unit as it is now (state, current attempt, lease, open question, `legalActions`); \
`get_unit` shows its history: earlier `attempts` (who, outcome, why) and `questions` with their answers. \
`my_work` says what you hold and what awaits your disposition. \
Pass your `currentAttemptId` as `attemptId` to {}: if your lease ran out and the unit was reclaimed, the \
write is refused with LEASE_LOST instead of acting on another agent's work. \
Give every write an `idempotencyKey`; after an UNAVAILABLE error (the database failing over) or a lost \
answer, call again with the same arguments and the same key: a write that did land is returned, not made twice.",
        bindings::holder_loop(Surface::Mcp),
        bindings::fenced_tools()
    )
}

/// The `/mcp` route: the MCP service over `schema` (streamable HTTP,
/// stateless, JSON responses), stopped by `stop`. The server puts its HTTP
/// layers in front of it (the bearer token, the body read whole, the `Host`
/// and `Origin` checks).
pub fn routes(schema: LedgerSchema, stop: CancellationToken) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        // The server's own allow-lists apply (one policy for every route).
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_cancellation_token(stop);
    let tools = LedgerTools { schema };
    let service =
        StreamableHttpService::new(move || Ok(tools.clone()), Arc::new(NeverSessionManager::default()), config);
    Router::new().route_service("/mcp", service)
}

#[derive(Clone)]
struct LedgerTools {
    schema: LedgerSchema,
}

fn principal(context: &RequestContext<RoleServer>) -> Result<Principal, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
        .ok_or_else(|| ErrorData::invalid_request("missing bearer token", None))
}

impl ServerHandler for LedgerTools {
    fn get_info(&self) -> McpServerConfig {
        let mut info = McpServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(instructions());
        info.server_info = Implementation::new("work-ledger", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let who = principal(&context)?;
        let tools = bindings::OPERATIONS.iter().filter(|op| op.permitted(&who)).filter_map(|op| {
            let name = op.tool?;
            Some(Tool::new(name, op.description(Surface::Mcp), Arc::new(op.input_schema())))
        });
        Ok(ListToolsResult::with_all_items(tools.collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let who = principal(&context)?;
        let Some(op) = bindings::tool(&request.name) else {
            return Err(ErrorData::invalid_params(format!("no tool named `{}`", request.name), None));
        };
        let args = request.arguments.unwrap_or_default();
        let result = match self.call(op, args, who).await {
            Ok(value) => CallToolResult::structured(Value::Object(value)),
            Err(refusal) => CallToolResult::structured_error(Value::Object(refusal)),
        };
        Ok(result.into())
    }
}

impl LedgerTools {
    /// Runs the tool's GraphQL field as `who`, through the same way into the
    /// schema (limits, metrics, spans: `graphql::executor`) and resolver as
    /// `/graphql`.
    async fn call(
        &self,
        op: &'static contract::Operation,
        args: JsonObject,
        who: Principal,
    ) -> Result<Map<String, Value>, Map<String, Value>> {
        let refused = |err: LedgerError| envelope::refusal(&error_object(err), Surface::Mcp);
        if !op.permitted(&who) {
            return Err(refused(LedgerError::Forbidden(op.needs[0])));
        }
        let document = op.document(&args, Surface::Mcp).map_err(refused)?;
        let request = async_graphql::Request::new(document)
            .variables(async_graphql::Variables::from_json(Value::Object(args)))
            .data(who);
        let response = self.schema.execute(request).await;
        let response = serde_json::to_value(&response).map_err(|_| refused(LedgerError::internal("response")))?;
        envelope::result(op, &response, Surface::Mcp)
    }
}

/// The tools and their descriptions' first lines, for the quick start.
pub fn tool_names() -> impl Iterator<Item = (&'static str, String)> {
    bindings::OPERATIONS.iter().filter_map(|op| Some((op.tool?, op.description(Surface::Mcp))))
}
