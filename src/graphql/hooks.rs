//! The schema's one extension: every hook a request goes through, in the
//! order they must run, each calling the module that owns its rule.
//!
//! async-graphql runs every field of a response through each extension's
//! `resolve` (a boxed future per extension per field, and a registry lookup
//! per field, whether or not the extension has a `resolve` of its own). Six
//! extensions cost a 2,920-row `throughput(bucket: DAY)` about 105,000
//! boxed futures; one costs a sixth of that (issue 27). So there is one, and
//! the rules stay in their modules:
//!
//! | hook | what runs |
//! | --- | --- |
//! | request | [`operation_metrics`]: counted and timed by root field and code |
//! | prepare | [`notes`]: the response notes' store; [`request_errors`]: the operation's name |
//! | parse | the codes of parse errors; [`read_budget`]: fleet-wide reads and aliases; [`request_errors`]: subscriptions over HTTP, required variables; [`operation_metrics`]: the root field |
//! | validation | the codes of validation errors; [`guidance`]: the names meant |
//! | execute | [`request_errors`]: execution started; [`loaders`]: DataLoaders per execution; [`notes`]: into the response |
//! | resolve | [`operation_metrics`]: a span per root field |

use std::sync::{Arc, Mutex};

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextExecute, NextParseQuery, NextPrepareRequest, NextRequest,
    NextResolve, NextValidation, ResolveInfo,
};
use async_graphql::parser::types::ExecutableDocument;
use async_graphql::{Request, Response, ServerError, ServerResult, ValidationResult, Value, Variables};

use super::request_errors::{PARSE_FAILED, VALIDATION_FAILED, with_code};
use super::{guidance, loaders, notes, operation_metrics, read_budget, request_errors};

/// `metrics`: count and time every operation (the service exports metrics).
pub struct Hooks {
    pub metrics: bool,
}

impl ExtensionFactory for Hooks {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(PerRequest {
            metrics: operation_metrics::PerRequest::new(self.metrics),
            notes: Arc::default(),
            operation_name: Mutex::default(),
        })
    }
}

struct PerRequest {
    metrics: operation_metrics::PerRequest,
    notes: Arc<notes::Notes>,
    /// The operation the request names, for the checks of the parsed document.
    operation_name: Mutex<Option<String>>,
}

#[async_graphql::async_trait::async_trait]
impl Extension for PerRequest {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        self.metrics.request(ctx, next.run(ctx)).await
    }

    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        *self.operation_name.lock().unwrap_or_else(|e| e.into_inner()) = request.operation_name.clone();
        next.run(ctx, request.data(self.notes.clone())).await
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        self.metrics.variables(variables);
        let document = next.run(ctx, query, variables).await.map_err(|err| with_code(err, PARSE_FAILED))?;
        read_budget::check(&document)?;
        let name = self.operation_name.lock().unwrap_or_else(|e| e.into_inner()).clone();
        request_errors::check_parsed(ctx, &document, variables, name.as_deref())?;
        self.metrics.parsed(&document);
        Ok(document)
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        next.run(ctx).await.map_err(|errors| {
            let registry = &ctx.schema_env.registry;
            errors.into_iter().map(|err| guidance::teach(registry, with_code(err, VALIDATION_FAILED))).collect()
        })
    }

    async fn execute(
        &self,
        ctx: &ExtensionContext<'_>,
        operation_name: Option<&str>,
        next: NextExecute<'_>,
    ) -> Response {
        request_errors::execution_started(ctx);
        let mut response = match loaders::per_execution(ctx) {
            Some(data) => next.run_with_data(ctx, operation_name, data).await,
            None => next.run(ctx, operation_name).await,
        };
        notes::into_response(&self.notes, &mut response);
        response
    }

    async fn resolve(
        &self,
        ctx: &ExtensionContext<'_>,
        info: ResolveInfo<'_>,
        next: NextResolve<'_>,
    ) -> ServerResult<Option<Value>> {
        self.metrics.resolve(ctx, info, next).await
    }
}
