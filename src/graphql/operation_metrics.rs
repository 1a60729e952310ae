//! Counts and times every GraphQL request by its root field (`claimNext`,
//! `units`, ...) and result code (`OK`, or the first error's
//! `extensions.code`), into the ledger's [`Metrics`](crate::metrics::Metrics).
//! A document that does not parse or validate is counted as `invalid`: its
//! names are the client's, and labels must stay bounded.
//!
//! Each query or mutation also runs in a span of its own, the ledger
//! operation (exported over OTLP when configured, see [`crate::telemetry`]),
//! over HTTP, WebSocket and MCP alike: named after its first root field,
//! with the caller's fleet and agent, the unit (from that field's
//! `unitId`/`id` argument, the unit it returned, or the unit a claim took)
//! and the result code (the request's first error's). Never the token.

use std::time::Instant;

use async_graphql::parser::types::{ExecutableDocument, Field, OperationType, Selection};
use async_graphql::{Response, ServerError, Value, Variables};
use tracing::Span;

use super::request_errors::selected;
use crate::auth::Principal;
use crate::ledger::Ledger;
use crate::metrics::{Operation, OperationName};

/// What a request's metrics and span know of its document: the operation's
/// type and its first root field, with that field's unit argument.
#[derive(Debug, Clone)]
pub(super) struct Root {
    pub ty: OperationType,
    /// The first root field; `None` when the operation starts with a fragment.
    pub field: Option<String>,
    /// Its key in the response (its alias, if it has one).
    key: Option<String>,
    unit: Option<String>,
}

impl Root {
    /// The operation `name` selects in `document`, its variables resolved.
    pub fn of(document: &ExecutableDocument, name: Option<&str>, variables: &Variables) -> Option<Self> {
        let operation = selected(document, name)?;
        let first = operation.node.selection_set.node.items.iter().find_map(|item| match &item.node {
            Selection::Field(field) => Some(&field.node),
            _ => None,
        });
        Some(Self {
            ty: operation.node.ty,
            field: first.map(|f| f.name.node.to_string()),
            key: first.map(|f| f.response_key().node.to_string()),
            unit: first.and_then(|f| unit_argument(f, variables)),
        })
    }

    /// A document without the operation the request names.
    pub fn unknown() -> Self {
        Self { ty: OperationType::Query, field: None, key: None, unit: None }
    }

    /// The ledger operation's span (entered by the execution), its unit
    /// recorded when an argument names it.
    pub fn span(&self, who: Option<&Principal>) -> Span {
        let name = self.field.as_deref().unwrap_or("invalid");
        let span = tracing::info_span!(
            "ledger.operation",
            otel.name = name,
            operation = name,
            fleet = who.map(|w| w.fleet.as_str()),
            agent = who.map(|w| w.name.as_str()),
            unit_id = tracing::field::Empty,
            code = tracing::field::Empty,
        );
        if let Some(unit) = &self.unit {
            span.record("unit_id", unit.as_str());
        }
        span
    }

    /// The outcome on the span: the unit the first root field returned (a
    /// claim's), and the request's code (its first error's).
    pub fn finish(&self, span: &Span, response: &Response) {
        if let (Some(key), Value::Object(data)) = (&self.key, &response.data)
            && let Some(Value::Object(unit)) = data.get(key.as_str())
            && let Some(Value::String(id)) = unit.get("id")
        {
            span.record("unit_id", id.as_str());
        }
        span.record("code", response.errors.first().map(code_of).unwrap_or_else(|| "OK".to_owned()));
    }
}

/// The `unitId` (or `id`) argument of a root field, variables resolved.
fn unit_argument(field: &Field, variables: &Variables) -> Option<String> {
    let argument = field.get_argument("unitId").or_else(|| field.get_argument("id"))?;
    let value = argument.node.clone().into_const_with(|name| variables.get(&name).cloned().ok_or(())).ok()?;
    match value {
        Value::String(id) => Some(id),
        _ => None,
    }
}

/// SPEC §5's code of an error, `ERROR` when it has none.
fn code_of(err: &ServerError) -> String {
    err.extensions
        .as_ref()
        .and_then(|ext| ext.get("code"))
        .map(|code| code.to_string().trim_matches('"').to_owned())
        .unwrap_or_else(|| "ERROR".to_owned())
}

/// Counts and times a request that began at `began` (`root`: its checked
/// document's, `None` when it did not get that far).
pub(super) fn record(ledger: &Ledger, root: Option<&Root>, began: Instant, response: &Response) {
    let code = response.errors.first().map(code_of).unwrap_or_else(|| "OK".to_owned());
    let operation = match root.and_then(|r| r.field.clone()) {
        Some(field) if !code.starts_with("GRAPHQL_") => field,
        _ => "invalid".to_owned(),
    };
    let metrics = ledger.metrics();
    metrics
        .latency
        .get_or_create(&OperationName { operation: operation.clone() })
        .observe(began.elapsed().as_secs_f64());
    metrics.requests.get_or_create(&Operation { operation, code }).inc();
}
