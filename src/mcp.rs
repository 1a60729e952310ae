//! `/mcp`: the ledger for agents that speak the Model Context Protocol
//! (streamable HTTP transport, stateless, JSON responses), authenticated by
//! the same bearer token as `/graphql`.
//!
//! One tool per lifecycle step. Each calls the same [`Ledger`] operation as
//! the GraphQL resolver (no second implementation), returns the unit with
//! its `legalActions` as structured content, and returns a refusal as a tool
//! error carrying the code, the message and, for a unit, its state and legal
//! actions (the same error object GraphQL sends). `tools/list` shows only
//! the tools the token's permissions allow.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig as McpServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::auth::{Permission, Principal};
use crate::db::entities::{AttemptOutcome, Disposition, QuestionStatus, WorkState, question};
use crate::graphql::error_object;
use crate::http::HttpConfig;
use crate::ledger::reads::{PageArgs, QuestionFilter};
use crate::ledger::state_machine::legal_actions;
use crate::ledger::{CostTarget, Dispose, Ledger, LedgerError, Release, UnitModel};

const INSTRUCTIONS: &str = "work-ledger: the system of record for a fleet of coding agents. \
Loop: `claim_next` gives you one unit (you hold at most one live claim: CLAIMED, IN_PROGRESS or BLOCKED); \
`start_work`; `heartbeat` before the lease runs out; `record_cost` as bills arrive; `verify` with an \
evidence link when done (the unit is then no longer held: claim your next one, and still `dispose` of \
the verified one with MIGRATED); `block` with a question when stuck, or `release` to give the unit up. \
Every result carries `legalActions`: what you may do next. `my_work` says what you hold. \
Pass your `currentAttemptId` as `attemptId` to `start_work`, `verify`, `block`, `release` and `dispose`: if \
your lease ran out and the unit was reclaimed, the write is refused with LEASE_LOST instead of acting on \
another agent's work. \
Give every write an `idempotencyKey`; after an UNAVAILABLE error (the database failing over) or a lost \
answer, call again with the same arguments and the same key: a write that did land is returned, not made twice.";

/// The `/mcp` routes over `ledger`, stopped by `stop`. Their layers run
/// only for `/mcp` (other paths get the server's 404, unauthenticated):
/// the bearer token, then the body read whole within `http`'s body-read
/// timeout and SPEC §9's size (rmcp reads bodies with no time limit). The
/// `Host` and `Origin` checks are the server's ([`crate::http::surface`]).
pub fn routes(ledger: Ledger, stop: CancellationToken, http: HttpConfig) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        // The server's own allow-lists apply (one policy for every route).
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_cancellation_token(stop);
    let tools = LedgerTools { ledger: ledger.clone() };
    let service =
        StreamableHttpService::new(move || Ok(tools.clone()), Arc::new(NeverSessionManager::default()), config);
    Router::new()
        .route_service("/mcp", service)
        .route_layer(middleware::from_fn_with_state(http, read_whole_body))
        .route_layer(middleware::from_fn_with_state(ledger, authenticate))
}

/// Bearer authentication in front of the MCP service: 401 without a valid
/// token (logged and counted like every surface's), otherwise the principal
/// rides in the request's extensions (rmcp hands the HTTP request parts to
/// the tools).
async fn authenticate(State(ledger): State<Ledger>, mut request: Request, next: Next) -> Response {
    let header = request.headers().get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""));
    let authenticated = ledger.authenticate(header).await;
    if let Err(err) = &authenticated {
        let client = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
        crate::http::auth_failed(&ledger, client, "mcp", err);
    }
    match authenticated.map_err(LedgerError::from) {
        Ok((principal, _)) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(err) => {
            let status = if matches!(err, LedgerError::Unauthenticated(_)) {
                StatusCode::UNAUTHORIZED
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            refusal(status, err)
        }
    }
}

/// The request with its body read whole: 408 when it does not arrive within
/// the body-read timeout, 413 past the size limit.
async fn read_whole_body(State(http): State<HttpConfig>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    match crate::http::read_body(body, http.body_read_timeout).await {
        Ok(bytes) => next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await,
        Err(err) => refusal(err.status(), err.into_ledger_error()),
    }
}

/// An HTTP refusal before the MCP service: `{"error": <the GraphQL error object>}`.
fn refusal(status: StatusCode, err: LedgerError) -> Response {
    let body = json!({ "error": error_object(err) });
    let mut response = (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    }
    response
}

#[derive(Clone)]
struct LedgerTools {
    ledger: Ledger,
}

// --- Tool inputs (their JSON schemas are what `tools/list` shows) ----------

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClaimNextArgs {
    /// Only units of this domain.
    domain: Option<String>,
    /// Lease length in seconds, 30..86400 (default 900). Heartbeat before it runs out.
    lease_seconds: Option<i32>,
    /// Any string unique to this request; resend it to retry safely.
    idempotency_key: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClaimUnitArgs {
    unit_id: Uuid,
    lease_seconds: Option<i32>,
    idempotency_key: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HeartbeatArgs {
    /// The `currentAttemptId` of the unit you hold.
    attempt_id: Uuid,
    lease_seconds: Option<i32>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct UnitArgs {
    unit_id: Uuid,
    /// Your `currentAttemptId`: the write is refused with LEASE_LOST, changing nothing, when the unit was
    /// reclaimed from you since (the lease ran out and another agent claimed it).
    attempt_id: Option<Uuid>,
    idempotency_key: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CostArgs {
    /// The unit you work (or worked) on: your latest attempt on it is billed.
    unit_id: Uuid,
    /// Cents, 0..1,000,000,000.
    cents: i64,
    /// Required: a replay with the same key counts once.
    idempotency_key: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct VerifyArgs {
    unit_id: Uuid,
    /// An absolute http(s) link to the evidence: a commit, a PR, a CI run.
    evidence_url: String,
    /// Your `currentAttemptId`: the write is refused with LEASE_LOST, changing nothing, when the unit was
    /// reclaimed from you since (the lease ran out and another agent claimed it).
    attempt_id: Option<Uuid>,
    idempotency_key: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BlockArgs {
    unit_id: Uuid,
    /// What you need answered (at most 8000 characters).
    question: String,
    /// Who should answer (default `agent-questions`).
    assignee_group: Option<String>,
    /// Your `currentAttemptId`: the write is refused with LEASE_LOST, changing nothing, when the unit was
    /// reclaimed from you since (the lease ran out and another agent claimed it).
    attempt_id: Option<Uuid>,
    idempotency_key: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReleaseArgs {
    unit_id: Uuid,
    reason: Option<String>,
    /// True when the attempt failed (outcome FAILED instead of ABANDONED).
    failed: Option<bool>,
    /// Your `currentAttemptId`: the write is refused with LEASE_LOST, changing nothing, when the unit was
    /// reclaimed from you since (the lease ran out and another agent claimed it).
    attempt_id: Option<Uuid>,
    idempotency_key: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DisposeArgs {
    unit_id: Uuid,
    /// MIGRATED (from VERIFIED) or DROPPED, DEFERRED, DEAD.
    disposition: DispositionArg,
    /// Required for DROPPED, DEFERRED and DEAD; MIGRATED keeps the verification evidence.
    evidence_url: Option<String>,
    reason: Option<String>,
    /// Your `currentAttemptId`: the write is refused with LEASE_LOST, changing nothing, when the unit was
    /// reclaimed from you since (the lease ran out and another agent claimed it).
    attempt_id: Option<Uuid>,
    idempotency_key: Option<String>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum DispositionArg {
    Migrated,
    Dropped,
    Deferred,
    Dead,
}

impl From<DispositionArg> for Disposition {
    fn from(d: DispositionArg) -> Self {
        match d {
            DispositionArg::Migrated => Self::Migrated,
            DispositionArg::Dropped => Self::Dropped,
            DispositionArg::Deferred => Self::Deferred,
            DispositionArg::Dead => Self::Dead,
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NoArgs {}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct QuestionsArgs {
    /// Only questions for this group (e.g. `agent-questions`).
    assignee_group: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AnswerArgs {
    /// The blocked unit whose open question you answer.
    unit_id: Uuid,
    /// The question you answer (the unit's `openQuestion.id`): when it is no longer the unit's open question,
    /// the answer is QUESTION_NOT_OPEN and changes nothing.
    question_id: Option<Uuid>,
    answer: String,
    idempotency_key: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GetUnitArgs {
    /// The unit's id; or give `externalRef`.
    unit_id: Option<Uuid>,
    external_ref: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct QueueDepthArgs {
    domain: Option<String>,
}

/// One tool: its name, what it is for, who may see it, and its input.
struct ToolSpec {
    name: &'static str,
    description: &'static str,
    /// Any of these permissions shows the tool.
    needs: &'static [Permission],
    tool: fn(&'static str, &'static str) -> Tool,
}

fn tool<T: JsonSchema + 'static>(name: &'static str, description: &'static str) -> Tool {
    Tool::new(name, description, Arc::new(JsonObject::new())).with_input_schema::<T>()
}

const AGENT: &[Permission] = &[Permission::UnitsClaim];
const BILLING: &[Permission] = &[Permission::UnitsClaim, Permission::UnitsDisposeAny];
const TRIAGE: &[Permission] = &[Permission::QuestionsAnswer];
const READER: &[Permission] = &[Permission::LedgerRead];

const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "claim_next",
        description: "Claim the oldest claimable unit (stale ones first) with a lease. If you already hold a unit you get \
            that one back, lease renewed. `outcome` says which: `claimed` (a new attempt), `renewed` (the unit you \
            already hold, lease extended) or `held` (your BLOCKED unit, nothing written). Returns a null unit when \
            nothing is claimable.",
        needs: AGENT,
        tool: tool::<ClaimNextArgs>,
    },
    ToolSpec {
        name: "claim_unit",
        description: "Claim one named unit that is READY or stale.",
        needs: AGENT,
        tool: tool::<ClaimUnitArgs>,
    },
    ToolSpec {
        name: "heartbeat",
        description: "Extend the lease of the unit you hold (pass its currentAttemptId). Do it well before leaseExpiresAt.",
        needs: AGENT,
        tool: tool::<HeartbeatArgs>,
    },
    ToolSpec {
        name: "start_work",
        description: "Move the unit you claimed from CLAIMED to IN_PROGRESS.",
        needs: AGENT,
        tool: tool::<UnitArgs>,
    },
    ToolSpec {
        name: "record_cost",
        description: "Add what your attempt on a unit cost, in cents. Allowed any time, also after verify or dispose.",
        needs: BILLING,
        tool: tool::<CostArgs>,
    },
    ToolSpec {
        name: "verify",
        description: "IN_PROGRESS -> VERIFIED with a link to the evidence. Ends your attempt: you may claim the next \
            unit, and then dispose of this one with MIGRATED.",
        needs: AGENT,
        tool: tool::<VerifyArgs>,
    },
    ToolSpec {
        name: "block",
        description: "IN_PROGRESS -> BLOCKED with a question for triage. You keep the unit; wait for the answer \
            (get_unit shows it) or release the unit.",
        needs: AGENT,
        tool: tool::<BlockArgs>,
    },
    ToolSpec {
        name: "release",
        description: "Give the unit up: your attempt ends and the unit is READY for someone else (a BLOCKED unit \
            stays blocked until answered).",
        needs: AGENT,
        tool: tool::<ReleaseArgs>,
    },
    ToolSpec {
        name: "dispose",
        description: "Set the unit's permanent disposition: MIGRATED from VERIFIED; DROPPED, DEFERRED or DEAD (with \
            evidenceUrl) from IN_PROGRESS or BLOCKED. Permanent: it can never be changed.",
        needs: BILLING,
        tool: tool::<DisposeArgs>,
    },
    ToolSpec {
        name: "my_work",
        description: "What you hold (your live claim, at most one) and which VERIFIED units await your disposition.",
        needs: AGENT,
        tool: tool::<NoArgs>,
    },
    ToolSpec {
        name: "open_questions",
        description: "Blocking questions waiting for an answer, oldest first (at most 100).",
        needs: TRIAGE,
        tool: tool::<QuestionsArgs>,
    },
    ToolSpec {
        name: "answer_question",
        description: "Answer a blocked unit's question: the unit goes back to its holder (IN_PROGRESS), or to READY \
            when the holder released it.",
        needs: TRIAGE,
        tool: tool::<AnswerArgs>,
    },
    ToolSpec {
        name: "get_unit",
        description: "One unit by id or externalRef, with its state, holder, cost, open question and legalActions.",
        needs: READER,
        tool: tool::<GetUnitArgs>,
    },
    ToolSpec {
        name: "queue_depth",
        description: "Open work per domain: ready, claimed, in progress, blocked, verified and stalled counts.",
        needs: READER,
        tool: tool::<QueueDepthArgs>,
    },
];

fn visible(spec: &ToolSpec, who: &Principal) -> bool {
    spec.needs.iter().any(|p| who.has(*p))
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
        let mut info =
            McpServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(INSTRUCTIONS);
        info.server_info = Implementation::new("work-ledger", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let who = principal(&context)?;
        let tools =
            TOOLS.iter().filter(|spec| visible(spec, &who)).map(|spec| (spec.tool)(spec.name, spec.description));
        Ok(ListToolsResult::with_all_items(tools.collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let who = principal(&context)?;
        let Some(spec) = TOOLS.iter().find(|spec| spec.name == request.name) else {
            return Err(ErrorData::invalid_params(format!("no tool named `{}`", request.name), None));
        };
        if !visible(spec, &who) {
            let refusal = LedgerError::Forbidden(spec.needs[0]);
            return Ok(refused(refusal).into());
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        // The ledger operation's span, as for a GraphQL root field (see `graphql::operation_metrics`).
        let span = tracing::info_span!(
            "ledger.operation",
            otel.name = spec.name,
            operation = spec.name,
            fleet = who.fleet.as_str(),
            agent = who.name.as_str(),
            unit_id = tracing::field::Empty,
            code = tracing::field::Empty,
        );
        if let Some(unit) = args["unitId"].as_str() {
            span.record("unit_id", unit);
        }
        let result = match self.run(spec.name, args, &who).instrument(span.clone()).await {
            Ok(value) => {
                if let Some(unit) = value["unit"]["id"].as_str().or(value["id"].as_str()) {
                    span.record("unit_id", unit);
                }
                span.record("code", "OK");
                CallToolResult::structured(value)
            }
            Err(err) => {
                span.record("code", err.code());
                refused(err)
            }
        };
        Ok(result.into())
    }
}

/// A refusal as a tool error: the GraphQL error object, flattened to
/// `{ code, message, unitId?, state?, legalActions?, ... }`.
fn refused(err: LedgerError) -> CallToolResult {
    let object = error_object(err);
    let mut flat = serde_json::Map::new();
    flat.insert("message".into(), object["message"].clone());
    if let Some(extensions) = object["extensions"].as_object() {
        flat.extend(extensions.clone());
    }
    CallToolResult::structured_error(Value::Object(flat))
}

fn parse<T: DeserializeOwned>(args: Value) -> Result<T, LedgerError> {
    serde_json::from_value(args).map_err(|err| {
        // serde's message names the field and the expected type; no input is echoed back.
        LedgerError::invalid("arguments", format!("{err}; see the tool's input schema"))
    })
}

impl LedgerTools {
    async fn run(&self, tool: &str, args: Value, who: &Principal) -> Result<Value, LedgerError> {
        let ledger = &self.ledger;
        let unit = match tool {
            "claim_next" => {
                let a: ClaimNextArgs = parse(args)?;
                let claimed = ledger.claim_next_outcome(who, a.domain, a.lease_seconds, a.idempotency_key).await?;
                return Ok(match claimed {
                    Some((outcome, unit)) => json!({ "outcome": outcome.name(), "unit": unit_json(&unit, who) }),
                    None => json!({ "unit": null, "hint": "nothing is claimable right now; try again later" }),
                });
            }
            "claim_unit" => {
                let a: ClaimUnitArgs = parse(args)?;
                ledger.claim_unit(who, a.unit_id, a.lease_seconds, a.idempotency_key).await?
            }
            "heartbeat" => {
                let a: HeartbeatArgs = parse(args)?;
                ledger.heartbeat(who, a.attempt_id, a.lease_seconds).await?
            }
            "start_work" => {
                let a: UnitArgs = parse(args)?;
                ledger.transition(who, a.unit_id, WorkState::InProgress, None, a.attempt_id, a.idempotency_key).await?
            }
            "record_cost" => {
                let a: CostArgs = parse(args)?;
                ledger.record_cost(who, CostTarget::Unit(a.unit_id), a.cents, a.idempotency_key).await?
            }
            "verify" => {
                let a: VerifyArgs = parse(args)?;
                ledger
                    .transition(
                        who,
                        a.unit_id,
                        WorkState::Verified,
                        Some(a.evidence_url),
                        a.attempt_id,
                        a.idempotency_key,
                    )
                    .await?
            }
            "block" => {
                let a: BlockArgs = parse(args)?;
                ledger.block(who, a.unit_id, a.question, a.assignee_group, a.attempt_id, a.idempotency_key).await?
            }
            "release" => {
                let a: ReleaseArgs = parse(args)?;
                let outcome = a.failed.unwrap_or(false).then_some(AttemptOutcome::Failed);
                let input = Release { unit_id: a.unit_id, attempt_id: a.attempt_id, reason: a.reason, outcome };
                ledger.release(who, input, a.idempotency_key).await?
            }
            "dispose" => {
                let a: DisposeArgs = parse(args)?;
                let input = Dispose {
                    attempt_id: a.attempt_id,
                    unit_id: a.unit_id,
                    disposition: a.disposition.into(),
                    evidence_url: a.evidence_url,
                    reason: a.reason,
                };
                ledger.dispose(who, input, a.idempotency_key).await?
            }
            "my_work" => {
                let _: NoArgs = parse(args)?;
                let held = ledger.held_unit(who).await?;
                let awaiting = ledger.awaiting_disposition(who).await?;
                return Ok(json!({
                    "heldUnit": held.map(|unit| unit_json(&unit, who)),
                    "awaitingDisposition": awaiting.iter().map(|unit| unit_json(unit, who)).collect::<Vec<_>>(),
                }));
            }
            "open_questions" => {
                let a: QuestionsArgs = parse(args)?;
                let page = PageArgs { first: Some(100), after: None };
                let filter = QuestionFilter {
                    status: Some(QuestionStatus::Open),
                    assignee_group: a.assignee_group,
                    ..Default::default()
                };
                let page = ledger.questions_page(who, page, filter).await?;
                return Ok(json!({ "questions": page.items.iter().map(question_json).collect::<Vec<_>>() }));
            }
            "answer_question" => {
                let a: AnswerArgs = parse(args)?;
                ledger.unblock(who, a.unit_id, a.question_id, a.answer, a.idempotency_key).await?
            }
            "get_unit" => {
                let a: GetUnitArgs = parse(args)?;
                let (found, asked) = match (a.unit_id, a.external_ref) {
                    (Some(id), None) => (ledger.unit(who, id).await?, id.to_string()),
                    (None, Some(external_ref)) => (ledger.unit_by_ref(who, external_ref.clone()).await?, external_ref),
                    _ => return Err(LedgerError::invalid("unitId/externalRef", "pass exactly one of the two")),
                };
                let Some(unit) = found else { return Err(LedgerError::not_found("unit", asked)) };
                let questions = ledger.questions_of_units(who, vec![unit.id]).await?;
                let open = questions.iter().find(|q| q.status == QuestionStatus::Open);
                let mut body = unit_json(&unit, who);
                body["openQuestion"] = open.map(question_json).unwrap_or(Value::Null);
                return Ok(json!({ "unit": body }));
            }
            "queue_depth" => {
                let a: QueueDepthArgs = parse(args)?;
                let rows = ledger.queue_depth(who, a.domain).await?;
                let rows: Vec<Value> = rows
                    .into_iter()
                    .map(|r| {
                        json!({ "domain": r.domain, "ready": r.ready, "claimed": r.claimed, "inProgress": r.in_progress,
                                "blocked": r.blocked, "verified": r.verified, "stalled": r.stalled })
                    })
                    .collect();
                return Ok(json!({ "queueDepth": rows }));
            }
            other => return Err(LedgerError::invalid("name", format!("no tool named `{other}`"))),
        };
        Ok(json!({ "unit": unit_json(&unit, who) }))
    }
}

/// A unit as the tools return it: the fields of GraphQL's `WorkUnit` an
/// agent acts on, in the same camelCase, with what `who` may do next.
pub fn unit_json(unit: &UnitModel, who: &Principal) -> Value {
    json!({
        "id": unit.id,
        "externalRef": unit.external_ref,
        "domain": unit.domain,
        "state": unit.state.api_name(),
        "disposition": unit.disposition.map(|d| d.as_sql()),
        "claimedBy": unit.claimed_by,
        "currentAttemptId": unit.current_attempt_id,
        "attemptCount": unit.attempt_count,
        "leaseExpiresAt": unit.lease_expires_at,
        "costCents": unit.cost_cents,
        "evidenceUrls": unit.evidence_urls,
        "legalActions": legal_actions(unit, who, Utc::now()),
    })
}

fn question_json(q: &question::Model) -> Value {
    json!({
        "id": q.id,
        "unitId": q.unit_id,
        "question": q.question,
        "assigneeGroup": q.assignee_group,
        "askedBy": q.asked_by,
        "createdAt": q.created_at,
        "answer": q.answer,
    })
}

/// The tool names, for the quick start.
pub fn tool_names() -> impl Iterator<Item = (&'static str, &'static str)> {
    TOOLS.iter().map(|spec| (spec.name, spec.description))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema_and_a_unique_name() {
        let mut names: Vec<&str> = TOOLS.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), TOOLS.len());
        for spec in TOOLS {
            let tool = (spec.tool)(spec.name, spec.description);
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{}", spec.name);
        }
    }
}
