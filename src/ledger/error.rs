//! The domain error enum: every refusal an agent can meet, each with the code
//! of SPEC §5 and a message that names the broken rule and the next legal step.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::auth::{AuthError, Forbidden, Permission};
use crate::db::entities::{Disposition, WorkState};

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{0}")]
    Unauthenticated(Cow<'static, str>),

    #[error("this token lacks the permission `{0}`; ask an operator for a token whose role grants it")]
    Forbidden(Permission),

    /// A request refused before authentication for where it comes from (a
    /// `Host` or WebSocket `Origin` not allowed); the text says what to set.
    #[error("{0}")]
    RequestRefused(String),

    #[error("no {what} with id {id} exists in your fleet; list units with `units` or look one up with `unitByRef`")]
    NotFound { what: &'static str, id: String },

    #[error("invalid argument `{argument}`: {rule}")]
    InvalidInput { argument: String, rule: String },

    /// `lease_expires_at` is `None` while the unit is BLOCKED (its lease is
    /// suspended until the question is answered or the unit is released).
    #[error("{}", already_claimed_message(*unit_id, holder, *lease_expires_at))]
    UnitAlreadyClaimed { unit_id: Uuid, holder: String, lease_expires_at: Option<DateTime<Utc>> },

    #[error(
        "you already hold unit {held} ({held_ref}); finish it (`transition`/`dispose`) or `release` it \
         before claiming another"
    )]
    AgentBusy { held: Uuid, held_ref: String },

    #[error(
        "unit {unit_id} is run by the Temporal workflow `{workflow_id}`: the ledger records its runs, and agents do \
         not claim it. Call `claimNext` for a unit of your own"
    )]
    WorkflowOwned { unit_id: Uuid, workflow_id: String },

    #[error("{}", illegal_transition_message(*unit_id, *from, to, legal))]
    IllegalTransition { unit_id: Uuid, from: WorkState, to: String, legal: Vec<String> },

    #[error(
        "unit {unit_id} is held by {}; only the holder may do this. Call `claimNext` to get a unit of your own",
        holder.as_deref().map(|h| format!("`{h}`")).unwrap_or_else(|| "nobody".to_owned())
    )]
    NotClaimHolder { unit_id: Uuid, holder: Option<String> },

    #[error(
        "your attempt {attempt_id} is no longer the current attempt of unit {unit_id} (its lease expired and \
         someone reclaimed the unit, or a newer claim replaced it); stop working on it and call `claimNext` for \
         new work"
    )]
    LeaseLost { attempt_id: Uuid, unit_id: Uuid },

    #[error("{action} requires `evidenceUrl`, an absolute http(s) link to the evidence (a commit, a PR, a CI run)")]
    EvidenceRequired { action: &'static str },

    /// `may_register`: whether the caller's token may take the next step
    /// the message names (`registerUnits`, permission `units:register`).
    #[error(
        "unit {unit_id} was already disposed as {} at {disposed_at}; dispositions are permanent. A superseding \
         decision is recorded by registering a new unit with `registerUnits` (permission `units:register`): {}",
        disposition.as_sql(),
        if *may_register { "your token has it" } else { "your token lacks it: ask an operator" }
    )]
    DispositionImmutable { unit_id: Uuid, disposition: Disposition, disposed_at: DateTime<Utc>, may_register: bool },

    #[error("{}", question_not_open_message(*unit_id, *question_id, *open_question))]
    QuestionNotOpen { unit_id: Uuid, question_id: Uuid, open_question: Option<Uuid> },

    #[error(
        "idempotency key `{key}` was already used for another operation or other arguments; use a fresh key \
         for a new request, or resend exactly the original one"
    )]
    IdempotencyKeyReused { key: String },

    #[error(
        "the database is unreachable or restarting; retry the same request with the same idempotency key in a \
         few seconds (a write that did happen is then answered from its key, never done twice)"
    )]
    Unavailable,

    #[error(
        "a token runs {limit} fleet-wide read(s) at a time (queueDepth, costSummary, throughput, weeklyMetrics, \
         claimingAgents, dispositionSummary, stalls, totalCount) and this one waited too long for its turn \
         behind this token's others; retry when they have finished"
    )]
    ReadsBusy { limit: usize },

    #[error(
        "the database did not finish this request in time (a statement ran past the statement timeout, or \
         waited past the lock timeout for a row another request holds); nothing was written: retry the same \
         request with the same idempotency key"
    )]
    TimedOut,

    #[error("internal error (correlation id {correlation_id}); the request changed nothing and may be retried")]
    /// The trace id (32 hex digits) when traces are exported, so that the
    /// operator finds the request's trace by it; otherwise a random id of
    /// the same form.
    Internal { correlation_id: String },

    /// A refusal about an existing unit, with what the caller needs to act:
    /// the unit, its state and the legal next actions (SPEC §5). The code
    /// and the message are the reason's.
    #[error("{reason}")]
    AboutUnit { unit: Box<UnitFacts>, reason: Box<LedgerError> },

    /// A race the ledger resolves by running the operation again (a
    /// concurrent request took the same idempotency key, the same agent
    /// claimed twice at once, or PostgreSQL chose this transaction as a
    /// deadlock or serialization victim). Never reaches a client: after the last retry
    /// it is reported as INTERNAL.
    #[error("a concurrent request changed the same data; retry")]
    Retry,
}

/// What every refusal about a unit tells the caller about it.
#[derive(Debug, Clone)]
pub struct UnitFacts {
    pub unit_id: Uuid,
    pub state: WorkState,
    /// What the caller may do next (`WorkUnit.legalActions`).
    pub legal_actions: Vec<String>,
}

fn already_claimed_message(unit_id: Uuid, holder: &str, lease_expires_at: Option<DateTime<Utc>>) -> String {
    let until = match lease_expires_at {
        Some(at) => at.to_rfc3339(),
        None => "its blocking question is answered or it is released".to_owned(),
    };
    format!(
        "unit {unit_id} is already claimed by `{holder}` until {until}; call `claimNext` to get another unit, \
         or retry this one after the lease ends"
    )
}

fn question_not_open_message(unit_id: Uuid, question_id: Uuid, open: Option<Uuid>) -> String {
    match open {
        Some(open) => format!(
            "question {question_id} is not the open question of unit {unit_id} (it was answered, cancelled or replaced); \
             its open question is {open}: read it (`unit {{ openQuestion {{ id question }} }}`) and answer that one"
        ),
        None => format!(
            "question {question_id} is not open and unit {unit_id} has no open question now (it was answered, \
             cancelled, or the unit moved on); nothing to answer"
        ),
    }
}

fn illegal_transition_message(unit_id: Uuid, from: WorkState, to: &str, legal: &[String]) -> String {
    let next = if legal.is_empty() { "nothing: the unit is terminal".to_owned() } else { legal.join(", ") };
    format!("unit {unit_id} is {} and cannot go to {to}; legal next actions for you: {next}", from.api_name())
}

impl LedgerError {
    /// The `extensions.code` of SPEC §5.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => "UNAUTHENTICATED",
            Self::Forbidden(_) | Self::RequestRefused(_) => "FORBIDDEN",
            Self::NotFound { .. } => "NOT_FOUND",
            Self::InvalidInput { .. } => "INVALID_INPUT",
            Self::UnitAlreadyClaimed { .. } => "UNIT_ALREADY_CLAIMED",
            Self::AgentBusy { .. } => "AGENT_BUSY",
            Self::WorkflowOwned { .. } => "WORKFLOW_OWNED",
            Self::IllegalTransition { .. } => "ILLEGAL_TRANSITION",
            Self::NotClaimHolder { .. } => "NOT_CLAIM_HOLDER",
            Self::LeaseLost { .. } => "LEASE_LOST",
            Self::EvidenceRequired { .. } => "EVIDENCE_REQUIRED",
            Self::DispositionImmutable { .. } => "DISPOSITION_IMMUTABLE",
            Self::IdempotencyKeyReused { .. } => "IDEMPOTENCY_KEY_REUSED",
            Self::QuestionNotOpen { .. } => "QUESTION_NOT_OPEN",
            Self::AboutUnit { reason, .. } => reason.code(),
            Self::Unavailable | Self::TimedOut | Self::ReadsBusy { .. } => "UNAVAILABLE",
            Self::Internal { .. } | Self::Retry => "INTERNAL",
        }
    }

    /// The refusal with the unit's facts attached (once; never on a retry or
    /// an internal error, which are not about the unit).
    pub fn about(self, unit: UnitFacts) -> Self {
        match self {
            Self::AboutUnit { .. } | Self::Retry | Self::Internal { .. } | Self::NotFound { .. } => self,
            reason => Self::AboutUnit { unit: Box::new(unit), reason: Box::new(reason) },
        }
    }

    /// Whether the same request may well succeed a moment later: the
    /// database unreachable or restarting, or a statement or lock timeout
    /// (UNAVAILABLE, apart from a token's own fleet-wide reads being busy).
    pub fn is_transient(&self) -> bool {
        matches!(self.reason(), Self::Unavailable | Self::TimedOut)
    }

    /// The error without the unit's facts.
    pub fn reason(&self) -> &Self {
        match self {
            Self::AboutUnit { reason, .. } => reason,
            other => other,
        }
    }

    pub fn invalid(argument: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::InvalidInput { argument: argument.into(), rule: rule.into() }
    }

    pub fn not_found(what: &'static str, id: impl ToString) -> Self {
        Self::NotFound { what, id: id.to_string() }
    }

    /// Logs an unexpected failure with a correlation id (the trace id when
    /// traces are exported) and returns the opaque error the client sees.
    /// The cause never reaches the client.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        let correlation_id =
            crate::telemetry::current_trace_id().unwrap_or_else(|| Uuid::new_v4().simple().to_string());
        tracing::error!(%correlation_id, error = %cause, "internal error");
        Self::Internal { correlation_id }
    }
}

/// Constraints a concurrent request can trip that a retry resolves: the
/// retry finds the other request's key (a replay) or the agent's claim.
const RETRYABLE: [&str; 2] = ["work_unit_events_agent_source_event_id_key", "work_units_one_live_claim_per_agent"];

impl From<Forbidden> for LedgerError {
    fn from(Forbidden(permission): Forbidden) -> Self {
        Self::Forbidden(permission)
    }
}

impl From<AuthError> for LedgerError {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Unauthenticated(message) => Self::Unauthenticated(message),
            AuthError::Database(err) => err.into(),
        }
    }
}

/// A token the database refused at the start of a read (`ledger_session`):
/// revoked or expired since the request was admitted, like any refusal of
/// its kind.
impl From<crate::db::tokens::Refusal> for LedgerError {
    fn from(refusal: crate::db::tokens::Refusal) -> Self {
        use crate::db::tokens::Refusal;
        match refusal {
            Refusal::Unknown => Self::Unauthenticated(crate::auth::UNKNOWN_TOKEN.into()),
            Refusal::Expired(at) => Self::Unauthenticated(crate::auth::expired(at).into()),
            Refusal::Forbidden => Self::Forbidden(crate::auth::Permission::LedgerRead),
        }
    }
}

/// SQLSTATEs after which PostgreSQL itself says "run the transaction again":
/// deadlock_detected and serialization_failure.
const RETRYABLE_STATES: [&str; 2] = ["40P01", "40001"];

impl From<sea_orm::DbErr> for LedgerError {
    fn from(err: sea_orm::DbErr) -> Self {
        if RETRYABLE.iter().any(|c| crate::db::is_violation_of(&err, c)) {
            return Self::Retry;
        }
        if crate::db::is_timeout(&err) {
            tracing::warn!(error = %err, "statement or lock timeout");
            return Self::TimedOut;
        }
        if crate::db::is_unavailable(&err) {
            tracing::warn!(error = %err, "database unavailable");
            // Perhaps the primary was lost or demoted: look for it again.
            crate::db::primary::suspect();
            return Self::Unavailable;
        }
        if crate::db::violation(&err).is_some_and(|(code, _)| RETRYABLE_STATES.contains(&code.as_str())) {
            tracing::warn!(error = %err, "transaction conflict; running it again");
            return Self::Retry;
        }
        Self::internal(err)
    }
}
