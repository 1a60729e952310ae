//! The one mapping from domain errors to GraphQL errors: `extensions.code`,
//! the actionable message, and machine-readable details where an agent needs
//! them. Database text never gets here (see `LedgerError::internal`).
//! Refusals made outside GraphQL execution (HTTP before parsing, the
//! WebSocket protocol) are built from the same mapping by [`error_object`].

use async_graphql::{Error, ErrorExtensions, Name, ServerError, Value as GqlValue};
use serde_json::{Value, json};

use crate::auth::Permission;
use crate::ledger::LedgerError;

impl From<LedgerError> for Error {
    fn from(err: LedgerError) -> Self {
        Error::new(err.to_string()).extend_with(|_, ext| {
            ext.set("code", err.code());
            if let LedgerError::AboutUnit { unit, .. } = &err {
                ext.set("unitId", unit.unit_id.to_string());
                ext.set("state", unit.state.api_name());
                ext.set("legalActions", unit.legal_actions.clone());
            }
            match err.reason() {
                LedgerError::IllegalTransition { legal, from, to, .. } => {
                    ext.set("legalActions", legal.clone());
                    ext.set("from", from.api_name());
                    ext.set("to", to.clone());
                }
                LedgerError::UnitAlreadyClaimed { holder, lease_expires_at, .. } => {
                    ext.set("holder", holder.clone());
                    ext.set("leaseExpiresAt", lease_expires_at.map(|at| at.to_rfc3339()));
                }
                LedgerError::LeaseLost { attempt_id, unit_id } => {
                    ext.set("unitId", unit_id.to_string());
                    ext.set("attemptId", attempt_id.to_string());
                }
                LedgerError::AgentBusy { held, .. } => ext.set("heldUnitId", held.to_string()),
                LedgerError::WorkflowOwned { workflow_id, .. } => ext.set("workflowId", workflow_id.clone()),
                LedgerError::QuestionNotOpen { question_id, open_question, .. } => {
                    ext.set("questionId", question_id.to_string());
                    ext.set("openQuestionId", open_question.map(|q| q.to_string()));
                }
                LedgerError::DispositionImmutable { may_register, .. } => {
                    ext.set("nextStep", next_step("registerUnits", Permission::UnitsRegister, *may_register))
                }
                LedgerError::Forbidden(permission) => ext.set("permission", permission.as_str()),
                LedgerError::InvalidInput { argument, .. } => ext.set("argument", argument.clone()),
                LedgerError::EvidenceRequired { .. } => ext.set("argument", "evidenceUrl"),
                LedgerError::Internal { correlation_id } => ext.set("correlationId", correlation_id.as_str()),
                _ => {}
            }
        })
    }
}

/// The error that ends a subscription: the request's, except that one the
/// database caused for a while (UNAVAILABLE, after its reads were tried
/// again for the configured patience) says how to come back, since a
/// subscription has no idempotency key to retry with.
pub fn subscription_ended(err: LedgerError) -> Error {
    let transient = err.is_transient();
    let mut error = Error::from(err);
    if transient {
        error.message = RESUBSCRIBE.to_owned();
    }
    error
}

const RESUBSCRIBE: &str = "the database stayed unreachable or overloaded while this subscription read it; \
    subscribe again in a few seconds: `ledgerEvents(after:)` with the cursor of the last event received resumes \
    with nothing lost, and `blockingQuestionOpened` and `unitStalled` first send what is open or stalled now";

/// `extensions.nextStep`: the operation a refusal names as the way on,
/// the permission it needs and whether the caller's token has it.
fn next_step(operation: &str, permission: Permission, permitted: bool) -> GqlValue {
    GqlValue::Object(
        [
            (Name::new("operation"), GqlValue::from(operation)),
            (Name::new("permission"), GqlValue::from(permission.as_str())),
            (Name::new("permitted"), GqlValue::from(permitted)),
        ]
        .into_iter()
        .collect(),
    )
}

/// One GraphQL error object (`message`, `extensions`) for a refusal made
/// outside execution.
pub fn error_object(err: LedgerError) -> Value {
    let message = err.to_string();
    let err = Error::from(err);
    let mut server_error = ServerError::new(err.message, None);
    server_error.extensions = err.extensions;
    serde_json::to_value(&server_error).unwrap_or_else(|_| json!({ "message": message }))
}

/// A GraphQL response body that holds only `err`.
pub fn error_body(err: LedgerError) -> Value {
    json!({ "errors": [error_object(err)] })
}

pub type Result<T> = std::result::Result<T, Error>;
