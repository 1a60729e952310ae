//! Request errors: a document that does not parse, does not validate, or
//! whose variables do not coerce is refused before anything runs. The
//! schema's one way in ([`super::executor`]) gives those errors their codes (`GRAPHQL_PARSE_FAILED`,
//! `GRAPHQL_VALIDATION_FAILED`), refuses a missing or null value for a
//! required variable (async-graphql only checks variables where they are
//! used). [`executed`] tells a request error (HTTP 400 and no `data` entry
//! under `application/graphql-response+json`) from an execution that failed.

use async_graphql::Value as ConstValue;
use async_graphql::parser::types::{
    BaseType, DocumentOperations, ExecutableDocument, OperationDefinition, OperationType, Type,
};
use async_graphql::registry::{MetaType, Registry};
use async_graphql::{Positioned, Response, ServerError, ServerResult, Variables};

pub const PARSE_FAILED: &str = "GRAPHQL_PARSE_FAILED";
pub const VALIDATION_FAILED: &str = "GRAPHQL_VALIDATION_FAILED";

/// Put into a request's data by the HTTP layer: a subscription is refused
/// there with a code that says where subscriptions go.
#[derive(Clone, Copy, Default)]
pub struct OverHttp;

/// Whether `response` comes from an execution: a request refused before
/// it (parse, validation, variables, operation name) answers errors, none
/// with a path, and no data. An execution answers data, an error of a field
/// (with its path) that nulled it, or, when every root field was skipped
/// (`@skip`, `@include`), null data and no error.
pub fn executed(response: &Response) -> bool {
    let refused = matches!(response.data, ConstValue::Null)
        && !response.errors.is_empty()
        && response.errors.iter().all(|e| e.path.is_empty());
    !refused
}

/// Gives `err` the code `code` unless it has one.
pub fn with_code(mut err: ServerError, code: &str) -> ServerError {
    let extensions = err.extensions.get_or_insert_with(Default::default);
    if extensions.get("code").is_none() {
        extensions.set("code", code);
    }
    err
}

/// The checks of a parsed document before it is validated (run by
/// [`super::executor`]): a subscription over HTTP is refused, and a required
/// variable needs a value of its type. `operation_name` is the request's.
pub(super) fn check_parsed(
    registry: &Registry,
    over_http: bool,
    document: &ExecutableDocument,
    variables: &Variables,
    operation_name: Option<&str>,
) -> ServerResult<()> {
    if let Some(operation) = selected(document, operation_name) {
        // async-graphql's own refusal of a subscription there has no code.
        if operation.node.ty == OperationType::Subscription && over_http {
            return Err(subscription_over_http(operation.pos));
        }
        required_variables(registry, operation, variables).map_err(|err| with_code(err, VALIDATION_FAILED))?;
    }
    Ok(())
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
pub fn selected<'a>(
    document: &'a ExecutableDocument,
    name: Option<&str>,
) -> Option<&'a Positioned<OperationDefinition>> {
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
