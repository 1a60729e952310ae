//! Request errors: a document that does not parse, does not validate, or
//! whose variables do not coerce is refused before anything runs. This
//! extension gives those errors their codes (`GRAPHQL_PARSE_FAILED`,
//! `GRAPHQL_VALIDATION_FAILED`), refuses a missing or null value for a
//! required variable (async-graphql only checks variables where they are
//! used), and records whether execution started, which is how the HTTP layer
//! tells a request error (HTTP 400 and no `data` entry under
//! `application/graphql-response+json`) from an execution that failed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_graphql::Value as ConstValue;
use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextExecute, NextParseQuery, NextPrepareRequest, NextValidation,
};
use async_graphql::parser::types::{
    BaseType, DocumentOperations, ExecutableDocument, OperationDefinition, OperationType, Type,
};
use async_graphql::registry::{MetaType, Registry};
use async_graphql::{Positioned, Request, Response, ServerError, ServerResult, ValidationResult, Variables};

pub const PARSE_FAILED: &str = "GRAPHQL_PARSE_FAILED";
pub const VALIDATION_FAILED: &str = "GRAPHQL_VALIDATION_FAILED";

/// Put into a request's data by the HTTP layer; set once execution starts.
#[derive(Clone, Default)]
pub struct ExecutionStarted(Arc<AtomicBool>);

impl ExecutionStarted {
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Gives `err` the code `code` unless it has one.
pub fn with_code(mut err: ServerError, code: &str) -> ServerError {
    let extensions = err.extensions.get_or_insert_with(Default::default);
    if extensions.get("code").is_none() {
        extensions.set("code", code);
    }
    err
}

pub struct RequestErrors;

impl ExtensionFactory for RequestErrors {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(PerRequest::default())
    }
}

#[derive(Default)]
struct PerRequest {
    operation_name: Mutex<Option<String>>,
}

#[async_graphql::async_trait::async_trait]
impl Extension for PerRequest {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        *self.operation_name.lock().unwrap_or_else(|e| e.into_inner()) = request.operation_name.clone();
        next.run(ctx, request).await
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        let document = next.run(ctx, query, variables).await.map_err(|err| with_code(err, PARSE_FAILED))?;
        let name = self.operation_name.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(operation) = selected(&document, name.as_deref()) {
            // Only HTTP requests carry the flag; async-graphql's own refusal
            // of a subscription there has no code.
            if operation.node.ty == OperationType::Subscription && ctx.data_opt::<ExecutionStarted>().is_some() {
                return Err(subscription_over_http(operation.pos));
            }
            let registry = &ctx.schema_env.registry;
            required_variables(registry, operation, variables).map_err(|err| with_code(err, VALIDATION_FAILED))?;
        }
        Ok(document)
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        next.run(ctx).await.map_err(|errs| errs.into_iter().map(|err| with_code(err, VALIDATION_FAILED)).collect())
    }

    async fn execute(
        &self,
        ctx: &ExtensionContext<'_>,
        operation_name: Option<&str>,
        next: NextExecute<'_>,
    ) -> Response {
        if let Some(started) = ctx.data_opt::<ExecutionStarted>() {
            started.0.store(true, Ordering::Release);
        }
        next.run(ctx, operation_name).await
    }
}

/// A subscription sent to `/graphql` over HTTP: refused before anything
/// runs, saying where subscriptions go.
fn subscription_over_http(pos: async_graphql::Pos) -> ServerError {
    let mut err = ServerError::new(
        "subscriptions run over WebSocket: connect to /graphql/ws with the graphql-transport-ws protocol; \
         POST and GET /graphql carry queries and mutations",
        Some(pos),
    );
    let extensions = err.extensions.get_or_insert_with(Default::default);
    extensions.set("code", "INVALID_INPUT");
    extensions.set("argument", "query");
    err
}

/// The operation a request runs (async-graphql reports an unknown or
/// missing name itself).
fn selected<'a>(document: &'a ExecutableDocument, name: Option<&str>) -> Option<&'a Positioned<OperationDefinition>> {
    match (&document.operations, name) {
        (DocumentOperations::Single(operation), _) => Some(operation),
        (DocumentOperations::Multiple(operations), Some(name)) => {
            operations.iter().find(|(n, _)| n.as_str() == name).map(|(_, op)| op)
        }
        (DocumentOperations::Multiple(operations), None) if operations.len() == 1 => operations.values().next(),
        _ => None,
    }
}

/// A variable of a non-null type with no default needs a non-null value,
/// and a value of a built-in scalar type (or a UUID) must be one, also
/// inside an input object (`$filter: EventFilter` with a `unitId` that is
/// not a UUID is refused here, naming the field, instead of failing at
/// execution without a code).
fn required_variables(
    registry: &Registry,
    operation: &Positioned<OperationDefinition>,
    variables: &Variables,
) -> ServerResult<()> {
    for definition in &operation.node.variable_definitions {
        let definition = &definition.node;
        let name = definition.name.node.as_str();
        let value = variables.get(name);
        if let Some(value) = value
            && let Err(field) = coerces(registry, &definition.var_type.node, value)
        {
            let inside = field.map(|field| format!(" (field `{field}`)")).unwrap_or_default();
            return Err(ServerError::new(
                format!("variable `${name}` got a value that is not a `{}`{inside}", definition.var_type.node),
                Some(definition.name.pos),
            ));
        }
        let given = value.is_some_and(|v| !matches!(v, ConstValue::Null));
        if !definition.var_type.node.nullable && definition.default_value.is_none() && !given {
            return Err(ServerError::new(
                format!(
                    "variable `${name}` of required type `{}` was not provided (or is null); send it in `variables`",
                    definition.var_type.node
                ),
                Some(definition.name.pos),
            ));
        }
    }
    Ok(())
}

/// Whether `value` can be a `ty`, as far as scalars with a fixed shape go,
/// looking into input objects (enums and other scalars are left to
/// execution). `Err` names the input object field that cannot be, if any.
fn coerces(registry: &Registry, ty: &Type, value: &ConstValue) -> Result<(), Option<String>> {
    let fits = |ok: bool| if ok { Ok(()) } else { Err(None) };
    match (value, &ty.base) {
        (ConstValue::Null, _) => fits(ty.nullable),
        (ConstValue::List(items), BaseType::List(inner)) => {
            items.iter().try_for_each(|item| coerces(registry, inner, item))
        }
        (_, BaseType::List(inner)) => coerces(registry, inner, value),
        (_, BaseType::Named(name)) => match (name.as_str(), value) {
            ("Int", ConstValue::Number(n)) => fits(n.as_i64().is_some_and(|n| i32::try_from(n).is_ok())),
            ("Float", ConstValue::Number(_)) => Ok(()),
            ("String", ConstValue::String(_)) | ("Boolean", ConstValue::Boolean(_)) => Ok(()),
            ("ID", ConstValue::String(_)) => Ok(()),
            ("ID", ConstValue::Number(n)) => fits(n.is_i64() || n.is_u64()),
            ("UUID", ConstValue::String(s)) => fits(uuid::Uuid::parse_str(s).is_ok()),
            ("Int" | "Float" | "String" | "Boolean" | "ID" | "UUID", _) => Err(None),
            (other, ConstValue::Object(fields)) => match registry.types.get(other) {
                Some(MetaType::InputObject { input_fields, .. }) => {
                    for (field, value) in fields {
                        let Some(declared) = input_fields.get(field.as_str()) else { continue };
                        let Some(field_type) = Type::new(&declared.ty) else { continue };
                        coerces(registry, &field_type, value).map_err(|inner| {
                            Some(inner.map_or_else(|| field.to_string(), |inner| format!("{field}.{inner}")))
                        })?;
                    }
                    Ok(())
                }
                _ => Ok(()),
            },
            _ => Ok(()),
        },
    }
}
