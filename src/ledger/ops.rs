//! The write path of SPEC §3: each operation validates, checks permissions,
//! runs one conditional statement in one transaction, and when that statement
//! changed nothing, reads the unit to say exactly why.

use std::sync::Arc;

use chrono::Utc;
use sea_orm::DatabaseTransaction;
use serde_json::{Value, json};
use uuid::Uuid;

use super::state_machine::{self, legal_actions};
use super::{Ledger, LedgerError, UnitModel, idempotency, validate};
use crate::auth::{Permission, Principal};
use crate::db::entities::{AttemptOutcome, Disposition, WorkState, attempt};
use crate::db::writes::{self, Key, Writer};
use crate::db::{self, BoxFuture, units};

const RETRIES: usize = 4;
const DEFAULT_ASSIGNEE_GROUP: &str = "agent-questions";

/// The caller of a write, owned so the operation can be retried.
pub struct WriteCtx {
    pub who: Principal,
    /// The idempotency key and the request's fingerprint, when the caller sent a key.
    key: Option<(String, String)>,
}

impl WriteCtx {
    fn writer(&self) -> Writer<'_> {
        let key = self.key.as_ref().map(|(id, hash)| Key { id, hash });
        Writer { fleet: &self.who.fleet, agent: &self.who.name, key }
    }
}

enum Outcome<T> {
    /// The idempotency key was seen before: the unit as it is now.
    Replayed(Box<UnitModel>),
    Done(T),
}

impl Outcome<UnitModel> {
    fn unit(self) -> UnitModel {
        match self {
            Self::Replayed(unit) => *unit,
            Self::Done(unit) => unit,
        }
    }
}

/// Input of `release`.
pub struct Release {
    pub unit_id: Uuid,
    pub reason: Option<String>,
    pub outcome: Option<AttemptOutcome>,
}

/// Input of `dispose`.
pub struct Dispose {
    pub unit_id: Uuid,
    pub disposition: Disposition,
    pub evidence_url: Option<String>,
    pub reason: Option<String>,
}

impl Ledger {
    /// Runs `op` in a fleet transaction after the idempotency check, retrying
    /// the races a second run resolves.
    async fn write<T, F>(
        &self,
        who: &Principal,
        operation: &str,
        args: Value,
        key: Option<String>,
        op: F,
    ) -> Result<Outcome<T>, LedgerError>
    where
        T: Send + 'static,
        F: for<'t> Fn(&'t DatabaseTransaction, &'t WriteCtx) -> BoxFuture<'t, Result<T, LedgerError>>
            + Send
            + Sync
            + 'static,
    {
        validate::idempotency_key(key.as_deref())?;
        // Only a keyed request needs its fingerprint.
        let key = key.map(|key| (key, idempotency::fingerprint(operation, &args)));
        let ctx = Arc::new(WriteCtx { who: who.clone(), key });
        let op = Arc::new(op);
        for _ in 0..RETRIES {
            let (ctx, op) = (ctx.clone(), op.clone());
            let result = db::in_fleet(&self.db, &who.fleet, move |tx| {
                Box::pin(async move {
                    if let Some(unit) = idempotency::replayed(tx, &ctx.who.fleet, ctx.writer().key).await? {
                        let unit = units::by_id(tx, unit)
                            .await?
                            .ok_or_else(|| LedgerError::internal("replayed unit vanished"))?;
                        return Ok(Outcome::Replayed(Box::new(unit)));
                    }
                    Ok(Outcome::Done(op(tx, &ctx).await?))
                })
            })
            .await;
            match result {
                Err(LedgerError::Retry) => continue,
                other => return other,
            }
        }
        Err(LedgerError::internal(format!("{operation}: still conflicting after {RETRIES} runs")))
    }

    pub async fn claim_next(
        &self,
        who: &Principal,
        domain: Option<String>,
        lease_seconds: Option<i32>,
        key: Option<String>,
    ) -> Result<Option<UnitModel>, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let lease = validate::lease_seconds(lease_seconds)?;
        if let Some(domain) = &domain {
            validate::label("domain", domain)?;
        }
        let args = json!({ "domain": domain, "leaseSeconds": lease });
        let outcome = self
            .write(who, "claimNext", args, key, move |tx, ctx| {
                let domain = domain.clone();
                Box::pin(async move {
                    let w = ctx.writer();
                    if let Some(unit) = writes::claim_next(tx, &w, lease, domain.as_deref()).await? {
                        return Ok(Some(unit));
                    }
                    // Nothing claimed: either nothing is claimable, or the
                    // agent already holds a unit, which it gets back renewed.
                    if let Some(unit) = writes::heartbeat(tx, &w, lease, None, "claimNext").await? {
                        return Ok(Some(unit));
                    }
                    Ok(writes::held_by(tx, w.fleet, w.agent).await?)
                })
            })
            .await?;
        Ok(match outcome {
            Outcome::Replayed(unit) => Some(*unit),
            Outcome::Done(unit) => unit,
        })
    }

    pub async fn claim_unit(
        &self,
        who: &Principal,
        unit_id: Uuid,
        lease_seconds: Option<i32>,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let lease = validate::lease_seconds(lease_seconds)?;
        let args = json!({ "id": unit_id, "leaseSeconds": lease });
        let outcome = self
            .write(who, "claimUnit", args, key, move |tx, ctx| {
                Box::pin(async move {
                    let w = ctx.writer();
                    if let Some(unit) = writes::claim_unit(tx, &w, lease, unit_id).await? {
                        return Ok(unit);
                    }
                    let unit = load(tx, unit_id).await?;
                    if state_machine::is_holder(&unit, &ctx.who) && unit.state.is_live_claim() {
                        // Claiming what you already hold renews the lease (when it has one).
                        return match unit.current_attempt_id {
                            Some(attempt) if unit.state != WorkState::Blocked => {
                                writes::heartbeat(tx, &w, lease, Some(attempt), "claimUnit")
                                    .await?
                                    .ok_or_else(|| LedgerError::internal("renewal of a held unit failed"))
                            }
                            _ => Ok(unit),
                        };
                    }
                    Err(claim_refusal(tx, &unit, &ctx.who).await)
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn heartbeat(
        &self,
        who: &Principal,
        attempt_id: Uuid,
        lease_seconds: Option<i32>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let lease = validate::lease_seconds(lease_seconds)?;
        let outcome = self
            .write(who, "heartbeat", json!({ "attemptId": attempt_id, "leaseSeconds": lease }), None, move |tx, ctx| {
                Box::pin(async move {
                    if let Some(unit) =
                        writes::heartbeat(tx, &ctx.writer(), lease, Some(attempt_id), "heartbeat").await?
                    {
                        return Ok(unit);
                    }
                    Err(attempt_refusal(tx, attempt_id, &ctx.who, "heartbeat").await)
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn transition(
        &self,
        who: &Principal,
        unit_id: Uuid,
        to: WorkState,
        evidence_url: Option<String>,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        match (to, &evidence_url) {
            (WorkState::Verified, None) => {
                return Err(LedgerError::EvidenceRequired { action: "transition to VERIFIED" });
            }
            (_, Some(url)) => validate::evidence_url(url)?,
            _ => {}
        }
        let args = json!({ "unitId": unit_id, "to": to.api_name(), "evidenceUrl": evidence_url });
        let outcome = self
            .write(who, "transition", args, key, move |tx, ctx| {
                let evidence_url = evidence_url.clone();
                Box::pin(async move {
                    let w = ctx.writer();
                    let written = match (to, evidence_url.as_deref()) {
                        (WorkState::InProgress, _) => writes::start(tx, &w, unit_id).await?,
                        (WorkState::Verified, Some(url)) => writes::verify(tx, &w, unit_id, url).await?,
                        _ => None,
                    };
                    match written {
                        Some(unit) => Ok(unit),
                        None => Err(holder_refusal(tx, unit_id, &ctx.who, to.api_name()).await),
                    }
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn block(
        &self,
        who: &Principal,
        unit_id: Uuid,
        question: String,
        assignee_group: Option<String>,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        validate::long_text("question", &question)?;
        let group = assignee_group.unwrap_or_else(|| DEFAULT_ASSIGNEE_GROUP.to_owned());
        validate::label("assigneeGroup", &group)?;
        let args = json!({ "unitId": unit_id, "question": question, "assigneeGroup": group });
        let outcome = self
            .write(who, "block", args, key, move |tx, ctx| {
                let (question, group) = (question.clone(), group.clone());
                Box::pin(async move {
                    match writes::block(tx, &ctx.writer(), unit_id, &question, &group).await? {
                        Some(unit) => Ok(unit),
                        None => Err(holder_refusal(tx, unit_id, &ctx.who, "BLOCKED").await),
                    }
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn unblock(
        &self,
        who: &Principal,
        unit_id: Uuid,
        answer: String,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::QuestionsAnswer)?;
        validate::long_text("answer", &answer)?;
        let args = json!({ "unitId": unit_id, "answer": answer });
        let outcome = self
            .write(who, "unblock", args, key, move |tx, ctx| {
                let answer = answer.clone();
                Box::pin(async move {
                    let lease = validate::DEFAULT_LEASE_SECONDS;
                    match writes::unblock(tx, &ctx.writer(), unit_id, &answer, lease).await? {
                        Some(unit) => Ok(unit),
                        None => {
                            let unit = load(tx, unit_id).await?;
                            Err(illegal(&unit, &ctx.who, "IN_PROGRESS (unblock)"))
                        }
                    }
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn release(
        &self,
        who: &Principal,
        input: Release,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let outcome = match input.outcome.unwrap_or(AttemptOutcome::Abandoned) {
            o @ (AttemptOutcome::Abandoned | AttemptOutcome::Failed) => o,
            other => {
                return Err(LedgerError::invalid(
                    "outcome",
                    format!("a release ends the attempt as ABANDONED or FAILED, not {other:?}"),
                ));
            }
        };
        if let Some(reason) = &input.reason {
            validate::long_text("reason", reason)?;
        }
        let Release { unit_id, reason, .. } = input;
        let args = json!({ "unitId": unit_id, "reason": reason, "outcome": outcome.as_sql() });
        let result = self
            .write(who, "release", args, key, move |tx, ctx| {
                let reason = reason.clone();
                Box::pin(async move {
                    match writes::release(tx, &ctx.writer(), unit_id, outcome.as_sql(), reason.as_deref()).await? {
                        Some(unit) => Ok(unit),
                        None => Err(holder_refusal(tx, unit_id, &ctx.who, "READY (release)").await),
                    }
                })
            })
            .await?;
        Ok(result.unit())
    }

    pub async fn record_cost(
        &self,
        who: &Principal,
        attempt_id: Uuid,
        cents: i64,
        key: String,
    ) -> Result<UnitModel, LedgerError> {
        let operator = who.has(Permission::UnitsDisposeAny);
        if !operator {
            who.require(Permission::UnitsClaim)?;
        }
        validate::cents(cents)?;
        let args = json!({ "attemptId": attempt_id, "cents": cents });
        let outcome = self
            .write(who, "recordCost", args, Some(key), move |tx, ctx| {
                Box::pin(async move {
                    match writes::record_cost(tx, &ctx.writer(), attempt_id, cents, operator).await? {
                        // A new statement: it sees the roll-up the trigger made.
                        Some(unit_id) => load(tx, unit_id).await,
                        None => Err(match load_attempt(tx, attempt_id).await {
                            Ok(attempt) => {
                                LedgerError::NotClaimHolder { unit_id: attempt.unit_id, holder: Some(attempt.agent_id) }
                            }
                            Err(err) => err,
                        }),
                    }
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn dispose(
        &self,
        who: &Principal,
        input: Dispose,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        let operator = who.has(Permission::UnitsDisposeAny);
        if !operator {
            who.require(Permission::UnitsClaim)?;
        }
        match (&input.evidence_url, input.disposition) {
            (Some(url), _) => validate::evidence_url(url)?,
            (None, Disposition::Migrated) => {} // may reuse the verification evidence
            (None, _) => return Err(LedgerError::EvidenceRequired { action: "dispose" }),
        }
        if let Some(reason) = &input.reason {
            validate::long_text("reason", reason)?;
        }
        let Dispose { unit_id, disposition, evidence_url, reason } = input;
        let (terminal, holder_states, operator_states): (_, &[&str], &[&str]) = match disposition {
            Disposition::Migrated => ("done", &["verified"], &["verified"]),
            _ => {
                ("abandoned", &["in_progress", "blocked"], &["ready", "claimed", "in_progress", "blocked", "verified"])
            }
        };
        let holder_states: Vec<String> = holder_states.iter().map(|s| s.to_string()).collect();
        let operator_states: Vec<String> =
            if operator { operator_states.iter().map(|s| s.to_string()).collect() } else { Vec::new() };
        let args = json!({ "unitId": unit_id, "disposition": disposition.as_sql(), "evidenceUrl": evidence_url, "reason": reason });
        let outcome = self
            .write(who, "dispose", args, key, move |tx, ctx| {
                let (evidence_url, reason) = (evidence_url.clone(), reason.clone());
                let (holder_states, operator_states) = (holder_states.clone(), operator_states.clone());
                Box::pin(async move {
                    let written = writes::dispose(
                        tx,
                        &ctx.writer(),
                        unit_id,
                        disposition.as_sql(),
                        terminal,
                        evidence_url.as_deref(),
                        reason.as_deref(),
                        holder_states,
                        operator_states,
                    )
                    .await?;
                    match written {
                        Some(unit) => Ok(unit),
                        None => Err(dispose_refusal(tx, unit_id, &ctx.who, disposition).await),
                    }
                })
            })
            .await?;
        Ok(outcome.unit())
    }
}

async fn load(tx: &DatabaseTransaction, unit_id: Uuid) -> Result<UnitModel, LedgerError> {
    units::by_id(tx, unit_id).await?.ok_or_else(|| LedgerError::not_found("unit", unit_id))
}

async fn load_attempt(tx: &DatabaseTransaction, attempt_id: Uuid) -> Result<attempt::Model, LedgerError> {
    units::attempt_by_id(tx, attempt_id).await?.ok_or_else(|| LedgerError::not_found("attempt", attempt_id))
}

fn illegal(unit: &UnitModel, who: &Principal, to: &str) -> LedgerError {
    LedgerError::IllegalTransition {
        unit_id: unit.id,
        from: unit.state,
        to: to.to_owned(),
        legal: legal_actions(unit, who, Utc::now()),
    }
}

/// Why a holder-only write on a unit changed nothing.
async fn holder_refusal(tx: &DatabaseTransaction, unit_id: Uuid, who: &Principal, to: &str) -> LedgerError {
    let unit = match load(tx, unit_id).await {
        Ok(unit) => unit,
        Err(err) => return err,
    };
    if unit.state.is_terminal() {
        return illegal(&unit, who, to);
    }
    if !state_machine::is_holder(&unit, who) {
        return not_holder(tx, &unit, who).await;
    }
    illegal(&unit, who, to)
}

/// NOT_CLAIM_HOLDER, or LEASE_LOST when the caller's own attempt on this
/// unit was superseded by a reclaim.
async fn not_holder(tx: &DatabaseTransaction, unit: &UnitModel, who: &Principal) -> LedgerError {
    match units::latest_attempt_of(tx, unit.id, &who.name).await {
        Ok(Some(attempt)) if attempt.outcome == Some(AttemptOutcome::Superseded) => {
            LedgerError::LeaseLost { attempt_id: attempt.id, unit_id: unit.id }
        }
        Ok(_) => LedgerError::NotClaimHolder { unit_id: unit.id, holder: unit.claimed_by.clone() },
        Err(err) => err.into(),
    }
}

/// Why an attempt-fenced write (heartbeat) changed nothing.
async fn attempt_refusal(tx: &DatabaseTransaction, attempt_id: Uuid, who: &Principal, action: &str) -> LedgerError {
    let attempt = match load_attempt(tx, attempt_id).await {
        Ok(attempt) => attempt,
        Err(err) => return err,
    };
    let unit = match load(tx, attempt.unit_id).await {
        Ok(unit) => unit,
        Err(err) => return err,
    };
    if attempt.agent_id != who.name {
        return LedgerError::NotClaimHolder { unit_id: unit.id, holder: unit.claimed_by };
    }
    if attempt.outcome == Some(AttemptOutcome::Superseded) {
        return LedgerError::LeaseLost { attempt_id, unit_id: unit.id };
    }
    illegal(&unit, who, action)
}

/// Why a named claim changed nothing.
async fn claim_refusal(tx: &DatabaseTransaction, unit: &UnitModel, who: &Principal) -> LedgerError {
    let held_elsewhere = match writes::held_by(tx, &who.fleet, &who.name).await {
        Ok(held) => held.filter(|held| held.id != unit.id),
        Err(err) => return err.into(),
    };
    match (unit.state, &unit.claimed_by) {
        (WorkState::Claimed | WorkState::InProgress, Some(holder)) if !state_machine::is_stale(unit, Utc::now()) => {
            LedgerError::UnitAlreadyClaimed {
                unit_id: unit.id,
                holder: holder.clone(),
                until: unit.lease_expires_at.map(|t| t.to_rfc3339()).unwrap_or_default(),
            }
        }
        (WorkState::Blocked, Some(holder)) => LedgerError::UnitAlreadyClaimed {
            unit_id: unit.id,
            holder: holder.clone(),
            until: "its blocking question is answered or it is released".to_owned(),
        },
        (WorkState::Ready | WorkState::Claimed | WorkState::InProgress, _) => match held_elsewhere {
            Some(held) => LedgerError::AgentBusy { held: held.id, held_ref: held.external_ref },
            // The unit became claimable between the write and this read.
            None => LedgerError::Retry,
        },
        _ => illegal(unit, who, "CLAIMED"),
    }
}

/// Why a dispose changed nothing.
async fn dispose_refusal(
    tx: &DatabaseTransaction,
    unit_id: Uuid,
    who: &Principal,
    disposition: Disposition,
) -> LedgerError {
    let unit = match load(tx, unit_id).await {
        Ok(unit) => unit,
        Err(err) => return err,
    };
    if let (Some(existing), Some(at)) = (unit.disposition, unit.disposed_at) {
        return LedgerError::DispositionImmutable { unit_id, disposition: existing, disposed_at: at };
    }
    let holder = state_machine::is_holder(&unit, who);
    let operator = who.has(Permission::UnitsDisposeAny);
    if !holder && !operator {
        return not_holder(tx, &unit, who).await;
    }
    illegal(&unit, who, &format!("dispose {}", disposition.as_sql()))
}
