//! Counts and times every GraphQL request by its root field (`claimNext`,
//! `units`, ...) and result code (`OK`, or the first error's
//! `extensions.code`), into the ledger's [`Metrics`](crate::metrics::Metrics).
//! A document that does not parse or validate is counted as `invalid`: its
//! names are the client's, and labels must stay bounded.
//!
//! Each root field also runs in a span of its own, the ledger operation
//! (exported over OTLP when configured, see [`crate::telemetry`]): named
//! after the field, with the caller's fleet and agent, the unit (from the
//! `unitId`/`id` argument, the unit the operation returned, or the unit a
//! claim took) and the result code. Never the token.

use std::future::Future;
use std::sync::Mutex;
use std::time::Instant;

use async_graphql::extensions::{ExtensionContext, NextResolve, ResolveInfo};
use async_graphql::parser::types::{ExecutableDocument, Selection};
use async_graphql::{Response, ServerError, ServerResult, Value, Variables};
use tracing::Instrument;

use crate::auth::Principal;
use crate::ledger::Ledger;
use crate::metrics::{Operation, OperationName};

/// What one request's metrics and spans need to know (held by the schema's
/// one extension, [`super::hooks`]). `metrics`: count and time requests (off
/// when the service exports no metrics); spans are made either way.
#[derive(Default)]
pub(super) struct PerRequest {
    metrics: bool,
    /// The first root field of the parsed document.
    root_field: Mutex<Option<String>>,
    /// The request's variables (a unit id may come in one).
    variables: Mutex<Option<Variables>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// SPEC §5's code of an error, `ERROR` when it has none.
fn code_of(err: &ServerError) -> String {
    err.extensions
        .as_ref()
        .and_then(|ext| ext.get("code"))
        .map(|code| code.to_string().trim_matches('"').to_owned())
        .unwrap_or_else(|| "ERROR".to_owned())
}

impl PerRequest {
    pub(super) fn new(metrics: bool) -> Self {
        Self { metrics, ..Self::default() }
    }

    /// The request, counted and timed by its root field and result code.
    pub(super) async fn request(&self, ctx: &ExtensionContext<'_>, run: impl Future<Output = Response>) -> Response {
        if !self.metrics {
            return run.await;
        }
        let started = Instant::now();
        let response = run.await;
        let Some(ledger) = ctx.data_opt::<Ledger>() else { return response };
        let code = response.errors.first().map(code_of).unwrap_or_else(|| "OK".to_owned());
        let operation = if code.starts_with("GRAPHQL_") {
            "invalid".to_owned()
        } else {
            lock(&self.root_field).clone().unwrap_or_else(|| "invalid".to_owned())
        };
        let metrics = ledger.metrics();
        metrics
            .latency
            .get_or_create(&OperationName { operation: operation.clone() })
            .observe(started.elapsed().as_secs_f64());
        metrics.requests.get_or_create(&Operation { operation, code }).inc();
        response
    }

    /// The variables, before the document is parsed.
    pub(super) fn variables(&self, variables: &Variables) {
        *lock(&self.variables) = Some(variables.clone());
    }

    /// The document parsed and checked: its first root field names the request.
    pub(super) fn parsed(&self, document: &ExecutableDocument) {
        let first = document.operations.iter().next().and_then(|(_, operation)| {
            operation.node.selection_set.node.items.iter().find_map(|item| match &item.node {
                Selection::Field(field) => Some(field.node.name.node.to_string()),
                _ => None,
            })
        });
        *lock(&self.root_field) = first;
    }

    /// A field resolved: a root field in a span of its own.
    pub(super) async fn resolve(
        &self,
        ctx: &ExtensionContext<'_>,
        info: ResolveInfo<'_>,
        next: NextResolve<'_>,
    ) -> ServerResult<Option<Value>> {
        if info.path_node.parent.is_some() || info.is_for_introspection {
            return next.run(ctx, info).await;
        }
        let who = ctx.data_opt::<Principal>();
        let span = tracing::info_span!(
            "ledger.operation",
            otel.name = info.name,
            operation = info.name,
            fleet = who.map(|w| w.fleet.as_str()),
            agent = who.map(|w| w.name.as_str()),
            unit_id = tracing::field::Empty,
            code = tracing::field::Empty,
        );
        if let Some(unit) = self.unit_argument(&info) {
            span.record("unit_id", unit);
        }
        let result = next.run(ctx, info).instrument(span.clone()).await;
        match &result {
            Ok(value) => {
                if let Some(Value::Object(unit)) = value
                    && let Some(Value::String(id)) = unit.get("id")
                {
                    span.record("unit_id", id.as_str());
                }
                span.record("code", "OK");
            }
            Err(err) => {
                span.record("code", code_of(err));
            }
        }
        result
    }

    /// The `unitId` (or `id`) argument of a root field, variables resolved.
    fn unit_argument(&self, info: &ResolveInfo<'_>) -> Option<String> {
        let argument = info.field.get_argument("unitId").or_else(|| info.field.get_argument("id"))?;
        let variables = lock(&self.variables);
        let value = argument
            .node
            .clone()
            .into_const_with(|name| variables.as_ref().and_then(|v| v.get(&name).cloned()).ok_or(()))
            .ok()?;
        match value {
            Value::String(id) => Some(id),
            _ => None,
        }
    }
}
