//! Counts and times every GraphQL request by its root field (`claimNext`,
//! `units`, ...) and result code (`OK`, or the first error's
//! `extensions.code`), into the ledger's [`Metrics`](crate::metrics::Metrics).
//! A document that does not parse or validate is counted as `invalid`: its
//! names are the client's, and labels must stay bounded.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextParseQuery, NextRequest};
use async_graphql::parser::types::{ExecutableDocument, Selection};
use async_graphql::{Response, ServerResult, Variables};

use crate::ledger::Ledger;
use crate::metrics::{Operation, OperationName};

pub struct OperationMetrics;

impl ExtensionFactory for OperationMetrics {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(PerRequest::default())
    }
}

#[derive(Default)]
struct PerRequest {
    /// The first root field of the parsed document.
    root_field: Mutex<Option<String>>,
}

#[async_graphql::async_trait::async_trait]
impl Extension for PerRequest {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        let started = Instant::now();
        let response = next.run(ctx).await;
        let Some(ledger) = ctx.data_opt::<Ledger>() else { return response };
        let code = match response.errors.first() {
            None => "OK".to_owned(),
            Some(err) => err
                .extensions
                .as_ref()
                .and_then(|ext| ext.get("code"))
                .map(|code| code.to_string().trim_matches('"').to_owned())
                .unwrap_or_else(|| "ERROR".to_owned()),
        };
        let operation = if code.starts_with("GRAPHQL_") {
            "invalid".to_owned()
        } else {
            self.root_field.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| "invalid".to_owned())
        };
        let metrics = ledger.metrics();
        metrics
            .latency
            .get_or_create(&OperationName { operation: operation.clone() })
            .observe(started.elapsed().as_secs_f64());
        metrics.requests.get_or_create(&Operation { operation, code }).inc();
        response
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        let document = next.run(ctx, query, variables).await?;
        let first = document.operations.iter().next().and_then(|(_, operation)| {
            operation.node.selection_set.node.items.iter().find_map(|item| match &item.node {
                Selection::Field(field) => Some(field.node.name.node.to_string()),
                _ => None,
            })
        });
        *self.root_field.lock().unwrap_or_else(|e| e.into_inner()) = first;
        Ok(document)
    }
}
